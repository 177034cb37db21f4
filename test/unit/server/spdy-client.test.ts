/**
 * The SPDY/3.1 client of test/helpers/spdy-client.ts (what the exec-stream benchmark and
 * tests speak to containerd's streaming server with): the dictionary, header blocks
 * through one zlib context per direction, frame encoding and a parser that must give the
 * same frames however the bytes are split, and a session against an in-process server.
 */
import crypto from 'node:crypto';
import net from 'node:net';
import zlib from 'node:zlib';
import { afterEach, describe, expect, it } from 'vitest';
import {
  FLAG_FIN,
  FRAME,
  FrameParser,
  HeaderCompressor,
  SPDY_DICTIONARY,
  SpdySession,
  controlFrame,
  dataFrame,
  packHeaderBlock,
  synStreamPayload,
  unpackHeaderBlock,
  type ParsedFrame,
} from '../../helpers/spdy-client.js';

function adler32(b: Buffer): number {
  let a = 1;
  let s = 0;
  for (const x of b) {
    a = (a + x) % 65521;
    s = (s + a) % 65521;
  }
  return ((s << 16) | a) >>> 0;
}

describe('the SPDY/3 dictionary', () => {
  it('is the 1423 bytes containerd 1.6 decompresses with (the same bytes as in its binary)', () => {
    expect(SPDY_DICTIONARY.length).toBe(1423);
    // sha256 of the dictionary as compiled into /usr/bin/containerd (moby/spdystream's spdy package).
    expect(crypto.createHash('sha256').update(SPDY_DICTIONARY).digest('hex')).toBe('51d27341373f923f3cd88e1eb7162aeaa3723d7585ff2399201dc06498407f02');
    expect(SPDY_DICTIONARY.subarray(0, 11)).toEqual(Buffer.from('\0\0\0\x07options', 'latin1'));
    expect(SPDY_DICTIONARY.subarray(-6).toString()).toBe('enq=0.');
  });
});

describe('header blocks', () => {
  it('pack and unpack: count, then each name and value with its length; names lowercased', () => {
    const block = packHeaderBlock({ streamType: 'stdout', port: '8080' });
    expect(block.toString('latin1')).toBe('\0\0\0\x02\0\0\0\x0astreamtype\0\0\0\x06stdout\0\0\0\x04port\0\0\0\x048080');
    expect(unpackHeaderBlock(block)).toEqual({ streamtype: 'stdout', port: '8080' });
    expect(() => unpackHeaderBlock(block.subarray(0, block.length - 1))).toThrow(/truncated/);
    expect(() => unpackHeaderBlock(Buffer.concat([block, Buffer.from([0])]))).toThrow(/after 2 headers/);
  });

  it('round-trip through one deflate and one inflate context, block after block, with the dictionary', async () => {
    const out = new HeaderCompressor('deflate');
    const inn = new HeaderCompressor('inflate');
    const headers: Record<string, string>[] = [{ streamtype: 'error' }, { streamtype: 'stdin' }, { streamtype: 'stdout' }, { streamtype: 'resize', 'x-extra': 'a\0b' }];
    const blocks = await Promise.all(headers.map((h) => out.encode(h)));
    // The first block opens the zlib stream: FDICT set, the dictionary's Adler-32 named.
    expect(blocks[0]![1]! & 0x20).toBe(0x20);
    expect(blocks[0]!.readUInt32BE(2)).toBe(adler32(SPDY_DICTIONARY));
    // Later blocks continue the same stream (no new zlib header) and are smaller for it.
    expect(blocks[1]!.length).toBeLessThan(blocks[0]!.length);
    // Each block ends with a sync flush: the empty stored block 00 00 FF FF.
    for (const b of blocks) expect(b.subarray(-4)).toEqual(Buffer.from([0, 0, 0xff, 0xff]));
    // An independent inflater with only the dictionary reads the first block.
    expect(unpackHeaderBlock(zlib.inflateSync(blocks[0]!, { dictionary: SPDY_DICTIONARY, finishFlush: zlib.constants.Z_SYNC_FLUSH }))).toEqual({ streamtype: 'error' });
    const decoded = [];
    for (const b of blocks) decoded.push(await inn.decode(b));
    expect(decoded).toEqual(headers);
    out.close();
    inn.close();
  });
});

describe('frames', () => {
  it('control and data frames carry the SPDY/3 head', () => {
    const syn = controlFrame(FRAME.SYN_STREAM, FLAG_FIN, synStreamPayload(5, Buffer.from('hb'), 0, 2));
    expect([...syn.subarray(0, 8)]).toEqual([0x80, 0x03, 0x00, 0x01, 0x01, 0x00, 0x00, 12]);
    expect(syn.readUInt32BE(8)).toBe(5);
    expect(syn[16]).toBe(2 << 5);
    const d = dataFrame(7, FLAG_FIN, Buffer.from('abc'));
    expect([...d]).toEqual([0, 0, 0, 7, 1, 0, 0, 3, 0x61, 0x62, 0x63]);
    expect([...dataFrame(3, FLAG_FIN, Buffer.alloc(0))]).toEqual([0, 0, 0, 3, 1, 0, 0, 0]);
  });

  it('parse to the same frames however the bytes are split', () => {
    const wire = Buffer.concat([
      controlFrame(FRAME.SYN_REPLY, 0, Buffer.from([0, 0, 0, 1, 9, 9])),
      dataFrame(1, 0, Buffer.from('hello ')),
      controlFrame(FRAME.PING, 0, Buffer.from([0, 0, 0, 2])),
      dataFrame(1, FLAG_FIN, Buffer.from('world')),
      dataFrame(3, FLAG_FIN, Buffer.alloc(0)),
      controlFrame(FRAME.GOAWAY, 0, Buffer.alloc(8)),
    ]);
    const collect = (pieces: Buffer[]) => {
      const frames: ParsedFrame[] = [];
      const p = new FrameParser((f) => frames.push(f));
      for (const piece of pieces) p.push(piece);
      // Data pieces joined per frame, so any split compares equal.
      const out: unknown[] = [];
      for (const f of frames) {
        const last = out[out.length - 1] as { kind: string; data?: string } | undefined;
        if (f.kind === 'data') {
          if (last?.kind === 'data') last.data += f.chunk.toString();
          else out.push({ kind: 'data', streamId: f.streamId, data: f.chunk.toString() });
        } else out.push(f.kind === 'control' ? { ...f, payload: [...f.payload] } : f);
      }
      return out;
    };
    const whole = collect([wire]);
    expect(whole).toEqual([
      { kind: 'control', type: FRAME.SYN_REPLY, flags: 0, payload: [0, 0, 0, 1, 9, 9] },
      { kind: 'data-start', streamId: 1, flags: 0, length: 6 },
      { kind: 'data', streamId: 1, data: 'hello ' },
      { kind: 'data-end', streamId: 1, flags: 0 },
      { kind: 'control', type: FRAME.PING, flags: 0, payload: [0, 0, 0, 2] },
      { kind: 'data-start', streamId: 1, flags: FLAG_FIN, length: 5 },
      { kind: 'data', streamId: 1, data: 'world' },
      { kind: 'data-end', streamId: 1, flags: FLAG_FIN },
      { kind: 'data-start', streamId: 3, flags: FLAG_FIN, length: 0 },
      { kind: 'data-end', streamId: 3, flags: FLAG_FIN },
      { kind: 'control', type: FRAME.GOAWAY, flags: 0, payload: [0, 0, 0, 0, 0, 0, 0, 0] },
    ]);
    expect(collect([...wire].map((b) => Buffer.from([b])))).toEqual(whole);
    for (let cut = 1; cut < wire.length; cut++) expect(collect([wire.subarray(0, cut), wire.subarray(cut)])).toEqual(whole);
  });

  it('refuse a control frame of another version', () => {
    const f = controlFrame(FRAME.PING, 0, Buffer.alloc(4));
    f.writeUInt16BE(0x8002, 0);
    expect(() => new FrameParser(() => undefined).push(f)).toThrow(/version 2/);
  });
});

describe('a session', () => {
  const cleanup: (() => void)[] = [];
  afterEach(() => cleanup.splice(0).forEach((c) => c()));

  it('opens streams with compressed headers, gets replies and data, answers the server\'s PING', async () => {
    // A server of the test's own: reads SYN_STREAMs, replies, sends data with FIN on stdout.
    const seen: { id: number; headers: Record<string, string> }[] = [];
    const pings: number[] = [];
    let pinged!: () => void;
    const pingAnswered = new Promise<void>((r) => (pinged = r));
    const server = net.createServer((sock) => {
      const inflate = new HeaderCompressor('inflate');
      const deflate = new HeaderCompressor('deflate');
      const parser = new FrameParser((f) => {
        if (f.kind !== 'control') return;
        if (f.type === FRAME.PING) {
          pings.push(f.payload.readUInt32BE(0));
          pinged();
        }
        if (f.type !== FRAME.SYN_STREAM) return;
        const id = f.payload.readUInt32BE(0);
        void inflate.decode(f.payload.subarray(10)).then(async (headers) => {
          seen.push({ id, headers });
          const reply = await deflate.encode({});
          sock.write(controlFrame(FRAME.SYN_REPLY, 0, Buffer.concat([Buffer.from([0, 0, 0, id]), reply])));
          if (headers.streamtype === 'stdout') {
            sock.write(controlFrame(FRAME.PING, 0, Buffer.from([0, 0, 0, 2])));
            sock.write(dataFrame(id, 0, Buffer.alloc(100_000, 0x61)));
            sock.write(dataFrame(id, FLAG_FIN, Buffer.from('end')));
          }
        });
      });
      sock.on('data', (d: Buffer) => parser.push(d));
      sock.on('close', () => (inflate.close(), deflate.close()));
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    cleanup.push(() => server.close());
    const sock = net.connect((server.address() as net.AddressInfo).port, '127.0.0.1');
    await new Promise((r) => sock.once('connect', r));
    const session = new SpdySession(sock);
    cleanup.push(() => session.destroy());
    const error = session.openStream({ streamType: 'error' });
    const stdout = session.openStream({ streamType: 'stdout' });
    let bytes = 0;
    stdout.onData = (c) => (bytes += c.length);
    expect(await error.reply).toEqual({});
    await stdout.ended;
    expect(bytes).toBe(100_003);
    expect(seen).toEqual([
      { id: 1, headers: { streamtype: 'error' } },
      { id: 3, headers: { streamtype: 'stdout' } },
    ]);
    await pingAnswered;
    expect(pings).toEqual([2]);
  });
});

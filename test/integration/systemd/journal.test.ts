/**
 * nodelet's logs as an operator reads them from journald under a real systemd 252:
 * `journalctl -u nodelet -o json` stores each JSON line nodelet prints with PRIORITY from
 * its level (the `<N>` prefix stripped) and SYSLOG_IDENTIFIER=nodelet; `journalctl -u
 * nodelet -p warning` returns exactly nodelet's warning and error lines (plus systemd's own
 * lines about the unit); a record longer than journald's LineMax (48K) is not torn into
 * invalid JSON fragments.
 *
 * Warnings come from unknown configuration fields (one per field); one field's NAME is
 * 60,000 characters long, so its warning would exceed LineMax. Error lines come from a
 * start with an invalid drop-in.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { bootBox, type Box } from '../../systemd/harness.js';
import { BOX_CONFIG_DIR, BOX_CONFIG_PATH, installNodelet, journal, messageText, testConfig, waitActive, type JournalEntry } from '../../systemd/nodelet-box.js';

const LONG_FIELD = `longFieldForTest${'x'.repeat(60_000 - 'longFieldForTest'.length)}`;
const LINE_MAX = 48 * 1024;
const PRIORITY: Record<string, string> = { fatal: '2', error: '3', warn: '4', info: '6', debug: '7', trace: '7' };

interface Rec {
  level: string;
  msg: string;
  truncated?: number;
  [k: string]: unknown;
}

let box: Box;
let runPid: number;

beforeAll(async () => {
  box = await bootBox();
  console.log(`[systemd] box booted in ${box.bootMs} ms`);
  await installNodelet(box, { config: testConfig(['unknownFieldForTest: 1']) });
  // A JSON drop-in (YAML's implicit keys stop at 1024 characters; JSON's do not).
  await box.writeFile(
    `${BOX_CONFIG_DIR}/50-long.conf`,
    JSON.stringify({ apiVersion: 'kubelet.config.k8s.io/v1beta1', kind: 'KubeletConfiguration', [LONG_FIELD]: 1 }),
  );
  await box.run(['systemctl', 'start', 'nodelet']);
  runPid = await waitActive(box, 'nodelet');
  await box.run(['systemctl', 'stop', 'nodelet']);
});

afterAll(async () => {
  await box?.poweroff();
});

const fromNodelet = (e: JournalEntry) => e._SYSTEMD_UNIT === 'nodelet.service' && e._PID !== '1';

describe('journalctl -u nodelet', () => {
  it('stores every line of a nodelet run as one JSON record, PRIORITY from its level, <N> stripped, SYSLOG_IDENTIFIER=nodelet', async () => {
    const entries = (await journal(box, ['-u', 'nodelet'])).filter((e) => e._PID === String(runPid));
    expect(entries.length).toBeGreaterThanOrEqual(5);
    const levels = new Set<string>();
    for (const e of entries) {
      const text = messageText(e);
      expect(text).not.toMatch(/^</);
      let rec: Rec;
      try {
        rec = JSON.parse(text) as Rec;
      } catch {
        throw new Error(`a nodelet journal entry is not one JSON record: ${text.slice(0, 300)}`);
      }
      expect({ id: e.SYSLOG_IDENTIFIER, prio: e.PRIORITY, transport: e._TRANSPORT }).toEqual({ id: 'nodelet', prio: PRIORITY[rec.level], transport: 'stdout' });
      levels.add(rec.level);
    }
    expect([...levels].sort()).toEqual(['info', 'warn']);
    const msgs = entries.map((e) => (JSON.parse(messageText(e)) as Rec).msg);
    expect(msgs).toContain(`${BOX_CONFIG_PATH}: unknownFieldForTest: unknown field "unknownFieldForTest" (ignored)`);
    expect(msgs).toContain('nodelet is ready');
    expect(msgs).toContain('nodelet stopped');
  });

  it('a record over LineMax stays one valid JSON line, shortened, with a `truncated` field', async () => {
    const entries = (await journal(box, ['-u', 'nodelet'])).filter((e) => e._PID === String(runPid));
    const mentioning = entries.filter((e) => messageText(e).includes('longFieldForTest'));
    // One entry, not a record torn into fragments by journald.
    expect(mentioning).toHaveLength(1);
    const e = mentioning[0]!;
    const text = messageText(e);
    expect(Buffer.byteLength(text)).toBeLessThan(LINE_MAX);
    const rec = JSON.parse(text) as Rec;
    expect(rec.level).toBe('warn');
    expect(e.PRIORITY).toBe('4');
    expect(rec.truncated).toBeGreaterThan(LINE_MAX);
    expect(rec.msg.startsWith(`${BOX_CONFIG_DIR}/50-long.conf: longFieldForTestxxx`)).toBe(true);
  });

  it('an invalid drop-in: the error record is stored at PRIORITY 3 naming the file and field, and systemd logs the failed start', async () => {
    await box.writeFile(`${BOX_CONFIG_DIR}/60-bad.conf`, testConfig(['nodeStatusUpdateFrequency: 10 parsecs']));
    const r = await box.exec(['systemctl', 'start', 'nodelet']);
    expect(r.code).not.toBe(0);
    // Restart=always would retry every second: stop it and put the configuration right.
    await box.run(['systemctl', 'stop', 'nodelet']);
    await box.run(['rm', `${BOX_CONFIG_DIR}/60-bad.conf`]);

    const entries = await journal(box, ['-u', 'nodelet']);
    const errors = entries.filter(fromNodelet).flatMap((e) => {
      try {
        const rec = JSON.parse(messageText(e)) as Rec;
        return rec.level === 'error' ? [{ e, rec }] : [];
      } catch {
        return [];
      }
    });
    expect(errors.length).toBeGreaterThanOrEqual(1);
    const { e, rec } = errors[0]!;
    expect(e.PRIORITY).toBe('3');
    expect(rec.msg).toBe('invalid configuration');
    expect(rec.problems).toContainEqual(expect.objectContaining({ file: `${BOX_CONFIG_DIR}/60-bad.conf`, field: 'nodeStatusUpdateFrequency' }));
    const systemd = entries.filter((x) => x._PID === '1').map(messageText);
    expect(systemd).toContain('nodelet.service: Main process exited, code=exited, status=1/FAILURE');
  });

  it('-p warning returns exactly nodelet\'s warning and error records, and otherwise only systemd\'s lines about the unit', async () => {
    const all = (await journal(box, ['-u', 'nodelet'])).filter(fromNodelet);
    const expected = all
      .filter((e) => {
        try {
          return ['warn', 'error', 'fatal'].includes((JSON.parse(messageText(e)) as Rec).level);
        } catch {
          return false;
        }
      })
      .map((e) => e.__CURSOR);
    expect(expected.length).toBeGreaterThanOrEqual(3); // two unknown fields, one invalid drop-in
    const warning = await journal(box, ['-u', 'nodelet', '-p', 'warning']);
    expect(warning.filter(fromNodelet).map((e) => e.__CURSOR)).toEqual(expected);
    for (const e of warning.filter((x) => !fromNodelet(x))) {
      expect({ pid: e._PID, id: e.SYSLOG_IDENTIFIER }).toEqual({ pid: '1', id: 'systemd' });
    }
    // The text an operator reads (`-o cat`) for the good run: exactly its warn records, in order,
    // among them the two unknown fields and the runtime that is not there (no containerd in this box).
    const cat = await box.run(['journalctl', '--no-pager', '-p', 'warning', '-o', 'cat', '_SYSTEMD_UNIT=nodelet.service', `_PID=${runPid}`]);
    const runAll = (await journal(box, ['-u', 'nodelet'])).filter((e) => e._PID === String(runPid)).map((e) => JSON.parse(messageText(e)) as Rec);
    const warned = cat.split('\n').filter(Boolean).map((l) => JSON.parse(l) as Rec);
    expect(warned.map((r) => r.msg)).toEqual(runAll.filter((r) => r.level === 'warn' || r.level === 'error').map((r) => r.msg));
    expect(warned.every((r) => r.level === 'warn')).toBe(true);
    expect(warned.filter((r) => /unknownFieldForTest|longFieldForTest/.test(r.msg)).length).toBe(2);
    expect(warned.some((r) => /container runtime unix:\/\/\/run\/containerd\/containerd\.sock is not ready/.test(r.msg))).toBe(true);
  });
});

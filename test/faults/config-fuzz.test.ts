/**
 * (d) Hostile configuration in volume: generated KubeletConfiguration files and drop-ins
 * (deep nesting, huge strings, wrong types, duplicate keys, non-UTF-8 bytes, alias bombs,
 * random byte damage of a valid file) through the loader `nodelet config view` uses
 * (loadConfig, then renderConfig), in-process. Each must be accepted or refused with a
 * ConfigError whose every problem names its file and says something; never another
 * exception, never longer than the deadline, and nothing written in the folder.
 * Short: 500 cases; full (--full): 10,000.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { ConfigError, loadConfig, renderConfig } from '../../src/config/index.js';
import { pick, rng, SEED, Tally } from './report.js';

const CASES = pick(500, 10_000);
const DEADLINE_MS = 10_000;
const tally = new Tally('config-fuzz');
afterAll(() => tally.write());

const HEADER = 'apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n';
/** Real fields with their right types, to put wrong ones in. */
const FIELDS = ['port', 'readOnlyPort', 'address', 'staticPodPath', 'maxPods', 'evictionHard', 'authentication', 'authorization', 'featureGates', 'nodeStatusUpdateFrequency', 'runtimeRequestTimeout', 'clusterDNS', 'podCIDR', 'containerRuntimeEndpoint', 'tlsCertFile', 'healthzPort', 'serializeImagePulls', 'seccompDefault', 'podLogsDir', 'kubeReserved'];
const WRONG = ['-1', '99999999999999999999', '1.5', 'true', 'null', '[]', '{}', '"x"', '[1, [2, [3]]]', '{a: {b: {c: 1}}}', '"1h2x"', '"..\\/..\\/etc"', '"\\u0000"', '0x7fffffff', '.inf', '-.nan', '~', '"' + 'é'.repeat(40) + '"', '!!binary aGVsbG8=', '2001-12-14t21:59:43.10-05:00'];

type Kind = 'deep' | 'huge' | 'wrong-type' | 'duplicate' | 'non-utf8' | 'alias-bomb' | 'damaged' | 'many-keys' | 'json' | 'valid';
const KINDS: Kind[] = ['deep', 'huge', 'wrong-type', 'duplicate', 'non-utf8', 'alias-bomb', 'damaged', 'many-keys', 'json', 'valid'];

function generate(r: ReturnType<typeof rng>, kind: Kind): Buffer {
  switch (kind) {
    case 'deep': {
      const depth = 1 + r.int(r.next() < 0.8 ? 150 : 5000);
      const flow = r.next() < 0.5;
      if (flow) return Buffer.from(`${HEADER}featureGates: ${'['.repeat(depth)}1${']'.repeat(depth)}\n`);
      let s = `${HEADER}evictionHard:\n`;
      for (let i = 0; i < Math.min(depth, 400); i++) s += `${'  '.repeat(i + 1)}k${i}:\n`;
      return Buffer.from(`${s}${'  '.repeat(Math.min(depth, 400) + 1)}x\n`);
    }
    case 'huge': {
      const n = r.pick([2000, 70_000, 600_000, 1_100_000]);
      return Buffer.from(`${HEADER}${r.pick(FIELDS)}: "${'A'.repeat(n)}"\n`);
    }
    case 'wrong-type': {
      let s = HEADER;
      for (let i = 0, n = 1 + r.int(5); i < n; i++) s += `${r.pick(FIELDS)}${r.next() < 0.3 ? String(i) : ''}: ${r.pick(WRONG)}\n`;
      return Buffer.from(s);
    }
    case 'duplicate': {
      const f = r.pick(FIELDS);
      return Buffer.from(r.next() < 0.5 ? `${HEADER}${f}: 1\n${f}: 2\n` : `{"apiVersion":"kubelet.config.k8s.io/v1beta1","kind":"KubeletConfiguration","${f}":1,"${f}":2}`);
    }
    case 'non-utf8': {
      const b = Buffer.from(`${HEADER}staticPodPath: /etc/kubernetes/manifests\naddress: 0.0.0.0\n`);
      for (let i = 0, n = 1 + r.int(8); i < n; i++) b[r.int(b.length)] = r.pick([0xff, 0xfe, 0xc0, 0x80, 0xed, 0x00]);
      return b;
    }
    case 'alias-bomb': {
      const levels = 3 + r.int(8);
      let s = `${HEADER}x0: &a0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n`;
      for (let i = 1; i < levels; i++) s += `x${i}: &a${i} [${Array.from({ length: 9 }, () => `*a${i - 1}`).join(',')}]\n`;
      return Buffer.from(`${s}featureGates: *a${levels - 1}\n`);
    }
    case 'damaged': {
      const b = Buffer.from(`${HEADER}port: 10250\naddress: "127.0.0.1"\nauthentication: {anonymous: {enabled: false}}\nevictionHard: {memory.available: 100Mi}\nfeatureGates: {ContainerCheckpoint: true}\n`);
      for (let i = 0, n = 1 + r.int(6); i < n; i++) b[r.int(b.length)] = r.int(256);
      return b;
    }
    case 'many-keys': {
      const n = r.pick([100, 5000, 30_000]);
      let s = `${HEADER}featureGates:\n`;
      for (let i = 0; i < n; i++) s += `  G${i}: true\n`;
      return Buffer.from(s);
    }
    case 'json':
      return Buffer.from(JSON.stringify({ apiVersion: 'kubelet.config.k8s.io/v1beta1', kind: 'KubeletConfiguration', [r.pick(FIELDS)]: r.pick([1, 'x', null, [], {}, true, -5, 1e308]) }));
    case 'valid':
      return Buffer.from(`${HEADER}port: ${1 + r.int(65535)}\nmaxPods: ${1 + r.int(500)}\nserializeImagePulls: ${r.next() < 0.5}\n`);
  }
}

/** Names, sizes and mtimes of everything under `dir`: what "nothing written" is checked against. */
function snapshot(dir: string): string[] {
  return fs.readdirSync(dir, { recursive: true, withFileTypes: true }).map((e) => {
    const p = path.join(e.parentPath, e.name);
    const st = fs.lstatSync(p);
    return `${path.relative(dir, p)} ${st.size} ${st.mtimeMs}`;
  }).sort();
}

describe(`generated configuration files (seed ${SEED})`, () => {
  it(`${CASES} files and drop-ins: each accepted or refused with a clear error, none crashes or hangs, nothing written`, async () => {
    const r = rng(SEED);
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'nodelet-cfgfuzz-'));
    const failures: string[] = [];
    let slowest = 0;
    try {
      for (let i = 0; i < CASES; i++) {
        const kind = KINDS[i % KINDS.length]!;
        const asDropIn = r.next() < 0.3;
        const data = generate(r, kind);
        const caseDir = path.join(dir, `c${i}`);
        const file = asDropIn ? path.join(caseDir, 'd', '10-x.conf') : path.join(caseDir, 'kubelet.yaml');
        fs.mkdirSync(path.dirname(file), { recursive: true });
        fs.writeFileSync(file, data);
        const before = snapshot(caseDir);
        const t0 = performance.now();
        let timer: NodeJS.Timeout | undefined;
        try {
          const loaded = await Promise.race([
            loadConfig(asDropIn ? { configDir: path.dirname(file) } : { configFile: file }),
            new Promise<never>((_, reject) => (timer = setTimeout(() => reject(new Error(`hang: no answer within ${DEADLINE_MS} ms`)), DEADLINE_MS))),
          ]);
          renderConfig(loaded, { showOrigin: true });
          tally.add('accepted');
        } catch (err) {
          if (err instanceof ConfigError && err.problems.length > 0 && err.problems.every((p) => p.file && p.message.length > 0)) tally.add('refused with a clear error');
          else {
            tally.add('crashes');
            failures.push(`case ${i} (${kind}${asDropIn ? ', drop-in' : ''}): ${err instanceof Error ? `${err.name}: ${err.message.slice(0, 300)}` : String(err)}`);
          }
        } finally {
          clearTimeout(timer);
        }
        slowest = Math.max(slowest, performance.now() - t0);
        tally.add(`kind ${kind}`);
        tally.add('cases');
        if (asDropIn) tally.add('drop-ins');
        const after = snapshot(caseDir);
        if (after.join('\n') !== before.join('\n')) {
          tally.add('files written');
          failures.push(`case ${i} (${kind}): the folder changed: ${after.join(', ')}`);
        }
        fs.rmSync(caseDir, { recursive: true, force: true });
      }
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
    tally.note('slowest case (ms)', Math.round(slowest));
    tally.add('crashes', 0);
    tally.add('files written', 0);
    expect(failures).toEqual([]);
    expect(tally.counts.cases).toBe(CASES);
  });
});

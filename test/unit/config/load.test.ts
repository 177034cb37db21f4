/**
 * loadConfig on real files in temporary directories: formats, drop-in discovery and order,
 * file-level errors, and that loading writes nothing.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { NodeletError } from '../../../src/errors.js';
import { loadConfig, type LoadConfigOptions } from '../../../src/config/load.js';
import { ConfigError } from '../../../src/config/validate.js';
import type { ConfigProblem } from '../../../src/config/types.js';

const HEADER = 'apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n';

let dir: string;
beforeEach(() => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'nodelet-config-'));
});
afterEach(() => {
  fs.rmSync(dir, { recursive: true, force: true });
});

function write(rel: string, text: string): string {
  const p = path.join(dir, rel);
  fs.mkdirSync(path.dirname(p), { recursive: true });
  fs.writeFileSync(p, text);
  return p;
}

async function problemsOf(opts: LoadConfigOptions): Promise<ConfigProblem[]> {
  try {
    await loadConfig(opts);
  } catch (err) {
    expect(err).toBeInstanceOf(ConfigError);
    expect(err).toBeInstanceOf(NodeletError);
    expect((err as ConfigError).code).toBe('CONFIG_INVALID');
    return (err as ConfigError).details.problems as ConfigProblem[];
  }
  throw new Error('loadConfig did not fail');
}

describe('file formats', () => {
  it('reads a YAML main file', async () => {
    const main = write('kubelet.yaml', `${HEADER}port: 11250\nclusterDNS:\n  - 10.96.0.10\n`);
    const loaded = await loadConfig({ configFile: main });
    expect(loaded.config.port).toBe(11250);
    expect(loaded.config.clusterDNS).toEqual(['10.96.0.10']);
    expect(loaded.sources).toEqual([main]);
    expect(loaded.origins.get('port')).toBe(main);
  });

  it('reads a JSON main file', async () => {
    const main = write(
      'kubelet.json',
      JSON.stringify({ apiVersion: 'kubelet.config.k8s.io/v1beta1', kind: 'KubeletConfiguration', port: 11250, featureGates: { GracefulNodeShutdown: false } }),
    );
    const loaded = await loadConfig({ configFile: main });
    expect(loaded.config.port).toBe(11250);
    expect(loaded.config.featureGates).toEqual({ GracefulNodeShutdown: false });
    expect(loaded.origins.get('featureGates.GracefulNodeShutdown')).toBe(main);
  });

  it('reads YAML as YAML 1.1, like the kubelet (yes/no are booleans)', async () => {
    const main = write('kubelet.yaml', `${HEADER}failSwapOn: no\nseccompDefault: yes\n`);
    const { config } = await loadConfig({ configFile: main });
    expect([config.failSwapOn, config.seccompDefault]).toEqual([false, true]);
  });

  it('resolves a relative --config path to the absolute path it reports', async () => {
    const main = write('kubelet.yaml', `${HEADER}port: 11250\n`);
    const rel = path.relative(process.cwd(), main);
    const loaded = await loadConfig({ configFile: rel });
    expect(loaded.sources).toEqual([main]);
    expect(loaded.origins.get('port')).toBe(main);
  });
});

describe('drop-in directory', () => {
  it('applies *.conf files in lexical order, walking nested directories, and ignores other files', async () => {
    const main = write('kubelet.yaml', `${HEADER}maxPods: 10\n`);
    const d = path.join(dir, 'kubelet.conf.d');
    const f10 = write('kubelet.conf.d/10-a.conf', `${HEADER}maxPods: 11\nport: 10001\n`);
    const f20 = write('kubelet.conf.d/20-b/05-x.conf', `${HEADER}maxPods: 12\nreadOnlyPort: 10002\n`);
    const f30 = write('kubelet.conf.d/30-c.conf', `${HEADER}maxPods: 13\n`);
    const f05 = write('kubelet.conf.d/05-first.conf', `${HEADER}maxPods: 9\nhealthzPort: 10003\n`);
    // Not drop-ins: garbage that would fail if read.
    write('kubelet.conf.d/99-z.conf.bak', 'port: [');
    write('kubelet.conf.d/README.md', 'not yaml: [');
    write('kubelet.conf.d/40.yaml', `${HEADER}maxPods: 99\n`);
    write('kubelet.conf.d/20-b/notes.txt', '::');
    const loaded = await loadConfig({ configFile: main, configDir: d });
    expect(loaded.sources).toEqual([main, f05, f10, f20, f30]);
    expect(loaded.config.maxPods).toBe(13);
    expect(loaded.origins.get('maxPods')).toBe(f30);
    expect(loaded.origins.get('port')).toBe(f10);
    expect(loaded.origins.get('readOnlyPort')).toBe(f20);
    expect(loaded.origins.get('healthzPort')).toBe(f05);
  });

  it('walks a subdirectory before a sibling file whose name sorts after it, as the kubelet\'s WalkDir does', async () => {
    const inner = write('d/b/x.conf', `${HEADER}maxPods: 1\n`);
    const outer = write('d/b.conf', `${HEADER}maxPods: 2\n`);
    const loaded = await loadConfig({ configDir: path.join(dir, 'd') });
    expect(loaded.sources).toEqual([inner, outer]);
    expect(loaded.config.maxPods).toBe(2);
  });

  it('works without --config: defaults, then the drop-ins', async () => {
    const f = write('d/10.conf', `${HEADER}port: 10001\n`);
    const loaded = await loadConfig({ configDir: path.join(dir, 'd') });
    expect(loaded.sources).toEqual([f]);
    expect(loaded.config.port).toBe(10001);
    expect(loaded.origins.get('healthzPort')).toBe('default');
  });

  it('an empty drop-in directory changes nothing', async () => {
    fs.mkdirSync(path.join(dir, 'd'));
    const loaded = await loadConfig({ configDir: path.join(dir, 'd') });
    expect(loaded.sources).toEqual([]);
    expect(loaded.config.port).toBe(10250);
  });

  it('flags win over the drop-ins', async () => {
    write('d/10.conf', `${HEADER}port: 10001\nclusterDNS: [10.0.0.1]\n`);
    const loaded = await loadConfig({ configDir: path.join(dir, 'd'), flagOverrides: { port: 10002, clusterDNS: ['10.0.0.2'] } });
    expect([loaded.config.port, loaded.config.clusterDNS]).toEqual([10002, ['10.0.0.2']]);
    expect([loaded.origins.get('port'), loaded.origins.get('clusterDNS')]).toEqual(['flag', 'flag']);
  });
});

describe('no configuration', () => {
  it('without --config or --config-dir: defaults, then flags', async () => {
    const loaded = await loadConfig({ flagOverrides: { maxPods: 20 } });
    expect(loaded.sources).toEqual([]);
    expect(loaded.config.maxPods).toBe(20);
    expect(loaded.config.port).toBe(10250);
    expect(loaded.origins.get('maxPods')).toBe('flag');
    expect(loaded.warnings).toEqual([]);
  });
});

describe('file-level errors name the file', () => {
  it('missing --config file', async () => {
    const missing = path.join(dir, 'nope.yaml');
    expect(await problemsOf({ configFile: missing })).toEqual([{ file: missing, field: '', message: '--config file does not exist' }]);
  });

  it('missing --config-dir directory', async () => {
    const missing = path.join(dir, 'nope.d');
    expect(await problemsOf({ configDir: missing })).toEqual([{ file: missing, field: '', message: '--config-dir directory does not exist' }]);
  });

  it('--config-dir that is a file', async () => {
    const f = write('file.conf', HEADER);
    expect(await problemsOf({ configDir: f })).toEqual([{ file: f, field: '', message: '--config-dir directory is not a directory' }]);
  });

  it('--config that is a directory', async () => {
    expect(await problemsOf({ configFile: dir })).toEqual([{ file: dir, field: '', message: '--config file is a directory, expected a file' }]);
  });

  it('malformed YAML: the file and the line', async () => {
    const main = write('kubelet.yaml', `${HEADER}port: 10250\nclusterDNS: [10.0.0.1\nmaxPods: 3\n`);
    const problems = await problemsOf({ configFile: main });
    expect(problems).toHaveLength(1);
    expect(problems[0]).toEqual({ file: main, field: '', message: expect.stringMatching(/^malformed YAML\/JSON at line \d+, column \d+: /) });
  });

  it('malformed JSON in a drop-in: the drop-in and the line', async () => {
    const main = write('kubelet.yaml', HEADER);
    const bad = write('d/10.conf', '{\n  "apiVersion": "kubelet.config.k8s.io/v1beta1",\n  "kind": "KubeletConfiguration",\n  "port": 1,,\n}\n');
    const problems = await problemsOf({ configFile: main, configDir: path.join(dir, 'd') });
    expect(problems).toEqual([{ file: bad, field: '', message: expect.stringMatching(/^malformed YAML\/JSON at line 4, column \d+/) }]);
  });

  it('duplicate keys are malformed', async () => {
    const main = write('kubelet.yaml', `${HEADER}port: 1\nport: 2\n`);
    expect(await problemsOf({ configFile: main })).toEqual([
      { file: main, field: '', message: expect.stringMatching(/^malformed YAML\/JSON at line 4, column 1: .*unique/) },
    ]);
  });

  it('wrong kind in the main file', async () => {
    const main = write('kubelet.yaml', 'apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeProxyConfiguration\n');
    expect(await problemsOf({ configFile: main })).toEqual([
      { file: main, field: 'kind', message: 'expected KubeletConfiguration, got string "KubeProxyConfiguration"' },
    ]);
  });

  it('missing apiVersion in a drop-in names the drop-in', async () => {
    const main = write('kubelet.yaml', HEADER);
    const drop = write('d/10.conf', 'kind: KubeletConfiguration\nport: 10251\n');
    expect(await problemsOf({ configFile: main, configDir: path.join(dir, 'd') })).toEqual([
      { file: drop, field: 'apiVersion', message: 'missing; expected kubelet.config.k8s.io/v1beta1' },
    ]);
  });

  it('an empty drop-in is an error (it has no apiVersion/kind)', async () => {
    const drop = write('d/10.conf', '');
    expect(await problemsOf({ configDir: path.join(dir, 'd') })).toEqual([
      { file: drop, field: '', message: expect.stringMatching(/expected a KubeletConfiguration object .*got an empty document/) },
    ]);
  });

  it('several YAML documents in one file are an error', async () => {
    const main = write('kubelet.yaml', `${HEADER}---\n${HEADER}`);
    expect(await problemsOf({ configFile: main })).toEqual([
      { file: main, field: '', message: 'holds 2 YAML documents; expected exactly one KubeletConfiguration' },
    ]);
  });
});

describe('all problems are reported together', () => {
  it('two bad fields in two files, a malformed drop-in and a bad flag: all named, in the order the files apply', async () => {
    const main = write('kubelet.yaml', `${HEADER}port: abc\n`);
    const a = write('d/10-a.conf', `${HEADER}nodeStatusUpdateFrequency: 10\n`);
    const b = write('d/20-b.conf', `${HEADER}clusterDNS: [\n`);
    const c = write('d/30-c.conf', `${HEADER}evictionHard:\n  memory.available: 1.5.3Gi\n`);
    let caught: unknown;
    try {
      await loadConfig({ configFile: main, configDir: path.join(dir, 'd'), flagOverrides: { healthzPort: 70000 } });
    } catch (err) {
      caught = err;
    }
    expect(caught).toBeInstanceOf(ConfigError);
    const problems = (caught as ConfigError).problems;
    expect(problems.map((p) => [p.file, p.field])).toEqual([
      [main, 'port'],
      [a, 'nodeStatusUpdateFrequency'],
      [b, ''],
      [c, 'evictionHard.memory.available'],
      ['flag', 'healthzPort'],
    ]);
    const lines = (caught as Error).message.split('\n');
    expect(lines).toHaveLength(5);
    expect(lines[0]).toBe(`${main}: port: must be an integer, got string "abc"`);
    expect(lines[1]).toBe(`${a}: nodeStatusUpdateFrequency: must be a duration string such as "10s", "2m0s" or "1h30m", got number 10`);
    expect(lines[3]).toMatch(new RegExp(`^${c.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}: evictionHard\\.memory\\.available: "1\\.5\\.3Gi" is not a valid quantity`));
  });
});

describe('warnings', () => {
  it('an unknown field is a warning naming file and field; loading succeeds', async () => {
    const main = write('kubelet.yaml', `${HEADER}port: 11250\nfrobnicate: true\n`);
    const drop = write('d/10.conf', `${HEADER}authorization:\n  webhook:\n    cacheTTL: 1m\n`);
    const loaded = await loadConfig({ configFile: main, configDir: path.join(dir, 'd') });
    expect(loaded.config.port).toBe(11250);
    expect(loaded.warnings).toEqual([
      { file: main, field: 'frobnicate', message: 'unknown field "frobnicate" (ignored)' },
      { file: drop, field: 'authorization.webhook.cacheTTL', message: 'unknown field "cacheTTL" (ignored)' },
    ]);
  });
});

describe('loading writes nothing', () => {
  function snapshot(root: string): Record<string, string> {
    const out: Record<string, string> = {};
    const walk = (d: string) => {
      for (const e of fs.readdirSync(d, { withFileTypes: true })) {
        const p = path.join(d, e.name);
        const st = fs.statSync(p);
        out[p] = `${st.mode}:${st.size}:${st.mtimeMs}`;
        if (e.isDirectory()) walk(p);
        else out[p] += `:${fs.readFileSync(p, 'utf8')}`;
      }
    };
    walk(root);
    return out;
  }

  it('leaves the config files and directories exactly as they were, valid or not', async () => {
    const main = write('kubelet.yaml', `${HEADER}port: 11250\n`);
    write('d/10.conf', `${HEADER}maxPods: 20\n`);
    write('bad/10.conf', `${HEADER}port: x\n`);
    const before = snapshot(dir);
    await loadConfig({ configFile: main, configDir: path.join(dir, 'd') });
    await expect(loadConfig({ configFile: main, configDir: path.join(dir, 'bad') })).rejects.toBeInstanceOf(ConfigError);
    expect(snapshot(dir)).toEqual(before);
  });
});

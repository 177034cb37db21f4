/**
 * `config view` rendering: the merge fixture (used by the process test of
 * `nodelet config view --show-origin`), origins on every leaf line, stable order, and YAML
 * that loads back to the same configuration.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import YAML from 'yaml';
import { loadConfig } from '../../../src/config/load.js';
import { renderConfig } from '../../../src/config/view.js';
import type { LoadedConfig } from '../../../src/config/types.js';

const FIXTURE = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../fixtures/config/merge');
const MAIN = path.join(FIXTURE, 'kubelet.yaml');
const DROP_DIR = path.join(FIXTURE, 'kubelet.conf.d');
const A = path.join(DROP_DIR, '10-a.conf');
const B = path.join(DROP_DIR, '20-b.conf');
const HEADER = 'apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n';

let dir: string;
beforeEach(() => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'nodelet-view-'));
});
afterEach(() => {
  fs.rmSync(dir, { recursive: true, force: true });
});

/** Renders, writes the text as a main file, loads it again: the configuration must be the same. */
async function roundTrip(loaded: LoadedConfig, showOrigin: boolean): Promise<void> {
  const text = renderConfig(loaded, { showOrigin });
  const file = path.join(dir, `rendered-${showOrigin}.yaml`);
  fs.writeFileSync(file, text);
  const again = await loadConfig({ configFile: file });
  expect(again.config).toEqual(loaded.config);
  expect(again.warnings.map((w) => w.message)).toEqual(loaded.warnings.map((w) => w.message));
  expect(YAML.parse(text, { version: '1.1' })).toEqual({
    apiVersion: 'kubelet.config.k8s.io/v1beta1',
    kind: 'KubeletConfiguration',
    ...loaded.config,
  });
}

describe('the merge fixture with --show-origin', () => {
  it('shows each merge rule applied, with the origin of every leaf', async () => {
    const loaded = await loadConfig({ configFile: MAIN, configDir: DROP_DIR });
    expect(loaded.sources).toEqual([MAIN, A, B]);
    expect(loaded.warnings).toEqual([]);
    const lines = renderConfig(loaded, { showOrigin: true }).split('\n');
    const expected = [
      // scalar replaced by a later drop-in
      `port: 12250 # ${B}`,
      // scalar kept from the main file
      `staticPodPath: /etc/kubernetes/manifests # ${MAIN}`,
      // null in a drop-in brings the default back
      'maxPods: 110 # default',
      // nested structure merged field by field
      'authorization:',
      `  mode: AlwaysAllow # ${MAIN}`,
      '  webhook:',
      `    cacheAuthorizedTTL: 2m0s # ${A}`,
      `    cacheUnauthorizedTTL: 1m0s # ${MAIN}`,
      // list replaced whole: one leaf
      `clusterDNS: [10.96.0.53] # ${B}`,
      // map merged key by key, each key its own origin
      'featureGates:',
      `  ContainerCheckpoint: true # ${MAIN}`,
      `  GracefulNodeShutdown: true # ${A}`,
      `  MemoryQoS: true # ${B}`,
      // map of lists: the overridden key's list replaced, the other key kept
      'staticPodURLHeader:',
      `  site-a: [a3] # ${A}`,
      `  site-b: [b1] # ${MAIN}`,
      // defaults included
      'healthzPort: 10248 # default',
      'containerRuntimeEndpoint: unix:///run/containerd/containerd.sock # default',
      '  memory.available: 100Mi # default',
    ];
    for (const line of expected) expect(lines).toContain(line);
    // The ignored files in the drop-in directory had no effect (30-disabled.conf.bak sets port 1).
    expect(lines).not.toContain(expect.stringContaining('README'));
  });

  it('puts apiVersion and kind first, then the fields in sorted order', async () => {
    const loaded = await loadConfig({ configFile: MAIN, configDir: DROP_DIR });
    const text = renderConfig(loaded, { showOrigin: false });
    const keys = Object.keys(YAML.parse(text, { version: '1.1' }));
    expect(keys.slice(0, 2)).toEqual(['apiVersion', 'kind']);
    expect(keys.slice(2)).toEqual([...keys.slice(2)].sort());
    expect(text.split('\n').slice(0, 2)).toEqual(['apiVersion: kubelet.config.k8s.io/v1beta1', 'kind: KubeletConfiguration']);
  });

  it('every line holding a value carries an origin comment', async () => {
    const loaded = await loadConfig({ configFile: MAIN, configDir: DROP_DIR });
    const lines = renderConfig(loaded, { showOrigin: true }).split('\n').filter((l) => l !== '');
    // Mapping keys with nested values and the closing comment line carry no value.
    const valueLines = lines.filter((l) => !/^\s*[^#]+:$/.test(l) && !l.startsWith('#'));
    expect(valueLines.length).toBe(loaded.origins.size + 2); // + apiVersion, kind
    for (const l of valueLines) expect(l).toMatch(/ # (\/\S.*|default|flag)$/);
  });

  it('loads back to the same configuration, with and without origins', async () => {
    const loaded = await loadConfig({ configFile: MAIN, configDir: DROP_DIR, flagOverrides: { readOnlyPort: 10255 } });
    await roundTrip(loaded, true);
    await roundTrip(loaded, false);
  });
});

describe('rendering', () => {
  it('without --show-origin prints no comments but the closing Kubernetes version line', async () => {
    const loaded = await loadConfig({ configFile: MAIN, configDir: DROP_DIR });
    const lines = renderConfig(loaded, { showOrigin: false }).split('\n');
    expect(lines.filter((l) => l.includes('#'))).toEqual(['# feature gates and defaults: Kubernetes v1.35']);
    expect(lines.filter((l) => l !== '').at(-1)).toBe('# feature gates and defaults: Kubernetes v1.35');
  });

  it('flag values show "flag"; an empty list and an empty map are one leaf each', async () => {
    const main = path.join(dir, 'kubelet.yaml');
    fs.writeFileSync(main, `${HEADER}clusterDNS: []\nevictionHard: {}\n`);
    const loaded = await loadConfig({ configFile: main, flagOverrides: { port: 10260 } });
    const lines = renderConfig(loaded, { showOrigin: true }).split('\n');
    expect(lines).toContain('port: 10260 # flag');
    expect(lines).toContain(`clusterDNS: [] # ${main}`);
    expect(lines).toContain(`evictionHard: {} # ${main}`);
    expect(lines).toContain('featureGates: {} # default');
    await roundTrip(loaded, true);
  });

  it('quotes strings that YAML 1.1 would read as something else, and keeps odd paths on their comment line', async () => {
    const sub = path.join(dir, 'odd dir #1');
    fs.mkdirSync(sub);
    const main = path.join(sub, 'kubelet.yaml');
    const doc = {
      apiVersion: 'kubelet.config.k8s.io/v1beta1',
      kind: 'KubeletConfiguration',
      clusterDomain: 'on',
      staticPodPath: '/etc/kubernetes/manifests # not a comment',
      staticPodURLHeader: { 'X-Odd': ['yes', 'no', '1', '0x1F', '2001-12-14', '10%', 'a: b', '#x', '~', 'null', ''] },
      evictionHard: { 'memory.available': '1e3', 'nodefs.available': '10%' },
    };
    fs.writeFileSync(main, JSON.stringify(doc));
    const loaded = await loadConfig({ configFile: main });
    const text = renderConfig(loaded, { showOrigin: true });
    expect(text.split('\n')).toContain(`clusterDomain: "on" # ${main}`);
    await roundTrip(loaded, true);
    await roundTrip(loaded, false);
  });
});

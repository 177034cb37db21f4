/**
 * The built `nodelet` binary on real config files: `config view --show-origin` on the
 * merge fixture, and bad configurations that must stop startup before anything is touched.
 */
import fs from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { parse } from 'yaml';
import { projectRoot, runNodelet, tempDir } from '../../helpers/nodelet.js';

const fixture = path.join(projectRoot, 'test/fixtures/config/merge');
const main = path.join(fixture, 'kubelet.yaml');
const dropA = path.join(fixture, 'kubelet.conf.d/10-a.conf');
const dropB = path.join(fixture, 'kubelet.conf.d/20-b.conf');

describe('nodelet config view', () => {
  it('--show-origin on a main file and two drop-ins shows each merge rule with its origin', async () => {
    const r = await runNodelet(['config', 'view', '--show-origin', '--config', main, '--config-dir', path.join(fixture, 'kubelet.conf.d'), '--read-only-port', '10255']);
    expect(r.stderr).toBe('');
    expect(r.code).toBe(0);
    const lines = r.stdout.split('\n').map((l) => l.trim());
    const expectLine = (text: string) => expect(lines).toContain(text);
    // A scalar replaces: 20-b.conf wins over the main file.
    expectLine(`port: 12250 # ${dropB}`);
    // A scalar nobody overrides keeps the main file as its origin.
    expectLine(`staticPodPath: /etc/kubernetes/manifests # ${main}`);
    // null in a drop-in removes the value; the default comes back after merging.
    expectLine('maxPods: 110 # default');
    // Nested structures merge field by field.
    expectLine(`mode: AlwaysAllow # ${main}`);
    expectLine(`cacheAuthorizedTTL: 2m0s # ${dropA}`);
    expectLine(`cacheUnauthorizedTTL: 1m0s # ${main}`);
    // A list is replaced whole.
    expectLine(`clusterDNS: [10.96.0.53] # ${dropB}`);
    // A map merges key by key.
    expectLine(`ContainerCheckpoint: true # ${main}`);
    expectLine(`GracefulNodeShutdown: true # ${dropA}`);
    expectLine(`MemoryQoS: true # ${dropB}`);
    // A map of lists: the overridden key's list is replaced whole, the other key stays.
    expectLine(`site-a: [a3] # ${dropA}`);
    expectLine(`site-b: [b1] # ${main}`);
    // Flags win over files; untouched fields are defaults.
    expectLine('readOnlyPort: 10255 # flag');
    expectLine('healthzPort: 10248 # default');
    // Files that are not *.conf are ignored: port 1 from 30-disabled.conf.bak never shows.
    expect(r.stdout).not.toContain('disabled');
  });

  it('without --show-origin prints plain YAML that loads back as the same configuration', async () => {
    const r = await runNodelet(['config', 'view', '--config', main, '--config-dir', path.join(fixture, 'kubelet.conf.d')]);
    expect(r.code).toBe(0);
    const doc = parse(r.stdout);
    expect(doc).toMatchObject({ apiVersion: 'kubelet.config.k8s.io/v1beta1', kind: 'KubeletConfiguration', port: 12250, maxPods: 110, clusterDNS: ['10.96.0.53'] });
    const dir = tempDir();
    const again = path.join(dir, 'again.yaml');
    fs.writeFileSync(again, r.stdout);
    const r2 = await runNodelet(['config', 'view', '--config', again]);
    expect(r2.code).toBe(0);
    expect(r2.stdout).toBe(r.stdout);
  });
});

describe('defaults with and without --config, as the kubelet', () => {
  it('without --config: the legacy flag defaults (anonymous, no webhook, AlwaysAllow, read-only port 10255)', async () => {
    const r = await runNodelet(['config', 'view', '--show-origin']);
    expect(r.code).toBe(0);
    const doc = parse(r.stdout);
    expect(doc.authentication.anonymous.enabled).toBe(true);
    expect(doc.authentication.webhook.enabled).toBe(false);
    expect(doc.authorization.mode).toBe('AlwaysAllow');
    expect(doc.readOnlyPort).toBe(10255);
    expect(r.stdout).toContain('mode: AlwaysAllow # default (no --config)');
  });

  it('with --config: the v1beta1 defaults (webhook authentication, Webhook authorization, no read-only port)', async () => {
    const dir = tempDir();
    const file = path.join(dir, 'kubelet.yaml');
    fs.writeFileSync(file, 'apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n');
    const r = await runNodelet(['config', 'view', '--config', file]);
    const doc = parse(r.stdout);
    expect(doc.authentication.anonymous.enabled).toBe(false);
    expect(doc.authentication.webhook.enabled).toBe(true);
    expect(doc.authorization.mode).toBe('Webhook');
    expect(doc.readOnlyPort).toBe(0);
  });

  it('a standalone nodelet with a config that asks for Webhook authorization stops before the lock, saying why', async () => {
    const dir = tempDir();
    const file = path.join(dir, 'kubelet.yaml');
    fs.writeFileSync(file, 'apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nauthentication:\n  webhook:\n    enabled: false\n');
    const r = await runNodelet(['--config', file, '--root-dir', path.join(dir, 'root'), '--lock-file', path.join(dir, 'lock')]);
    expect(r.code).not.toBe(0);
    expect(r.stderr).toMatch(/authorization\.mode is Webhook but nodelet runs standalone/);
    expect(fs.existsSync(path.join(dir, 'lock'))).toBe(false);
    expect(fs.existsSync(path.join(dir, 'root'))).toBe(false);
  });
});

describe('an invalid configuration stops nodelet before anything is touched', () => {
  const header = 'apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n';
  const cases: { name: string; main: string; dropIn?: string; expect: (f: { main: string; dropIn: string }) => RegExp[] }[] = [
    {
      name: 'a malformed YAML file',
      main: `${header}port: [10250\nmaxPods: 10\n`,
      expect: (f) => [new RegExp(`${esc(f.main)}.*line \\d+`)],
    },
    {
      name: 'a wrong kind',
      main: 'apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeProxyConfiguration\n',
      expect: (f) => [new RegExp(`${esc(f.main)}: kind: .*KubeProxyConfiguration`)],
    },
    {
      name: 'a bad duration',
      main: `${header}runtimeRequestTimeout: 2 minutes\n`,
      expect: (f) => [new RegExp(`${esc(f.main)}: runtimeRequestTimeout: .*2 minutes`)],
    },
    {
      name: 'an invalid drop-in (and every problem reported together)',
      main: `${header}port: 10250\n`,
      dropIn: `${header}healthzPort: 70000\nauthorization:\n  webhook:\n    cacheAuthorizedTTL: -5s\n`,
      expect: (f) => [new RegExp(`${esc(f.dropIn)}: healthzPort: `), new RegExp(`${esc(f.dropIn)}: authorization\\.webhook\\.cacheAuthorizedTTL: `)],
    },
  ];

  for (const c of cases) {
    it(`${c.name}: exits non-zero naming the file and field; no root dir, no lock file`, async () => {
      const dir = tempDir();
      const files = { main: path.join(dir, 'kubelet.yaml'), dropIn: path.join(dir, 'kubelet.conf.d', '50-site.conf') };
      fs.writeFileSync(files.main, c.main);
      const args = ['--config', files.main, '--root-dir', path.join(dir, 'root'), '--lock-file', path.join(dir, 'kubelet.lock')];
      if (c.dropIn !== undefined) {
        fs.mkdirSync(path.dirname(files.dropIn));
        fs.writeFileSync(files.dropIn, c.dropIn);
        args.push('--config-dir', path.dirname(files.dropIn));
      }
      const before = fs.readdirSync(dir).sort();
      const r = await runNodelet(args);
      expect(r.code).not.toBe(0);
      for (const re of c.expect(files)) expect(r.stderr).toMatch(re);
      expect(fs.readdirSync(dir).sort()).toEqual(before);
      expect(fs.existsSync(path.join(dir, 'root'))).toBe(false);
      expect(fs.existsSync(path.join(dir, 'kubelet.lock'))).toBe(false);
      // The failure is also a structured log line for journald.
      expect(r.records.some((rec) => rec.level === 'error')).toBe(true);
    });
  }

  it('unknown fields are warnings per field path, and nodelet still runs', async () => {
    const dir = tempDir();
    const file = path.join(dir, 'kubelet.yaml');
    fs.writeFileSync(file, `${header}bogusField: 1\nauthentication:\n  x509:\n    clientCAFIle: /tmp/ca.crt\n`);
    const r = await runNodelet(['config', 'view', '--config', file]);
    expect(r.code).toBe(0);
    expect(r.stderr).toContain(`${file}: bogusField`);
    expect(r.stderr).toContain(`${file}: authentication.x509.clientCAFIle`);
  });

  it('a bad flag value names the flag', async () => {
    const dir = tempDir();
    const r = await runNodelet(['--root-dir', path.join(dir, 'root'), '--lock-file', path.join(dir, 'l'), '--feature-gates', 'ContainerCheckpoint=maybe']);
    expect(r.code).not.toBe(0);
    expect(r.stderr).toMatch(/feature-gates|ContainerCheckpoint/);
    expect(fs.existsSync(path.join(dir, 'root'))).toBe(false);
  });
});

function esc(s: string): string {
  return s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
}

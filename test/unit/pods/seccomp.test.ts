import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import type { Container, Pod } from 'kubernetes-types/core/v1.js';
import { describe, expect, it } from 'vitest';
import { NodeletError } from '../../../src/errors.js';
import { checkLocalhostProfile, profileProblems, resolveSeccomp } from '../../../src/pods/cri/seccomp.js';

const root = '/var/lib/kubelet';
const pod = (podProfile?: object): Pod => ({ metadata: { name: 'p', uid: 'u' }, spec: { containers: [], ...(podProfile ? { securityContext: { seccompProfile: podProfile as never } } : {}) } });
const ctr = (profile?: object, privileged?: boolean): Container => ({
  name: 'c',
  image: 'i',
  ...(profile || privileged ? { securityContext: { ...(profile ? { seccompProfile: profile as never } : {}), ...(privileged ? { privileged } : {}) } } : {}),
});

function reasonOf(fn: () => unknown): string | undefined {
  try {
    fn();
  } catch (err) {
    return (err as NodeletError).details.reason as string;
  }
  return undefined;
}

describe('resolveSeccomp', () => {
  it.each([
    ['no setting, seccompDefault false: Unconfined', pod(), ctr(), false, { profileType: 'Unconfined' }],
    ['no setting, seccompDefault true: RuntimeDefault', pod(), ctr(), true, { profileType: 'RuntimeDefault' }],
    ['the pod setting is inherited', pod({ type: 'RuntimeDefault' }), ctr(), false, { profileType: 'RuntimeDefault' }],
    ['the container setting wins over the pod', pod({ type: 'RuntimeDefault' }), ctr({ type: 'Unconfined' }), true, { profileType: 'Unconfined' }],
    ['privileged is always Unconfined', pod({ type: 'RuntimeDefault' }), ctr({ type: 'Localhost', localhostProfile: 'x.json' }, true), true, { profileType: 'Unconfined' }],
    ['Localhost maps under <root-dir>/seccomp', pod(), ctr({ type: 'Localhost', localhostProfile: 'profiles/audit.json' }), false, { profileType: 'Localhost', localhostRef: '/var/lib/kubelet/seccomp/profiles/audit.json' }],
    ['Localhost inherited from the pod', pod({ type: 'Localhost', localhostProfile: 'a.json' }), ctr(), false, { profileType: 'Localhost', localhostRef: '/var/lib/kubelet/seccomp/a.json' }],
  ])('%s', (_name, p, c, seccompDefault, want) => {
    expect(resolveSeccomp(p, c, { rootDir: root, seccompDefault })).toEqual(want);
  });

  it.each([
    ['Localhost without localhostProfile', { type: 'Localhost' }],
    ['a path escaping the seccomp directory', { type: 'Localhost', localhostProfile: '../../etc/passwd' }],
    ['an absolute path', { type: 'Localhost', localhostProfile: '/etc/seccomp.json' }],
    ['an unknown type', { type: 'Strict' }],
  ])('%s is CreateContainerConfigError', (_name, profile) => {
    expect(reasonOf(() => resolveSeccomp(pod(), ctr(profile), { rootDir: root, seccompDefault: false }))).toBe('CreateContainerConfigError');
  });
});

describe('profileProblems', () => {
  it.each([
    [{ defaultAction: 'SCMP_ACT_ERRNO', syscalls: [{ names: ['read', 'write'], action: 'SCMP_ACT_ALLOW' }] }, []],
    [{ defaultAction: 'SCMP_ACT_ALLOW', defaultErrnoRet: 1, syscalls: [{ names: ['mkdir'], action: 'SCMP_ACT_ERRNO', errnoRet: 1 }] }, []],
    [{ defaultAction: 'SCMP_ACT_LOG', syscalls: [{ names: ['x'], action: 'SCMP_ACT_NOTIFY' }] }, []],
    [{}, ['defaultAction: must be a string action (SCMP_ACT_*)']],
    [{ defaultAction: 'SCMP_ACT_NOTIFY' }, ['defaultAction: SCMP_ACT_NOTIFY cannot be the default action']],
    [{ defaultAction: 'SECCOMP_RET_USER_NOTIF' }, ['defaultAction: SECCOMP_RET_USER_NOTIF cannot be the default action']],
    [{ defaultAction: 'SCMP_ACT_MAYBE' }, ['defaultAction: unknown action "SCMP_ACT_MAYBE"']],
    [{ defaultAction: 'SCMP_ACT_ALLOW', syscalls: {} }, ['syscalls: must be a list']],
    [{ defaultAction: 'SCMP_ACT_ALLOW', syscalls: [{ names: [], action: 'SCMP_ACT_ERRNO' }] }, ['syscalls[0].names: must be a non-empty list of syscall names']],
    [{ defaultAction: 'SCMP_ACT_ALLOW', syscalls: [{ names: ['a'], action: 'KILL' }] }, ['syscalls[0].action: unknown action "KILL"']],
    [[], ['the profile must be a JSON object']],
  ])('%j -> %j', (doc, want) => {
    expect(profileProblems(doc)).toEqual(want);
  });
});

describe('checkLocalhostProfile', () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'seccomp-'));
  const write = (name: string, text: string) => {
    const f = path.join(dir, name);
    fs.writeFileSync(f, text);
    return f;
  };
  it('accepts a valid profile', async () => {
    await expect(checkLocalhostProfile(write('ok.json', '{"defaultAction":"SCMP_ACT_ALLOW"}'), 'c')).resolves.toBeUndefined();
  });
  it.each([
    ['missing.json', undefined, /does not exist/],
    ['bad.json', '{not json', /is not valid JSON/],
    ['notify.json', '{"defaultAction":"SCMP_ACT_NOTIFY"}', /is not a valid profile: defaultAction: SCMP_ACT_NOTIFY cannot be the default action/],
  ])('%s: CreateContainerError naming the file', async (name, text, re) => {
    const file = text === undefined ? path.join(dir, name) : write(name, text);
    const err = (await checkLocalhostProfile(file, 'c').catch((e: unknown) => e)) as NodeletError;
    expect(err.details.reason).toBe('CreateContainerError');
    expect(err.message).toContain(file);
    expect(err.message).toMatch(re);
  });
});

describe('checkLocalhostProfile with hostile files', () => {
  const top = fs.mkdtempSync(path.join(os.tmpdir(), 'seccomp-hostile-'));
  const dir = path.join(top, 'seccomp');
  fs.mkdirSync(path.join(dir, 'sub'), { recursive: true });
  const secret = path.join(top, 'secret.txt');
  fs.writeFileSync(secret, '{"defaultAction":"TOP-SECRET-VALUE"}');
  fs.writeFileSync(path.join(dir, 'plain.json'), 'TOP-SECRET-VALUE');
  fs.writeFileSync(path.join(dir, 'good.json'), '{"defaultAction":"SCMP_ACT_ALLOW"}');
  fs.symlinkSync(secret, path.join(dir, 'x.json'));
  fs.symlinkSync('../good.json', path.join(dir, 'sub', 'in.json'));
  fs.symlinkSync('/dev/zero', path.join(dir, 'zero.json'));
  const failure = async (name: string) => (await checkLocalhostProfile(path.join(dir, name), 'c', dir).catch((e: unknown) => e)) as NodeletError;

  it('a symlink out of <root-dir>/seccomp is refused (CreateContainerError naming the file), its content never read into the message', async () => {
    const err = await failure('x.json');
    expect(err.details.reason).toBe('CreateContainerError');
    expect(err.message).toBe(`seccomp profile ${path.join(dir, 'x.json')} leaves the directory ${dir} (a symbolic link or .. pointing outside it): refused`);
    await expect(checkLocalhostProfile(path.join(dir, 'sub', 'in.json'), 'c', dir)).resolves.toBeUndefined();
  });

  it('a device is refused without reading; content of a bad file never appears', async () => {
    expect((await failure('zero.json')).message).toMatch(/is a character device, not a regular file/);
    const bad = await failure('plain.json');
    expect(bad.message).toMatch(/is not valid JSON: it has an unexpected character/);
    expect(bad.message).not.toContain('SECRET');
    fs.writeFileSync(path.join(dir, 'action.json'), '{"defaultAction":"top-secret value"}');
    expect((await failure('action.json')).message).toBe(`seccomp profile ${path.join(dir, 'action.json')} is not a valid profile: defaultAction: unknown action (not an SCMP_ACT_* name)`);
  });
});

/**
 * Seccomp, as the spec says: which profile a container runs under, and the check of a
 * Localhost profile file before the container is created.
 *
 * Rules (spec, "Seccomp profile setting"): the container's setting wins over the pod's; a
 * container without one inherits the pod's; privileged containers always run Unconfined;
 * `seccompDefault: true` makes RuntimeDefault the default (else Unconfined, as the
 * kubelet). `Localhost` names a file relative to `<root-dir>/seccomp`; a name that escapes
 * that directory is refused.
 *
 * Errors carry the container waiting reason in `details.reason`: a missing
 * `localhostProfile` field is the pod author's mistake (CreateContainerConfigError); a
 * file that is missing, unreadable or not a valid profile fails creation
 * (CreateContainerError), with a message that names the file.
 */
import path from 'node:path';
import type { Container, Pod, SeccompProfile } from 'kubernetes-types/core/v1.js';
import { NodeletError, errorMessage } from '../../errors.js';
import { parseJsonBounded } from '../../system/bounded-parse.js';
import { FILE_LIMITS, readBoundedText } from '../../system/safe-file.js';

export type SeccompType = 'RuntimeDefault' | 'Unconfined' | 'Localhost';

/** What goes into the CRI SecurityProfile: `localhostRef` is an absolute host path. */
export interface ResolvedSeccomp {
  profileType: SeccompType;
  localhostRef?: string;
}

export interface SeccompOptions {
  rootDir: string;
  seccompDefault: boolean;
}

/** Directory of Localhost profiles: `<root-dir>/seccomp`. */
export function seccompDir(rootDir: string): string {
  return path.join(rootDir, 'seccomp');
}

function configError(container: string, message: string): NodeletError {
  return new NodeletError('INVALID_ARGUMENT', message, { reason: 'CreateContainerConfigError', container });
}

function createError(container: string, message: string, cause?: unknown): NodeletError {
  return new NodeletError('INVALID_ARGUMENT', message, { reason: 'CreateContainerError', container }, cause ? { cause } : undefined);
}

/**
 * Decides the profile of one container (pure: no file is read). Throws
 * CreateContainerConfigError for a Localhost setting without `localhostProfile`, and for
 * a `localhostProfile` that is absolute or leaves `<root-dir>/seccomp`.
 */
export function resolveSeccomp(pod: Pod, container: Container, o: SeccompOptions): ResolvedSeccomp {
  if (container.securityContext?.privileged) return { profileType: 'Unconfined' };
  const own = container.securityContext?.seccompProfile;
  const inherited = pod.spec?.securityContext?.seccompProfile;
  const setting: SeccompProfile | undefined = own ?? inherited;
  const where = own ? `containers[${container.name}].securityContext.seccompProfile` : 'spec.securityContext.seccompProfile';
  if (!setting) return { profileType: o.seccompDefault ? 'RuntimeDefault' : 'Unconfined' };
  switch (setting.type) {
    case 'RuntimeDefault':
    case 'Unconfined':
      return { profileType: setting.type };
    case 'Localhost': {
      const name = setting.localhostProfile;
      if (!name) throw configError(container.name, `${where}: type Localhost needs localhostProfile (a file name under ${seccompDir(o.rootDir)})`);
      const dir = seccompDir(o.rootDir);
      const file = path.resolve(dir, name);
      if (path.isAbsolute(name) || !file.startsWith(dir + path.sep)) {
        throw configError(container.name, `${where}.localhostProfile "${name}" must be a relative path inside ${dir}`);
      }
      return { profileType: 'Localhost', localhostRef: file };
    }
    default:
      throw configError(container.name, `${where}.type "${String(setting.type)}" is not one of RuntimeDefault, Unconfined, Localhost`);
  }
}

const ACTIONS = new Set([
  'SCMP_ACT_ERRNO',
  'SCMP_ACT_ALLOW',
  'SCMP_ACT_KILL',
  'SCMP_ACT_KILL_PROCESS',
  'SCMP_ACT_KILL_THREAD',
  'SCMP_ACT_TRAP',
  'SCMP_ACT_TRACE',
  'SCMP_ACT_LOG',
  'SCMP_ACT_NOTIFY',
]);
const NOTIFY_ACTIONS = new Set(['SCMP_ACT_NOTIFY', 'SECCOMP_RET_USER_NOTIF']);

/**
 * Checks the shape of an OCI seccomp profile; returns the problems (empty = acceptable).
 * Pure: tests feed it documents.
 */
export function profileProblems(doc: unknown): string[] {
  const problems: string[] = [];
  if (typeof doc !== 'object' || doc === null || Array.isArray(doc)) return ['the profile must be a JSON object'];
  const p = doc as Record<string, unknown>;
  const action = (v: unknown, field: string, isDefault: boolean) => {
    if (typeof v !== 'string') problems.push(`${field}: must be a string action (SCMP_ACT_*)`);
    else if (NOTIFY_ACTIONS.has(v) && isDefault) problems.push(`${field}: ${v} cannot be the default action`);
    // Only an upper-case name (what an action looks like) is quoted: the rest could be any file's content.
    else if (!ACTIONS.has(v) && !NOTIFY_ACTIONS.has(v)) problems.push(`${field}: unknown action${/^[A-Z][A-Z0-9_]{0,39}$/.test(v) ? ` "${v}"` : ' (not an SCMP_ACT_* name)'}`);
  };
  action(p.defaultAction, 'defaultAction', true);
  if (p.defaultErrnoRet !== undefined && !Number.isInteger(p.defaultErrnoRet)) problems.push('defaultErrnoRet: must be an integer');
  if (p.syscalls !== undefined) {
    if (!Array.isArray(p.syscalls)) problems.push('syscalls: must be a list');
    else
      p.syscalls.forEach((s: unknown, i) => {
        const f = `syscalls[${i}]`;
        if (typeof s !== 'object' || s === null) return problems.push(`${f}: must be an object`);
        const sc = s as Record<string, unknown>;
        if (!Array.isArray(sc.names) || sc.names.length === 0 || !sc.names.every((n) => typeof n === 'string' && n !== '')) {
          problems.push(`${f}.names: must be a non-empty list of syscall names`);
        }
        action(sc.action, `${f}.action`, false);
        if (sc.errnoRet !== undefined && !Number.isInteger(sc.errnoRet)) problems.push(`${f}.errnoRet: must be an integer`);
        if (sc.args !== undefined && sc.args !== null && !Array.isArray(sc.args)) problems.push(`${f}.args: must be a list`);
      });
  }
  return problems;
}

/**
 * Reads and checks a Localhost profile before the container is created. Throws
 * CreateContainerError naming the file when it is missing, unreadable, not a regular file
 * (a FIFO or device is refused without being read), over 1 MiB, outside `dir` (the
 * seccomp directory; a symlink out of it is refused), not JSON, or not an acceptable
 * profile. The message never quotes the file's content: it is a pod's status, which the
 * read-only port serves to anyone (only positions and SCMP_* names appear).
 */
export async function checkLocalhostProfile(file: string, container: string, dir: string = path.dirname(file)): Promise<void> {
  let text: string;
  try {
    text = await readBoundedText(file, { maxBytes: FILE_LIMITS.seccompProfile, what: 'seccomp profile', confineTo: dir });
  } catch (err) {
    throw createError(container, errorMessage(err), err);
  }
  let doc: unknown;
  try {
    doc = parseJsonBounded(text, { file, what: 'seccomp profile' });
  } catch (err) {
    throw createError(container, errorMessage(err));
  }
  const problems = profileProblems(doc);
  if (problems.length) throw createError(container, `seccomp profile ${file} is not a valid profile: ${problems.join('; ')}`);
}

/**
 * What the API server validates for a Pod, for the parts nodelet uses: a static pod's
 * manifest has no API server in front of it, so nodelet checks it before running it.
 * Pure: `validatePodManifest` takes the parsed document (any shape: the file is hostile)
 * and returns every problem at once, each naming its field path
 * (`spec.volumes[0].name: ...`). An empty list means the manifest may run.
 *
 * The name checks are exported for the edges that build host paths from names (volume
 * directories, pod log directories): they check again at use, since API pods never pass
 * through here.
 */
import { normalizeSysctlName } from '../cri/security-context.js';

type Obj = Record<string, unknown>;

const DNS_LABEL_RE = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/;
const DNS_SUBDOMAIN_RE = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/;
/** A label value, and the name part of a qualified name (label and annotation keys). */
const QUALIFIED_NAME_PART_RE = /^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$/;
/** IANA_SVC_NAME: lower-case letters, digits and non-adjacent hyphens, at least one letter. */
const IANA_SVC_NAME_RE = /^[a-z0-9]([a-z0-9-]*[a-z0-9])?$/;
/** The API server's env var name rule with RelaxedEnvironmentVariableValidation (GA and locked on in 1.35): printable ASCII but "=". */
const ENV_VAR_NAME_RE = /^[\x20-\x3c\x3e-\x7e]+$/;
/** Pod UIDs: the API server's are RFC 4122 strings, static pods' are hex; never a path element other than itself. */
const UID_RE = /^[A-Za-z0-9-]{1,128}$/;
/** The API server's limit on the total size of a pod's annotations. */
const ANNOTATIONS_MAX_BYTES = 256 * 1024;

export function isDnsLabel(s: unknown): s is string {
  return typeof s === 'string' && s.length <= 63 && DNS_LABEL_RE.test(s);
}

export function isDnsSubdomain(s: unknown): s is string {
  return typeof s === 'string' && s.length <= 253 && DNS_SUBDOMAIN_RE.test(s);
}

export function isPodUid(s: unknown): s is string {
  return typeof s === 'string' && UID_RE.test(s);
}

/** The volume sources the API knows; a volume has exactly one. */
const VOLUME_SOURCES = [
  'hostPath', 'emptyDir', 'gcePersistentDisk', 'awsElasticBlockStore', 'gitRepo', 'secret', 'nfs', 'iscsi', 'glusterfs',
  'persistentVolumeClaim', 'rbd', 'flexVolume', 'cinder', 'cephfs', 'flocker', 'downwardAPI', 'fc', 'azureFile', 'configMap',
  'vsphereVolume', 'quobyte', 'azureDisk', 'photonPersistentDisk', 'projected', 'portworxVolume', 'scaleIO', 'storageos',
  'csi', 'ephemeral', 'image',
];
const HOST_PATH_TYPES = new Set(['', 'DirectoryOrCreate', 'Directory', 'FileOrCreate', 'File', 'Socket', 'CharDevice', 'BlockDevice']);
const PROTOCOLS = new Set(['TCP', 'UDP', 'SCTP']);
const PROPAGATIONS = new Set(['None', 'HostToContainer', 'Bidirectional']);
const PROBE_HANDLERS = ['exec', 'httpGet', 'tcpSocket', 'grpc'];

const isObj = (v: unknown): v is Obj => typeof v === 'object' && v !== null && !Array.isArray(v);
const show = (v: unknown): string => {
  const s = JSON.stringify(v);
  return s === undefined ? String(v) : s.length > 80 ? `${s.slice(0, 77)}...` : s;
};

/** Why `s` is not a valid qualified name (a label or annotation key), or undefined. */
function qualifiedNameProblem(s: string): string | undefined {
  const parts = s.split('/');
  if (parts.length > 2) return 'a qualified name has at most one "/"';
  const name = parts.pop()!;
  if (parts.length === 1 && (parts[0] === '' || !isDnsSubdomain(parts[0]))) return 'its prefix must be a DNS-1123 subdomain';
  if (name.length === 0 || name.length > 63) return 'its name part must be 1 to 63 characters';
  if (!QUALIFIED_NAME_PART_RE.test(name)) return 'its name part must consist of alphanumerics, "-", "_" or ".", starting and ending with an alphanumeric';
  return undefined;
}

function isIanaSvcName(s: string): boolean {
  return s.length <= 15 && IANA_SVC_NAME_RE.test(s) && /[a-z]/.test(s) && !s.includes('--');
}

/** A relative path with no ".." element (subPath, subPathExpr). */
function relativePathProblem(p: string): string | undefined {
  if (p.startsWith('/')) return 'must be a relative path';
  if (p.split('/').includes('..')) return 'must not contain ".."';
  return undefined;
}

class Problems {
  readonly all: string[] = [];
  add(field: string, msg: string): void {
    this.all.push(`${field}: ${msg}`);
  }
  /** An optional integer field within [min, max]; a string or a fraction is an error. */
  int(o: Obj, key: string, field: string, min: number, max = Number.MAX_SAFE_INTEGER): void {
    const v = o[key];
    if (v === undefined || v === null) return;
    if (typeof v !== 'number' || !Number.isInteger(v)) this.add(`${field}.${key}`, `must be an integer, got ${show(v)}`);
    else if (v < min || v > max) this.add(`${field}.${key}`, max === Number.MAX_SAFE_INTEGER ? `must be greater than or equal to ${min}, got ${v}` : `must be between ${min} and ${max}, got ${v}`);
  }
  /** An optional list; returns its items (empty when absent or not a list, reported). */
  items(o: Obj, key: string, field: string): unknown[] {
    const v = o[key];
    if (v === undefined || v === null) return [];
    if (!Array.isArray(v)) {
      this.add(`${field}.${key}`, 'must be a list');
      return [];
    }
    return v;
  }
  stringMap(o: Obj, key: string, field: string, checkValue?: (v: string) => string | undefined): Record<string, string> {
    const v = o[key];
    if (v === undefined || v === null) return {};
    if (!isObj(v)) {
      this.add(`${field}.${key}`, 'must be a map of strings');
      return {};
    }
    const out: Record<string, string> = {};
    for (const [k, val] of Object.entries(v)) {
      // The field's name only for a problem: a map of 20,000 good labels builds none.
      const f = () => `${field}.${key}[${show(k)}]`;
      const kp = qualifiedNameProblem(k);
      if (kp) this.add(f(), `invalid key: ${kp}`);
      if (typeof val !== 'string') this.add(f(), `value must be a string, got ${show(val)}`);
      else {
        const vp = checkValue?.(val);
        if (vp) this.add(f(), vp);
        out[k] = val;
      }
    }
    return out;
  }
}

function labelValueProblem(v: string): string | undefined {
  if (v === '') return undefined;
  if (v.length > 63) return 'a label value must be at most 63 characters';
  if (!QUALIFIED_NAME_PART_RE.test(v)) return 'a label value must consist of alphanumerics, "-", "_" or ".", starting and ending with an alphanumeric';
  return undefined;
}

function validateMetadata(p: Problems, meta: unknown): void {
  if (meta !== undefined && !isObj(meta)) {
    p.add('metadata', 'must be an object');
    return;
  }
  const m = meta ?? {};
  const name = m.name;
  if (typeof name !== 'string' || !name) p.add('metadata.name', 'required');
  else if (!isDnsSubdomain(name)) p.add('metadata.name', `${show(name)} is not a valid DNS-1123 subdomain (at most 253 lower-case alphanumerics, "-" and ".")`);
  if (m.namespace !== undefined && !isDnsLabel(m.namespace)) p.add('metadata.namespace', `${show(m.namespace)} is not a valid namespace name (a DNS-1123 label of at most 63 characters)`);
  // A declared UID is kept, as the kubelet keeps it (an empty one is derived); it names directories, so only a UID's characters.
  if (m.uid !== undefined && m.uid !== '' && !isPodUid(m.uid)) p.add('metadata.uid', `${show(m.uid)} is not a valid UID (at most 128 letters, digits and "-")`);
  p.stringMap(m, 'labels', 'metadata', labelValueProblem);
  const ann = p.stringMap(m, 'annotations', 'metadata');
  const size = Object.entries(ann).reduce((n, [k, v]) => n + Buffer.byteLength(k) + Buffer.byteLength(v), 0);
  if (size > ANNOTATIONS_MAX_BYTES) p.add('metadata.annotations', `may not be more than ${ANNOTATIONS_MAX_BYTES} bytes in total, got ${size}`);
}

/**
 * A static pod has no API server behind it: a volume that shows an API object (a ConfigMap, a
 * Secret, a ServiceAccount's token, a ClusterTrustBundle) is refused naming the field, as the
 * API server refuses the mirror pod of a static pod that refers to them.
 */
function staticVolumeObjects(p: Problems, v: Obj, f: string): void {
  const refuse = (field: string, what: string) => p.add(field, `a static pod cannot refer to API objects (${what})`);
  if (isObj(v.configMap)) refuse(`${f}.configMap`, `ConfigMap ${show(v.configMap.name)}`);
  if (isObj(v.secret)) refuse(`${f}.secret`, `Secret ${show(v.secret.secretName)}`);
  if (!isObj(v.projected) || !Array.isArray(v.projected.sources)) return;
  v.projected.sources.forEach((src: unknown, j: number) => {
    if (!isObj(src)) return;
    const sf = `${f}.projected.sources[${j}]`;
    if (isObj(src.configMap)) refuse(`${sf}.configMap`, `ConfigMap ${show(src.configMap.name)}`);
    if (isObj(src.secret)) refuse(`${sf}.secret`, `Secret ${show(src.secret.name)}`);
    if (isObj(src.serviceAccountToken)) refuse(`${sf}.serviceAccountToken`, "a ServiceAccount's token");
    if (isObj(src.clusterTrustBundle)) refuse(`${sf}.clusterTrustBundle`, 'a ClusterTrustBundle');
  });
}

/** Validates spec.volumes; returns the names of the volumes (valid or not) for volumeMounts to refer to. */
function validateVolumes(p: Problems, spec: Obj): Set<string> {
  const names = new Set<string>();
  p.items(spec, 'volumes', 'spec').forEach((v, i) => {
    const f = `spec.volumes[${i}]`;
    if (!isObj(v)) return p.add(f, 'must be an object');
    if (!isDnsLabel(v.name)) p.add(`${f}.name`, `${show(v.name)} is not a valid volume name (a DNS-1123 label: at most 63 lower-case alphanumerics or "-", starting and ending with an alphanumeric)`);
    if (typeof v.name === 'string') {
      if (names.has(v.name)) p.add(`${f}.name`, `duplicate volume name ${show(v.name)}`);
      names.add(v.name);
    }
    const sources = VOLUME_SOURCES.filter((k) => v[k] !== undefined && v[k] !== null);
    if (sources.length === 0) p.add(f, 'must specify a volume source (hostPath, emptyDir, ...)');
    else if (sources.length > 1) p.add(f, `must specify exactly one volume source, got ${sources.join(', ')}`);
    for (const k of sources) if (!isObj(v[k])) p.add(`${f}.${k}`, 'must be an object');
    if (isObj(v.hostPath)) {
      const hp = v.hostPath;
      if (typeof hp.path !== 'string' || !hp.path) p.add(`${f}.hostPath.path`, 'required');
      else if (!hp.path.startsWith('/')) p.add(`${f}.hostPath.path`, `${show(hp.path)} must be an absolute path`);
      else if (hp.path.split('/').includes('..')) p.add(`${f}.hostPath.path`, `${show(hp.path)} must not contain ".."`);
      if (hp.type !== undefined && hp.type !== null && !(typeof hp.type === 'string' && HOST_PATH_TYPES.has(hp.type))) p.add(`${f}.hostPath.type`, `unsupported value ${show(hp.type)}`);
    }
    if (isObj(v.emptyDir) && v.emptyDir.medium !== undefined && v.emptyDir.medium !== null && typeof v.emptyDir.medium !== 'string') p.add(`${f}.emptyDir.medium`, 'must be a string');
    staticVolumeObjects(p, v, f);
  });
  return names;
}

function validatePort(p: Problems, o: Obj, field: string): void {
  const port = o.port;
  if (typeof port === 'string') {
    if (!isIanaSvcName(port)) p.add(`${field}.port`, `${show(port)} must be a port number or an IANA_SVC_NAME (at most 15 lower-case alphanumerics or "-", with a letter)`);
  } else if (typeof port !== 'number' || !Number.isInteger(port) || port < 1 || port > 65535) p.add(`${field}.port`, `must be between 1 and 65535 or a port name, got ${show(port)}`);
}

function validateProbe(p: Problems, probe: unknown, field: string, kind: 'liveness' | 'readiness' | 'startup'): void {
  if (probe === undefined || probe === null) return;
  if (!isObj(probe)) return p.add(field, 'must be an object');
  const handlers = PROBE_HANDLERS.filter((h) => probe[h] !== undefined && probe[h] !== null);
  if (handlers.length === 0) p.add(field, `must specify a handler (${PROBE_HANDLERS.join(', ')})`);
  else if (handlers.length > 1) p.add(field, `must specify exactly one handler, got ${handlers.join(', ')}`);
  for (const h of handlers) if (!isObj(probe[h])) p.add(`${field}.${h}`, 'must be an object');
  if (isObj(probe.httpGet)) validatePort(p, probe.httpGet, `${field}.httpGet`);
  if (isObj(probe.tcpSocket)) validatePort(p, probe.tcpSocket, `${field}.tcpSocket`);
  p.int(probe, 'initialDelaySeconds', field, 0);
  p.int(probe, 'timeoutSeconds', field, 1);
  p.int(probe, 'periodSeconds', field, 1);
  p.int(probe, 'failureThreshold', field, 1);
  p.int(probe, 'terminationGracePeriodSeconds', field, 1);
  if (kind === 'readiness') p.int(probe, 'successThreshold', field, 1);
  else if (probe.successThreshold !== undefined && probe.successThreshold !== 1) p.add(`${field}.successThreshold`, `must be 1 for a ${kind} probe, got ${show(probe.successThreshold)}`);
}

const MAX_ID = 2147483647;
const SYSCTL_NAME_RE = /^([a-z0-9]([-_a-z0-9]*[a-z0-9])?[./])*[a-z0-9]([-_a-z0-9]*[a-z0-9])?$/;

/** A profile setting (seccompProfile, appArmorProfile): its type, and localhostProfile exactly when Localhost. */
function validateProfile(p: Problems, prof: unknown, field: string): void {
  if (prof === undefined || prof === null) return;
  if (!isObj(prof)) return p.add(field, 'must be an object');
  if (prof.type !== 'RuntimeDefault' && prof.type !== 'Unconfined' && prof.type !== 'Localhost') p.add(`${field}.type`, `must be RuntimeDefault, Unconfined or Localhost, got ${show(prof.type)}`);
  const lp = prof.localhostProfile;
  if (prof.type === 'Localhost' && (typeof lp !== 'string' || !lp.trim())) p.add(`${field}.localhostProfile`, 'required when type is Localhost');
  else if (prof.type !== 'Localhost' && lp !== undefined && lp !== null) p.add(`${field}.localhostProfile`, 'can only be set when type is Localhost');
}

function validateBool(p: Problems, o: Obj, key: string, field: string): void {
  if (o[key] !== undefined && o[key] !== null && typeof o[key] !== 'boolean') p.add(`${field}.${key}`, `must be a boolean, got ${show(o[key])}`);
}

/** The fields both security contexts share: IDs, SELinux, seccomp and AppArmor profiles. */
function validateCommonSecurity(p: Problems, sc: Obj, f: string): void {
  p.int(sc, 'runAsUser', f, 0, MAX_ID);
  p.int(sc, 'runAsGroup', f, 0, MAX_ID);
  validateBool(p, sc, 'runAsNonRoot', f);
  if (sc.seLinuxOptions !== undefined && sc.seLinuxOptions !== null && !isObj(sc.seLinuxOptions)) p.add(`${f}.seLinuxOptions`, 'must be an object');
  validateProfile(p, sc.seccompProfile, `${f}.seccompProfile`);
  validateProfile(p, sc.appArmorProfile, `${f}.appArmorProfile`);
}

/** spec.securityContext, as the API server's ValidatePodSecurityContext (sysctls: names, duplicates). */
function validatePodSecurity(p: Problems, spec: Obj): void {
  validateBool(p, spec, 'hostUsers', 'spec');
  const sc = spec.securityContext;
  if (sc === undefined || sc === null) return;
  const f = 'spec.securityContext';
  if (!isObj(sc)) return p.add(f, 'must be an object');
  validateCommonSecurity(p, sc, f);
  p.int(sc, 'fsGroup', f, 0, MAX_ID);
  p.items(sc, 'supplementalGroups', f).forEach((g, i) => {
    if (typeof g !== 'number' || !Number.isInteger(g) || g < 0 || g > MAX_ID) p.add(`${f}.supplementalGroups[${i}]`, `must be an integer between 0 and ${MAX_ID}, got ${show(g)}`);
  });
  const fcp = sc.fsGroupChangePolicy;
  if (fcp !== undefined && fcp !== null && fcp !== 'OnRootMismatch' && fcp !== 'Always') p.add(`${f}.fsGroupChangePolicy`, `must be OnRootMismatch or Always, got ${show(fcp)}`);
  const sgp = sc.supplementalGroupsPolicy;
  if (sgp !== undefined && sgp !== null && sgp !== 'Merge' && sgp !== 'Strict') p.add(`${f}.supplementalGroupsPolicy`, `must be Merge or Strict, got ${show(sgp)}`);
  const names = new Set<string>();
  p.items(sc, 'sysctls', f).forEach((s, i) => {
    const sf = `${f}.sysctls[${i}]`;
    if (!isObj(s)) return p.add(sf, 'must be an object');
    if (typeof s.name !== 'string' || !s.name) p.add(`${sf}.name`, 'required');
    else if (s.name.length > 253 || !SYSCTL_NAME_RE.test(s.name)) p.add(`${sf}.name`, `${show(s.name)} is not a valid sysctl name (lower-case segments separated by "." or "/", at most 253 characters)`);
    else {
      // As the kubelet normalizes them: `a/b.c` and `a.b/c` are the same sysctl.
      const n = normalizeSysctlName(s.name);
      if (names.has(n)) p.add(`${sf}.name`, `duplicate sysctl ${show(s.name)}`);
      names.add(n);
    }
    if (typeof s.value !== 'string') p.add(`${sf}.value`, `must be a string, got ${show(s.value)}`);
  });
}

/** A container's securityContext, as the API server's ValidateSecurityContext. */
function validateContainerSecurity(p: Problems, c: Obj, f0: string): void {
  const sc = c.securityContext;
  if (sc === undefined || sc === null) return;
  const f = `${f0}.securityContext`;
  if (!isObj(sc)) return p.add(f, 'must be an object');
  validateCommonSecurity(p, sc, f);
  for (const k of ['privileged', 'allowPrivilegeEscalation', 'readOnlyRootFilesystem']) validateBool(p, sc, k, f);
  const pm = sc.procMount;
  if (pm !== undefined && pm !== null && pm !== 'Default' && pm !== 'Unmasked') p.add(`${f}.procMount`, `must be Default or Unmasked, got ${show(pm)}`);
  const add: unknown[] = [];
  if (sc.capabilities !== undefined && sc.capabilities !== null) {
    if (!isObj(sc.capabilities)) p.add(`${f}.capabilities`, 'must be an object');
    else {
      for (const k of ['add', 'drop'] as const) {
        p.items(sc.capabilities, k, `${f}.capabilities`).forEach((cap, i) => {
          if (typeof cap !== 'string' || !cap) p.add(`${f}.capabilities.${k}[${i}]`, `must be a capability name, got ${show(cap)}`);
          else if (k === 'add') add.push(cap);
        });
      }
    }
  }
  if (sc.allowPrivilegeEscalation === false && sc.privileged === true) p.add(f, 'cannot set `allowPrivilegeEscalation` to false and `privileged` to true');
  if (sc.allowPrivilegeEscalation === false && add.some((a) => a === 'SYS_ADMIN' || a === 'CAP_SYS_ADMIN')) p.add(f, 'cannot set `allowPrivilegeEscalation` to false and `capabilities.Add` CAP_SYS_ADMIN');
}

function validateContainer(p: Problems, c: Obj, f: string, volumes: Set<string>): void {
  validateContainerSecurity(p, c, f);
  if (typeof c.image !== 'string' || !c.image.trim()) p.add(`${f}.image`, 'required');
  const pp = c.imagePullPolicy;
  if (pp !== undefined && pp !== 'Always' && pp !== 'IfNotPresent' && pp !== 'Never') p.add(`${f}.imagePullPolicy`, `must be Always, IfNotPresent or Never, got ${show(pp)}`);

  const portNames = new Set<string>();
  p.items(c, 'ports', f).forEach((port, j) => {
    const pf = `${f}.ports[${j}]`;
    if (!isObj(port)) return p.add(pf, 'must be an object');
    if (port.containerPort === undefined) p.add(`${pf}.containerPort`, 'required');
    else p.int(port, 'containerPort', pf, 1, 65535);
    p.int(port, 'hostPort', pf, 0, 65535);
    if (port.protocol !== undefined && !(typeof port.protocol === 'string' && PROTOCOLS.has(port.protocol))) p.add(`${pf}.protocol`, `must be TCP, UDP or SCTP, got ${show(port.protocol)}`);
    if (port.name !== undefined) {
      if (typeof port.name !== 'string' || !isIanaSvcName(port.name)) p.add(`${pf}.name`, `${show(port.name)} is not a valid port name (IANA_SVC_NAME: at most 15 lower-case alphanumerics or "-", with a letter, no "--")`);
      else if (portNames.has(port.name)) p.add(`${pf}.name`, `duplicate port name ${show(port.name)}`);
      else portNames.add(port.name);
    }
  });

  p.items(c, 'env', f).forEach((e, j) => {
    const ef = `${f}.env[${j}]`;
    if (!isObj(e)) return p.add(ef, 'must be an object');
    if (typeof e.name !== 'string' || !e.name) p.add(`${ef}.name`, 'required');
    else if (!ENV_VAR_NAME_RE.test(e.name)) p.add(`${ef}.name`, `${show(e.name)} is not a valid environment variable name (printable ASCII characters other than "=")`);
    if (e.value !== undefined && e.value !== null && typeof e.value !== 'string') p.add(`${ef}.value`, `must be a string, got ${show(e.value)}`);
    if (e.valueFrom !== undefined && e.valueFrom !== null) {
      if (!isObj(e.valueFrom)) p.add(`${ef}.valueFrom`, 'must be an object');
      else {
        if (typeof e.value === 'string' && e.value !== '') p.add(`${ef}.valueFrom`, 'may not be specified when value is not empty');
        // A static pod has no API server behind it (the kubelet: "static pods may not reference configmaps").
        if (isObj(e.valueFrom.configMapKeyRef)) p.add(`${ef}.valueFrom.configMapKeyRef`, `a static pod cannot refer to API objects (ConfigMap ${show(e.valueFrom.configMapKeyRef.name)})`);
        if (isObj(e.valueFrom.secretKeyRef)) p.add(`${ef}.valueFrom.secretKeyRef`, `a static pod cannot refer to API objects (Secret ${show(e.valueFrom.secretKeyRef.name)})`);
      }
    }
  });
  p.items(c, 'envFrom', f).forEach((e, j) => {
    const ef = `${f}.envFrom[${j}]`;
    if (!isObj(e)) return p.add(ef, 'must be an object');
    if (e.prefix !== undefined && e.prefix !== null && e.prefix !== '' && !(typeof e.prefix === 'string' && ENV_VAR_NAME_RE.test(e.prefix))) {
      p.add(`${ef}.prefix`, `${show(e.prefix)} is not a valid environment variable name (printable ASCII characters other than "=")`);
    }
    const cm = isObj(e.configMapRef);
    const sr = isObj(e.secretRef);
    if (cm === sr) p.add(ef, 'must specify exactly one of configMapRef and secretRef');
    if (cm) p.add(`${ef}.configMapRef`, `a static pod cannot refer to API objects (ConfigMap ${show((e.configMapRef as Obj).name)})`);
    if (sr) p.add(`${ef}.secretRef`, `a static pod cannot refer to API objects (Secret ${show((e.secretRef as Obj).name)})`);
  });

  const mountPaths = new Set<string>();
  p.items(c, 'volumeMounts', f).forEach((vm, j) => {
    const mf = `${f}.volumeMounts[${j}]`;
    if (!isObj(vm)) return p.add(mf, 'must be an object');
    if (typeof vm.name !== 'string' || !vm.name) p.add(`${mf}.name`, 'required');
    else if (!volumes.has(vm.name)) p.add(`${mf}.name`, `volume ${show(vm.name)} not found in spec.volumes`);
    if (typeof vm.mountPath !== 'string' || !vm.mountPath) p.add(`${mf}.mountPath`, 'required');
    else if (!vm.mountPath.startsWith('/')) p.add(`${mf}.mountPath`, `${show(vm.mountPath)} must be an absolute path`);
    else if (mountPaths.has(vm.mountPath)) p.add(`${mf}.mountPath`, `${show(vm.mountPath)} must be unique in the container`);
    else mountPaths.add(vm.mountPath);
    for (const k of ['subPath', 'subPathExpr'] as const) {
      const s = vm[k];
      if (s === undefined || s === null || s === '') continue;
      if (typeof s !== 'string') p.add(`${mf}.${k}`, `must be a string, got ${show(s)}`);
      else {
        const why = relativePathProblem(s);
        if (why) p.add(`${mf}.${k}`, `${show(s)} ${why}`);
      }
    }
    if (vm.subPath && vm.subPathExpr) p.add(`${mf}.subPathExpr`, 'subPathExpr and subPath are mutually exclusive');
    if (vm.readOnly !== undefined && typeof vm.readOnly !== 'boolean') p.add(`${mf}.readOnly`, `must be a boolean, got ${show(vm.readOnly)}`);
    if (vm.mountPropagation !== undefined && !(typeof vm.mountPropagation === 'string' && PROPAGATIONS.has(vm.mountPropagation))) {
      p.add(`${mf}.mountPropagation`, `must be None, HostToContainer or Bidirectional, got ${show(vm.mountPropagation)}`);
    }
  });

  validateProbe(p, c.livenessProbe, `${f}.livenessProbe`, 'liveness');
  validateProbe(p, c.readinessProbe, `${f}.readinessProbe`, 'readiness');
  validateProbe(p, c.startupProbe, `${f}.startupProbe`, 'startup');
}

/** Every problem of a Pod manifest (a parsed YAML/JSON document), each naming its field path. */
export function validatePodManifest(doc: Record<string, unknown>): string[] {
  const p = new Problems();
  if (doc.apiVersion !== 'v1') p.add('apiVersion', `must be v1, got ${show(doc.apiVersion)}`);
  if (doc.kind !== 'Pod') p.add('kind', `must be Pod, got ${show(doc.kind)}`);
  validateMetadata(p, doc.metadata);
  const spec = doc.spec;
  if (!isObj(spec)) {
    p.add('spec', 'required');
    return p.all;
  }
  const rp = spec.restartPolicy;
  if (rp !== undefined && rp !== 'Always' && rp !== 'OnFailure' && rp !== 'Never') p.add('spec.restartPolicy', `must be Always, OnFailure or Never, got ${show(rp)}`);
  p.int(spec, 'terminationGracePeriodSeconds', 'spec', 0);
  validatePodSecurity(p, spec);
  const volumes = validateVolumes(p, spec);
  // The kubelet refuses a static pod that names a ServiceAccount ("static pods may not reference serviceaccounts").
  for (const k of ['serviceAccountName', 'serviceAccount'] as const) {
    if (spec[k] !== undefined && spec[k] !== null && spec[k] !== '') p.add(`spec.${k}`, `a static pod cannot refer to API objects (ServiceAccount ${show(spec[k])})`);
  }
  // As the API server's pod create validation: ephemeral containers come only through the
  // pods/ephemeralcontainers subresource, which static pods do not have.
  const ephemeral = spec.ephemeralContainers;
  if (ephemeral !== undefined && ephemeral !== null && !(Array.isArray(ephemeral) && ephemeral.length === 0)) p.add('spec.ephemeralContainers', 'cannot be set on create (static pods do not support ephemeral containers)');
  const seen = new Set<string>();
  for (const field of ['initContainers', 'containers'] as const) {
    const list = spec[field];
    if ((list === undefined || list === null) && field === 'initContainers') continue;
    if (!Array.isArray(list) || (field === 'containers' && list.length === 0)) {
      p.add(`spec.${field}`, `must be a ${field === 'containers' ? 'non-empty ' : ''}list`);
      continue;
    }
    list.forEach((c: unknown, i: number) => {
      const f = `spec.${field}[${i}]`;
      if (!isObj(c)) return p.add(f, 'must be an object');
      if (!isDnsLabel(c.name)) p.add(`${f}.name`, `${show(c.name)} is not a valid container name (a DNS-1123 label of at most 63 characters)`);
      else if (seen.has(c.name)) p.add(`${f}.name`, `duplicate container name "${c.name}"`);
      else seen.add(c.name);
      validateContainer(p, c, f, volumes);
    });
  }
  return p.all;
}

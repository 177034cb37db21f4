/**
 * Server-side printer columns for `kubectl get` (Table), as the API server prints Nodes and
 * Pods (pkg/printers/internalversion): the columns of priority 1 appear with `-o wide`. Other
 * kinds get Name and Created At. Pure.
 */
import type { Obj } from './store.js';

export interface Column {
  name: string;
  type: string;
  format: string;
  description: string;
  priority: number;
}

const col = (name: string, priority = 0, type = 'string', format = ''): Column => ({ name, type, format, description: name, priority });

/** `5s`, `3m12s`, `2h5m`, `4d3h`: kubectl's short age. */
export function age(created: unknown, now: number): string {
  const t = typeof created === 'string' ? Date.parse(created) : NaN;
  if (Number.isNaN(t)) return '<unknown>';
  const s = Math.max(0, Math.floor((now - t) / 1000));
  if (s < 120) return `${s}s`;
  const m = Math.floor(s / 60);
  if (m < 10) return `${m}m${s % 60 ? `${s % 60}s` : ''}`;
  if (m < 180) return `${m}m`;
  const h = Math.floor(m / 60);
  if (h < 48) return `${h}h${m % 60 ? `${m % 60}m` : ''}`;
  return `${Math.floor(h / 24)}d${h % 24 ? `${h % 24}h` : ''}`;
}

function nodeStatus(n: Obj): string {
  const ready = (n['status']?.['conditions'] ?? []).find((c: Obj) => c['type'] === 'Ready');
  const s = ready?.['status'] === 'True' ? 'Ready' : ready?.['status'] === 'False' ? 'NotReady' : 'Unknown';
  return n['spec']?.['unschedulable'] ? `${s},SchedulingDisabled` : s;
}

function podStatus(p: Obj): string {
  if (p['metadata']?.['deletionTimestamp']) return 'Terminating';
  const waiting = [...(p['status']?.['containerStatuses'] ?? [])].map((c: Obj) => c['state']?.['waiting']?.['reason'] ?? c['state']?.['terminated']?.['reason']).find((r) => r && r !== 'Completed');
  return waiting ?? p['status']?.['reason'] ?? p['status']?.['phase'] ?? 'Pending';
}

export function columnsFor(kind: string, o: Obj, now: number): { columns: Column[]; cells: unknown[] } {
  const m = o['metadata'] ?? {};
  if (kind === 'Node') {
    const info = o['status']?.['nodeInfo'] ?? {};
    const addr = (type: string) => (o['status']?.['addresses'] ?? []).find((a: Obj) => a['type'] === type)?.['address'] ?? '<none>';
    const roles = Object.keys(m['labels'] ?? {}).filter((k) => k.startsWith('node-role.kubernetes.io/')).map((k) => k.slice('node-role.kubernetes.io/'.length));
    return {
      columns: [col('Name', 0, 'string', 'name'), col('Status'), col('Roles'), col('Age'), col('Version'), col('Internal-IP', 1), col('External-IP', 1), col('OS-Image', 1), col('Kernel-Version', 1), col('Container-Runtime', 1)],
      cells: [m['name'] ?? '', nodeStatus(o), roles.join(',') || '<none>', age(m['creationTimestamp'], now), info['kubeletVersion'] ?? '', addr('InternalIP'), addr('ExternalIP'), info['osImage'] ?? '', info['kernelVersion'] ?? '', info['containerRuntimeVersion'] ?? ''],
    };
  }
  if (kind === 'CertificateSigningRequest') {
    // printCertificateSigningRequest: Approved/Denied/Pending, then Failed and Issued.
    const conds: Obj[] = o['status']?.['conditions'] ?? [];
    const has = (t: string) => conds.some((c) => c['type'] === t);
    const state = [has('Approved') ? 'Approved' : has('Denied') ? 'Denied' : 'Pending', ...(has('Failed') ? ['Failed'] : []), ...(o['status']?.['certificate'] && has('Approved') ? ['Issued'] : [])].join(',');
    const es = o['spec']?.['expirationSeconds'];
    return {
      columns: [col('Name', 0, 'string', 'name'), col('Age'), col('SignerName'), col('Requestor'), col('RequestedDuration'), col('Condition')],
      cells: [m['name'] ?? '', age(m['creationTimestamp'], now), o['spec']?.['signerName'] ?? '', o['spec']?.['username'] ?? '', typeof es === 'number' ? age(new Date(now - es * 1000).toISOString(), now) : '<none>', state],
    };
  }
  if (kind === 'RuntimeClass') {
    // printRuntimeClass: NAME, HANDLER, AGE.
    return { columns: [col('Name', 0, 'string', 'name'), col('Handler'), col('Age')], cells: [m['name'] ?? '', o['handler'] ?? '', age(m['creationTimestamp'], now)] };
  }
  if (kind === 'Pod') {
    const cs: Obj[] = o['status']?.['containerStatuses'] ?? [];
    const total = (o['spec']?.['containers'] ?? []).length;
    return {
      columns: [col('Name', 0, 'string', 'name'), col('Ready'), col('Status'), col('Restarts', 0, 'string'), col('Age'), col('IP', 1), col('Node', 1)],
      cells: [
        m['name'] ?? '',
        `${cs.filter((c) => c['ready']).length}/${total}`,
        podStatus(o),
        String(cs.reduce((n, c) => n + (Number(c['restartCount']) || 0), 0)),
        age(m['creationTimestamp'], now),
        o['status']?.['podIP'] ?? '<none>',
        o['spec']?.['nodeName'] ?? '<none>',
      ],
    };
  }
  return {
    columns: [
      { name: 'Name', type: 'string', format: 'name', description: 'Name must be unique within a namespace.', priority: 0 },
      { name: 'Created At', type: 'date', format: '', description: 'CreationTimestamp is a timestamp representing the server time when this object was created.', priority: 0 },
    ],
    cells: [m['name'] ?? '', m['creationTimestamp'] ?? ''],
  };
}

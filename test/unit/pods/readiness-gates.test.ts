import { describe, expect, it } from 'vitest';
import type { Pod } from 'kubernetes-types/core/v1.js';
import type { ObservedPod } from '../../../src/pods/sync/observed.js';
import { containerHash } from '../../../src/pods/sync/plan.js';
import { computePodStatus } from '../../../src/pods/status/status.js';

const app = { name: 'app', image: 'busybox' };
const running: ObservedPod = {
  uid: 'u1',
  name: 'web',
  namespace: 'default',
  sandboxes: [{ id: 's1', attempt: 0, ready: true, createdAt: 1 }],
  containers: [{ id: 'c1', name: 'app', podSandboxId: 's1', attempt: 0, state: 'running', restartCount: 0, hash: containerHash(app), image: 'busybox', imageRef: 'sha256:1', createdAt: 1000, startedAt: 1000 }],
};
const pod = (conditions: { type: string; status: string }[]): Pod => ({
  metadata: { name: 'web', namespace: 'default', uid: 'u1' },
  spec: { containers: [app], readinessGates: [{ conditionType: 'example.com/lb-ready' }, { conditionType: 'example.com/warm' }] },
  status: { conditions },
});
const ready = (p: Pod) => {
  const st = computePodStatus({ pod: p, observed: running, waiting: {}, runtimeName: 'containerd', now: 5000 });
  const get = (type: string) => st.conditions!.find((c) => c.type === type)!;
  return { ready: get('Ready'), containersReady: get('ContainersReady').status };
};

describe('readinessGates', () => {
  it("hold Ready False, with the kubelet's reason and messages, until every named condition is True; ContainersReady does not wait", () => {
    expect(ready(pod([]))).toMatchObject({
      containersReady: 'True',
      ready: { status: 'False', reason: 'ReadinessGatesNotReady', message: 'corresponding condition of pod readiness gate "example.com/lb-ready" does not exist., corresponding condition of pod readiness gate "example.com/warm" does not exist.' },
    });
    expect(ready(pod([{ type: 'example.com/lb-ready', status: 'True' }, { type: 'example.com/warm', status: 'False' }])).ready).toMatchObject({
      status: 'False',
      message: 'the status of pod readiness gate "example.com/warm" is not "True", but False',
    });
    const both = ready(pod([{ type: 'example.com/lb-ready', status: 'True' }, { type: 'example.com/warm', status: 'True' }])).ready;
    expect(both.status).toBe('True');
    expect(both.reason).toBeUndefined();
  });
});

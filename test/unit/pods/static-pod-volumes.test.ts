import { describe, expect, it } from 'vitest';
import { validatePodManifest } from '../../../src/pods/sources/pod-validation.js';

const manifest = (volumes: unknown[]) => ({
  apiVersion: 'v1',
  kind: 'Pod',
  metadata: { name: 'web', namespace: 'default' },
  spec: { containers: [{ name: 'app', image: 'busybox' }], volumes },
});

describe('a static pod that shows API objects in its volumes', () => {
  it('is refused naming each field and object; downwardAPI, emptyDir and hostPath stay allowed', () => {
    expect(
      validatePodManifest(
        manifest([
          { name: 'cfg', configMap: { name: 'app-config' } },
          { name: 'creds', secret: { secretName: 'db' } },
          {
            name: 'kube-api-access-x7k2p',
            projected: {
              sources: [
                { serviceAccountToken: { path: 'token', expirationSeconds: 3607 } },
                { configMap: { name: 'kube-root-ca.crt' } },
                { secret: { name: 's' } },
                { clusterTrustBundle: { path: 'b', signerName: 'x' } },
                { downwardAPI: { items: [{ path: 'namespace', fieldRef: { fieldPath: 'metadata.namespace' } }] } },
              ],
            },
          },
          { name: 'info', downwardAPI: { items: [{ path: 'labels', fieldRef: { fieldPath: 'metadata.labels' } }] } },
          { name: 'scratch', emptyDir: {} },
        ]),
      ),
    ).toEqual([
      'spec.volumes[0].configMap: a static pod cannot refer to API objects (ConfigMap "app-config")',
      'spec.volumes[1].secret: a static pod cannot refer to API objects (Secret "db")',
      "spec.volumes[2].projected.sources[0].serviceAccountToken: a static pod cannot refer to API objects (a ServiceAccount's token)",
      'spec.volumes[2].projected.sources[1].configMap: a static pod cannot refer to API objects (ConfigMap "kube-root-ca.crt")',
      'spec.volumes[2].projected.sources[2].secret: a static pod cannot refer to API objects (Secret "s")',
      'spec.volumes[2].projected.sources[3].clusterTrustBundle: a static pod cannot refer to API objects (a ClusterTrustBundle)',
    ]);
  });
});

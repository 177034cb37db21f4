/** nodelet's version: `nodelet --version`, the User-Agent, and the Node's kubeletVersion suffix. Kept equal to package.json's. */
export const VERSION = '0.1.0';

/**
 * The kubelet version nodelet behaves as: the state of the feature gates table
 * (config/feature-gates-table.ts, v1.35) and what the Node reports as `kubeletVersion`
 * (`v1.35.0-nodelet.<VERSION>`, which `kubectl get nodes` shows and the API server's
 * version skew rules read).
 */
export const KUBELET_VERSION = 'v1.35.0';

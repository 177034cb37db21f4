/**
 * `imagePullCredentialsVerificationPolicy` and `preloadedImagesVerificationAllowlist`
 * (KubeletEnsureSecretPulledImages), as the kubelet validates them: one of four policies;
 * an allowlist only with `NeverVerifyAllowlistedImages`, of repositories without tag or
 * digest (`registry.example/team/app`) or prefixes ending in a whole-segment wildcard
 * (`registry.example/team/*`). Neither may be set while the gate is off. Pure; the pods
 * floor applies the policy (src/pods/images/pull-secrets.ts).
 */

export const VERIFICATION_POLICIES = ['NeverVerify', 'NeverVerifyPreloadedImages', 'NeverVerifyAllowlistedImages', 'AlwaysVerify'] as const;
export type VerificationPolicy = (typeof VERIFICATION_POLICIES)[number];

export function isVerificationPolicy(v: unknown): v is VerificationPolicy {
  return typeof v === 'string' && (VERIFICATION_POLICIES as readonly string[]).includes(v);
}

/** Why an allowlist pattern is refused, or undefined when it is valid (the kubelet's rules). */
export function allowlistPatternProblem(pattern: string): string | undefined {
  if (pattern !== pattern.trim()) return `leading/trailing spaces are not allowed: ${JSON.stringify(pattern)}`;
  if (pattern === '') return 'the supplied pattern is empty';
  if (pattern.slice(0, -1).includes('*')) return `only a trailing full path segment wildcard '/*' is allowed: ${pattern}`;
  if (pattern.endsWith('*')) {
    if (!pattern.endsWith('/*')) return `only a full path segment wildcard '/*' is allowed: ${pattern}`;
    if (pattern.length === 2) return `at least registry hostname is required: ${pattern}`;
    return undefined;
  }
  if (pattern.endsWith('/')) return `image pattern cannot end with '/': ${pattern}`;
  if (/[:@]/.test(pattern.slice(pattern.lastIndexOf('/') + 1))) return `neither tag nor digest is accepted in an image reference: ${pattern}`;
  return undefined;
}

/** Every problem of the two fields, as [field, message] pairs; `gateOn`: KubeletEnsureSecretPulledImages. */
export function imagePullCredentialsProblems(policy: unknown, allowlist: unknown, gateOn: boolean): [string, string][] {
  const out: [string, string][] = [];
  const listSet = Array.isArray(allowlist) && allowlist.length > 0;
  if (!gateOn) {
    if (policy !== undefined && policy !== '') out.push(['imagePullCredentialsVerificationPolicy', 'must not be set if the KubeletEnsureSecretPulledImages feature gate is not enabled']);
    if (listSet) out.push(['preloadedImagesVerificationAllowlist', 'must not be set if the KubeletEnsureSecretPulledImages feature gate is not enabled']);
    return out;
  }
  if (policy !== undefined && policy !== '' && !isVerificationPolicy(policy)) {
    out.push(['imagePullCredentialsVerificationPolicy', `unsupported value ${JSON.stringify(policy)}: must be one of ${VERIFICATION_POLICIES.join(', ')}`]);
  }
  if (listSet) {
    if (policy !== 'NeverVerifyAllowlistedImages') out.push(['preloadedImagesVerificationAllowlist', 'can only be set when imagePullCredentialsVerificationPolicy is NeverVerifyAllowlistedImages']);
    (allowlist as unknown[]).forEach((p, i) => {
      if (typeof p !== 'string') return;
      const problem = allowlistPatternProblem(p);
      if (problem) out.push(['preloadedImagesVerificationAllowlist', `item ${i}: ${problem}`]);
    });
  }
  return out;
}

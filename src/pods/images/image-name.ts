/**
 * Container image names as the kubelet reads them (its `parsers.ParseImageName`, which is
 * distribution/reference's `ParseNormalizedNamed`): the repository a name stands for, with
 * Docker Hub's defaults filled in (`busybox` is `docker.io/library/busybox`,
 * `index.docker.io/x/y` is `docker.io/x/y`), and its tag and digest. The credential keyring
 * (credentials.ts) matches registries against this repository, and the pull records key
 * their credential mapping by it. Pure.
 */
import { NodeletError } from '../../errors.js';

export interface ImageName {
  /** The normalized repository, without tag or digest: `docker.io/library/busybox`. */
  repository: string;
  /** '' when the name has none. */
  tag: string;
  /** '' when the name has none. */
  digest: string;
}

const DEFAULT_DOMAIN = 'docker.io';
const LEGACY_DEFAULT_DOMAIN = 'index.docker.io';
const OFFICIAL_REPO_PREFIX = 'library/';
const NAME_TOTAL_LENGTH_MAX = 255;

// distribution/reference's grammar.
const PATH_COMPONENT = '[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*';
const DOMAIN_COMPONENT = '(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])';
const HOST = `(?:${DOMAIN_COMPONENT}(?:\\.${DOMAIN_COMPONENT})*|\\[[a-fA-F0-9:]+\\])`;
const DOMAIN_AND_PORT = `${HOST}(?::[0-9]+)?`;
const NAME = `(?:${DOMAIN_AND_PORT}/)?${PATH_COMPONENT}(?:/${PATH_COMPONENT})*`;
const TAG = '[\\w][\\w.-]{0,127}';
const DIGEST = '[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}';
const REFERENCE = new RegExp(`^(${NAME})(?::(${TAG}))?(?:@(${DIGEST}))?$`);
const IDENTIFIER = /^[a-f0-9]{64}$/;

function invalid(image: string, why: string): never {
  throw new NodeletError('INVALID_ARGUMENT', `couldn't parse image name ${JSON.stringify(image)}: ${why}`, { reason: 'InvalidImageName' });
}

/** Splits off the registry host, as distribution/reference does (a first component with `.` or `:`, `localhost`, or upper case). */
function splitDockerDomain(name: string): [string, string] {
  const i = name.indexOf('/');
  let domain: string;
  let remainder: string;
  const first = i < 0 ? '' : name.slice(0, i);
  if (i < 0 || (!/[.:]/.test(first) && first !== 'localhost' && first.toLowerCase() === first)) {
    domain = DEFAULT_DOMAIN;
    remainder = name;
  } else {
    domain = first;
    remainder = name.slice(i + 1);
  }
  if (domain === LEGACY_DEFAULT_DOMAIN) domain = DEFAULT_DOMAIN;
  if (domain === DEFAULT_DOMAIN && !remainder.includes('/')) remainder = OFFICIAL_REPO_PREFIX + remainder;
  return [domain, remainder];
}

/**
 * The normalized repository, tag and digest of `image` (a container's `image` field).
 * Throws INVALID_ARGUMENT (reason InvalidImageName) naming the image when it is not a valid
 * reference: what the kubelet's `couldn't parse image name` refuses.
 */
export function parseImageName(image: string): ImageName {
  if (typeof image !== 'string' || image === '') invalid(String(image), 'invalid reference format');
  if (image.length > 4096) invalid(image.slice(0, 64) + '…', 'invalid reference format');
  if (IDENTIFIER.test(image)) invalid(image, `invalid repository name (${image}), cannot specify 64-byte hexadecimal strings`);
  const [domain, remainder] = splitDockerDomain(image);
  const colon = remainder.indexOf(':');
  const remote = colon >= 0 ? remainder.slice(0, colon) : remainder;
  if (remote.toLowerCase() !== remote) invalid(image, `invalid reference format: repository name (${remote}) must be lowercase`);
  const m = REFERENCE.exec(`${domain}/${remainder}`);
  if (!m) invalid(image, 'invalid reference format');
  const repository = m[1]!;
  if (repository.length > NAME_TOTAL_LENGTH_MAX) invalid(image, `repository name must not be more than ${NAME_TOTAL_LENGTH_MAX} characters`);
  return { repository, tag: m[2] ?? '', digest: m[3] ?? '' };
}

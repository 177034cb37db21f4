/**
 * `podman kube play` as a second baseline for a pod start: its own storage under
 * /var/lib/nodelet-dev/podman-bench, loaded from the same local OCI images the benchmark
 * containerd imports, with the settings podman 4.3 needs on these machines (runc, not crun:
 * hybrid cgroups; rlimits below the hard limits; the local pause image as infra image).
 */
import { execFile, execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { promisify } from 'node:util';

const run = promisify(execFile);
const DIR = '/var/lib/nodelet-dev/podman-bench';
const IMAGES = '/var/lib/nodelet-dev/containerd-bench/images';

export interface Podman {
  version: string;
  /** Wall ms of `podman kube play <file>` (it returns once the containers run). */
  play(file: string): Promise<number>;
  down(file: string): Promise<void>;
}

function args(...a: string[]): string[] {
  return ['--root', path.join(DIR, 'storage'), '--runroot', path.join(DIR, 'run'), ...a];
}

/** The podman baseline, or a reason why there is none. */
export function setupPodman(): Podman | string {
  let version: string;
  try {
    version = execFileSync('podman', ['--version'], { encoding: 'utf8' }).trim();
  } catch {
    return 'podman is not installed (`apt-get install podman` installs 4.3 in about a minute on these machines)';
  }
  fs.mkdirSync(DIR, { recursive: true });
  const conf = path.join(DIR, 'containers.conf');
  fs.writeFileSync(
    conf,
    '[containers]\ndefault_ulimits = ["nofile=1024:1024", "nproc=4096:4096"]\n[engine]\nruntime = "runc"\ninfra_image = "docker.io/local/pause:latest"\ncgroup_manager = "cgroupfs"\nevents_logger = "file"\n',
  );
  const env = { ...process.env, CONTAINERS_CONF: conf };
  for (const name of ['busybox', 'pause']) {
    const ref = `docker.io/local/${name}:latest`;
    try {
      execFileSync('podman', args('image', 'exists', ref), { env });
    } catch {
      const out = execFileSync('podman', args('load', '-q', '-i', path.join(IMAGES, `${name}.tar`)), { env, encoding: 'utf8' });
      const loaded = /Loaded image(?:\(s\))?: (.+)$/m.exec(out)?.[1]?.trim();
      if (!loaded) return `podman load of ${name}.tar said: ${out}`;
      execFileSync('podman', args('tag', loaded, ref), { env });
      execFileSync('podman', args('rmi', loaded), { env, stdio: 'ignore' });
    }
  }
  return {
    version,
    async play(file) {
      const t0 = performance.now();
      await run('podman', args('kube', 'play', file), { env });
      return performance.now() - t0;
    },
    async down(file) {
      await run('podman', args('kube', 'down', file), { env }).catch(() => undefined);
    },
  };
}

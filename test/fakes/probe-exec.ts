/**
 * The probe runner's inputs for tests: an ExecFn (src/pods/probes/probes.ts, what ExecSync is to
 * probes) that answers a fixed exit code and output, and a probe target on 127.0.0.1 whose
 * container names a port `web`. Used by the unit probe tests and by the network probe
 * tests (test/integration/pods/probes-net.test.ts).
 */
import type { Container } from 'kubernetes-types/core/v1.js';
import type { ExecFn, ProbeTarget } from '../../src/pods/probes/probes.js';

export const probeContainer: Container = { name: 'app', image: 'busybox', ports: [{ name: 'web', containerPort: 0 }] };

export const probeTarget = (c: Container = probeContainer): ProbeTarget => ({ containerId: 'c1', container: c, host: '127.0.0.1' });

/** An exec that always exits with `exitCode`, printing `stdout`. */
export const execAnswer =
  (exitCode: number, stdout = ''): ExecFn =>
  async () => ({ exitCode, stdout: Buffer.from(stdout), stderr: Buffer.from('') });

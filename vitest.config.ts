import { defineConfig } from 'vitest/config';

// Projects (`npm test` runs them in phases: scripts/test-lanes.mjs):
// - `unit`: pure code and in-process fakes (fast, runs on any Node).
// - `integration` and `integration-containerd`: real processes (the built nodelet,
//   containerd, systemd-nspawn, the test API server). Each runs its files one at a time;
//   `npm test` runs the two lanes side by side in two vitest processes (one vitest process
//   runs every one-at-a-time project in a single sequential group). Every file owns what it
//   starts (its own containerd base dir, cgroup root, temp dirs, free ports), so files of the
//   two lanes never share an agent or a runtime: the containerd lane holds the files that run
//   pods on containerd, the other the rest.
// - `alone`: files whose figures the other lane's load would change (benchmark budgets,
//   memory eviction against what the machine has available, event-loop and leak figures, a
//   212 MB log read against a plain read's time, request rates measured at the server), and
// - `faults`: the fault, fuzz and access suite (`npm run test:faults [-- --full]`), both after
//   the integration lanes (groupOrder 1), alone on the machine.
const CONTAINERD_LANE = [
  'test/integration/pods/**/*.test.ts',
  'test/integration/runtime/**/*.test.ts',
  'test/integration/metrics/**/*.test.ts',
  'test/integration/server/containerd-checkpoint.test.ts',
];
const ALONE = [
  'test/integration/bench/bench-quick.test.ts',
  'test/integration/server/container-logs-follow.test.ts',
  'test/integration/connected/client-limits.test.ts',
  'test/integration/pods/eviction.test.ts',
  'test/integration/pods/env-bomb.test.ts',
  'test/integration/pods/exec-sessions.test.ts',
];

export default defineConfig({
  test: {
    maxWorkers: 3,
    projects: [
      {
        extends: true,
        test: {
          name: 'unit',
          include: ['test/unit/**/*.test.ts'],
          testTimeout: 20_000,
          sequence: { groupOrder: 0 },
        },
      },
      {
        extends: true,
        test: {
          name: 'integration',
          include: ['test/integration/**/*.test.ts'],
          exclude: [...CONTAINERD_LANE, ...ALONE],
          testTimeout: 120_000,
          hookTimeout: 300_000,
          fileParallelism: false,
          sequence: { groupOrder: 0 },
        },
      },
      {
        extends: true,
        test: {
          name: 'integration-containerd',
          include: CONTAINERD_LANE,
          exclude: ALONE,
          testTimeout: 120_000,
          hookTimeout: 300_000,
          fileParallelism: false,
          sequence: { groupOrder: 0 },
        },
      },
      {
        extends: true,
        test: {
          name: 'alone',
          include: ALONE,
          testTimeout: 120_000,
          hookTimeout: 300_000,
          fileParallelism: false,
          sequence: { groupOrder: 1 },
        },
      },
      {
        extends: true,
        test: {
          name: 'faults',
          include: ['test/faults/**/*.test.ts'],
          testTimeout: 1_200_000,
          hookTimeout: 300_000,
          fileParallelism: false,
          sequence: { groupOrder: 1 },
        },
      },
    ],
  },
});

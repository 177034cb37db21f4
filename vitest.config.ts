import { defineConfig } from 'vitest/config';

// Projects:
// - `unit`: pure code and in-process fakes (fast, runs on any Node).
// - `integration` and `integration-containerd`: real processes (the built nodelet,
//   containerd, systemd-nspawn, the test API server). Each runs its files one at a time;
//   the two run side by side. Every file owns what it starts (its own containerd base dir,
//   temp dirs, free ports), so files of the two lanes never share an agent or a runtime:
//   the containerd lane holds the files that run pods on containerd, the other the rest.
// - `faults`: the fault, fuzz and access suite (`npm run test:faults [-- --full]`), after
//   the integration lanes (groupOrder 1), alone on the machine for its load tests.
const CONTAINERD_LANE = [
  'test/integration/pods/**/*.test.ts',
  'test/integration/runtime/**/*.test.ts',
  'test/integration/metrics/**/*.test.ts',
  'test/integration/server/containerd-checkpoint.test.ts',
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
          exclude: CONTAINERD_LANE,
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
          testTimeout: 120_000,
          hookTimeout: 300_000,
          fileParallelism: false,
          sequence: { groupOrder: 0 },
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

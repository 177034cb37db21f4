import { defineConfig } from 'vitest/config';

// Two projects: `unit` is pure code and in-process fakes (fast, runs on any Node);
// `integration` starts real processes: the built nodelet, containerd, systemd-nspawn.
export default defineConfig({
  test: {
    projects: [
      {
        extends: true,
        test: {
          name: 'unit',
          include: ['test/unit/**/*.test.ts'],
          testTimeout: 20_000,
        },
      },
      {
        extends: true,
        test: {
          name: 'integration',
          include: ['test/integration/**/*.test.ts'],
          testTimeout: 120_000,
          hookTimeout: 300_000,
          fileParallelism: false,
        },
      },
      {
        extends: true,
        test: {
          // The fault, fuzz and access suite (test/faults): `npm run test:faults [-- --full]`.
          name: 'faults',
          include: ['test/faults/**/*.test.ts'],
          testTimeout: 1_200_000,
          hookTimeout: 300_000,
          fileParallelism: false,
        },
      },
    ],
  },
});

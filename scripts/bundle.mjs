// Build step: the daemon as one ES module, dist/nodelet/main.js (esbuild), beside the tsc
// output. Why: loading the tsc output is hundreds of files resolved, read and compiled one
// by one before /healthz can answer; one file is one read and one compile (BENCHMARKS.md,
// "Process start → /healthz" and the issue-17 summary, for the figures both ways).
//
// - The native addons (fs-ext, sd-notify) stay external: nodelet loads them with
//   createRequire(import.meta.url), which esbuild leaves alone, so Node finds them in
//   node_modules above dist/ as before. So are yaml and protobufjs' builds loaded the same
//   way (lazily, or where the daemon needs them).
// - The lazy import()s stay lazy: `splitting` puts each in a chunk of its own next to
//   main.js, loaded when first needed (the HTTPS server, the control-plane client, x509, ...).
// - Files found relative to the module: dist/proto/api.json is found by walking up from
//   dist/nodelet/ as from dist/src/runtime/; the YAML parse worker is a second entry point,
//   dist/nodelet/parse-worker.js, next to the chunk that holds bounded-parse.ts, which
//   opens `./parse-worker.js` relative to itself.
// - The bundled CommonJS packages (pino, commander, ...) call require() for Node's
//   built-ins: the banner gives the ES module a require of its own.
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { build } from 'esbuild';

const project = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');

// Chunk names carry a hash: a new build's chunks replace the old ones, never pile up beside them.
fs.rmSync(path.join(project, 'dist', 'nodelet'), { recursive: true, force: true });

await build({
  absWorkingDir: project,
  entryPoints: { main: 'src/main.ts', 'parse-worker': 'src/system/parse-worker.ts' },
  outdir: 'dist/nodelet',
  bundle: true,
  splitting: true,
  format: 'esm',
  platform: 'node',
  target: 'node20',
  minify: true,
  sourcemap: true,
  legalComments: 'linked',
  external: ['fs-ext', 'sd-notify'],
  banner: { js: "import{createRequire as __nodeletRequire}from'node:module';const require=__nodeletRequire(import.meta.url);" },
  logLevel: 'warning',
});
// The bin entry (npm makes it 0755 on install; a symlink in /usr/local/bin needs it too).
fs.chmodSync(path.join(project, 'dist', 'nodelet', 'main.js'), 0o755);

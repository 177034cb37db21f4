/**
 * What the container-log benchmarks (log-throughput.ts, log-follow.ts) share: the built
 * nodelet, standalone on the test CRI server, serving one running static pod (`shop/app-n1`,
 * container `web`) over HTTPS with anonymous access, and the path of that container's live
 * CRI log in a podLogsDir of the benchmark's own (no runtime writes it: the benchmark writes
 * it where the runtime would; FACTS.md: every nodelet empties the log directories of pods it
 * does not run, so each run needs its own).
 */
import { spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import type { PodList } from 'kubernetes-types/core/v1.js';
import { startFakeRuntime } from '../test/cri/fake-runtime.js';
import { sleeperManifest } from '../test/helpers/fake-node.js';
import { eventually, freePort, NodeletProcess, shebangNodeFlags, tempDir, writeKubeletConfig } from '../test/helpers/nodelet.js';
import { NODELET_MAIN } from './agent.js';

export interface LogBench {
  dir: string;
  nodelet: NodeletProcess;
  /** nodelet's certificate directory (its self-signed kubelet.crt and kubelet.key). */
  pki: string;
  /** The container's live log file (its directory exists, the file not yet). */
  live: string;
  /** `https://127.0.0.1:<port>/containerLogs/shop/<pod>/web`. */
  url: string;
  /** Stops nodelet and the CRI server, removes the directory. */
  stop(): Promise<void>;
}

/** Starts nodelet (`main`: the built daemon) with one running pod whose log the benchmark writes; `config` adds KubeletConfiguration fields. */
export async function startLogBench(prefix: string, config: Record<string, string | number> = {}, main = NODELET_MAIN): Promise<LogBench> {
  const cri = await startFakeRuntime();
  const dir = tempDir(prefix);
  let nodelet: NodeletProcess | undefined;
  const stop = async () => {
    if (nodelet) {
      nodelet.kill('SIGTERM');
      await nodelet.exited;
    }
    await cri.stop();
    fs.rmSync(dir, { recursive: true, force: true });
  };
  try {
    fs.mkdirSync(path.join(dir, 'manifests'));
    fs.writeFileSync(path.join(dir, 'manifests', 'app.yaml'), sleeperManifest('app', 'shop'));
    const ports = { https: await freePort(), readOnly: await freePort() };
    const kubeletConfig = writeKubeletConfig(dir, {
      containerRuntimeEndpoint: cri.endpoint,
      staticPodPath: path.join(dir, 'manifests'),
      podLogsDir: path.join(dir, 'logs'),
      address: '127.0.0.1',
      port: ports.https,
      readOnlyPort: ports.readOnly,
      healthzPort: 0,
      authentication: '{anonymous: {enabled: true}, webhook: {enabled: false}}',
      authorization: '{mode: AlwaysAllow}',
      ...config,
    });
    const root = path.join(dir, 'root');
    const args = ['--config', kubeletConfig, '--root-dir', root, '--lock-file', path.join(dir, 'lock'), '--hostname-override', 'n1', '--container-log-dir', path.join(dir, 'containers')];
    nodelet = new NodeletProcess(spawn(process.execPath, [...shebangNodeFlags(main), main, ...args], { stdio: ['ignore', 'pipe', 'pipe'] }));
    await nodelet.waitForMsg(/nodelet is ready/, 60_000);
    const pods = async () => ((await (await fetch(`http://127.0.0.1:${ports.readOnly}/pods`)).json()) as PodList).items;
    const pod = await eventually(async () => (await pods()).find((p) => p.status?.containerStatuses?.[0]?.state?.running), 30_000);
    const logDir = path.join(dir, 'logs', `shop_${pod.metadata!.name}_${pod.metadata!.uid}`, 'web');
    fs.mkdirSync(logDir, { recursive: true });
    return {
      dir,
      nodelet,
      pki: path.join(root, 'pki'),
      live: path.join(logDir, `${pod.status!.containerStatuses![0]!.restartCount}.log`),
      url: `https://127.0.0.1:${ports.https}/containerLogs/shop/${pod.metadata!.name}/web`,
      stop,
    };
  } catch (err) {
    await stop();
    throw err;
  }
}

/**
 * The floor of a log read over HTTPS: a Node HTTPS server under nodelet's V8 flags (those of
 * `main`'s shebang) answering GET /<name> with that file of `dir`, piped as it is: what TLS and
 * reading the file cost any agent before a record is parsed.
 */
export async function rawTlsServer(certFile: string, keyFile: string, dir: string, main = NODELET_MAIN): Promise<{ port: number; child: ChildProcess }> {
  const port = await freePort();
  const src = [
    "import fs from 'node:fs'; import https from 'node:https'; import path from 'node:path';",
    `const dir = ${JSON.stringify(dir)};`,
    `https.createServer({ cert: fs.readFileSync(${JSON.stringify(certFile)}), key: fs.readFileSync(${JSON.stringify(keyFile)}) }, (req, res) => {`,
    "  res.writeHead(200, { 'Content-Type': 'text/plain; charset=utf-8' });",
    '  fs.createReadStream(path.join(dir, path.basename(req.url)), { highWaterMark: 64 * 1024 }).pipe(res);',
    `}).listen(${port}, '127.0.0.1', () => console.log('listening'));`,
  ].join('\n');
  const child = spawn(process.execPath, [...shebangNodeFlags(main), '--input-type=module', '-e', src], { stdio: ['ignore', 'pipe', 'inherit'] });
  await new Promise<void>((resolve, reject) => {
    child.stdout!.once('data', () => resolve());
    child.once('exit', (code) => reject(new Error(`raw TLS server exited with ${code}`)));
  });
  return { port, child };
}

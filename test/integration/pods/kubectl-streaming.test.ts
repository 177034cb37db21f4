/**
 * `kubectl logs`, `exec` (`-it` too, on a real pseudo-terminal), `attach` and `port-forward`
 * (kubectl 1.32, a client no one here wrote) through the test control plane's pod
 * subresources to nodelet's `/containerLogs`, `/exec`, `/attach` and `/portForward`, and on
 * to containerd's streaming server: the whole path an operator's commands take, on a
 * containerd of this file's own.
 */
import { spawn, type ChildProcessWithoutNullStreams } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import type { Pod } from 'kubernetes-types/core/v1.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { PODS } from '../../../src/controlplane/client.js';
import { KUBECTL, KubectlProcesses } from '../../helpers/kubectl.js';
import { eventually, freePort } from '../../helpers/nodelet.js';
import { busyboxPod, startNetworkedNode, tearDownNetworkedNode, type NetworkedNode } from '../../helpers/pod-network.js';

const CONTAINERD_DIR = '/var/lib/nodelet-dev/containerd-streaming';
const NODE = 'streamnode';

let node: NetworkedNode | undefined;
const kubectls = new KubectlProcesses(() => path.join(node!.dir, 'admin.kubeconfig'));
const kubectl = (args: string[], input?: string) => kubectls.run(args, { input });
/** A long-running kubectl whose output the test watches; stopped at the end of the test. */
const kubectlBackground = (args: string[]) => kubectls.background(args);
const stop = (c: ChildProcessWithoutNullStreams) => kubectls.stop(c);

const getPod = (name: string) => node!.api.get<Pod>(PODS, { namespace: 'default', name }).catch(() => undefined);

function running(name: string, restarts = 0, timeoutMs = 30_000): Promise<Pod> {
  return eventually(async () => {
    const p = await getPod(name);
    const st = p?.status?.containerStatuses?.[0];
    return st?.state?.running && (st.restartCount ?? 0) >= restarts ? p : undefined;
  }, timeoutMs, 100);
}

// The logs pod: its first run prints 20 numbered lines and fails; the second (after the
// crash-loop backoff) prints 20 and then one more every 300 ms.
const LOGS_SCRIPT = [
  'r=$(cat /data/runs 2>/dev/null || echo 0); r=$((r+1)); echo $r > /data/runs',
  'i=0; while [ $i -lt 20 ]; do i=$((i+1)); echo "run $r line $i"; done',
  'if [ $r = 1 ]; then sleep 1; exit 1; fi',
  'while true; do i=$((i+1)); echo "run $r line $i"; sleep 0.3; done',
].join('\n');

beforeAll(async () => {
  expect(fs.existsSync(KUBECTL), `${KUBECTL} is required`).toBe(true);
  node = await startNetworkedNode({ containerdDir: CONTAINERD_DIR, node: NODE, prefix: 'nodelet-kubectl-streaming-', args: ['--node-ip', '127.0.0.1'] });
  const { api } = node;
  await api.create<Pod>(PODS, busyboxPod(NODE, 'logs', LOGS_SCRIPT, { hostNetwork: true, volumes: [{ name: 'data', emptyDir: {} }] }, { volumeMounts: [{ name: 'data', mountPath: '/data' }] }));
  await api.create<Pod>(PODS, busyboxPod(NODE, 'shell', 'trap "exit 0" TERM; while true; do sleep 1; done', { hostNetwork: true }));
  await api.create<Pod>(PODS, busyboxPod(NODE, 'web', 'mkdir -p /www && echo hello-from-the-pod > /www/index.html && exec httpd -f -p 8080 -h /www'));
}, 60_000);

afterAll(async () => {
  await kubectls.stopAll();
  await tearDownNetworkedNode({ ...node });
}, 90_000);

describe('kubectl exec', () => {
  it('prints the output and exits with the command\'s code', async () => {
    await running('shell');
    const r = await kubectl(['exec', 'shell', '--', 'sh', '-c', 'echo $((6*7)); echo to-stderr >&2; exit 3']);
    expect({ code: r.code, stdout: r.stdout, stderr: r.stderr.includes('to-stderr') }).toEqual({ code: 3, stdout: '42\n', stderr: true });
  });

  it('passes stdin with -i, up to its end', async () => {
    const r = await kubectl(['exec', '-i', 'shell', '--', 'tr', 'a-z', 'A-Z'], 'hello\nstdin\n');
    expect({ code: r.code, stdout: r.stdout }).toEqual({ code: 0, stdout: 'HELLO\nSTDIN\n' });
  });

  it('-it gets a terminal: the shell sees a TTY, echoes and answers what is typed, follows a resize', async () => {
    await running('shell');
    // kubectl on a real pseudo-terminal: util-linux `script` gives its child one (30x90,
    // set before kubectl starts) and relays our pipe to it and its output back to us.
    const { child: k, output, exited, seen } = kubectls.terminal('exec -it shell -- sh', { setup: 'stty rows 30 cols 90' });
    // The remote shell's prompt: it runs interactively.
    await seen(/# /);
    // Typed with a carriage return, as a terminal in raw mode sends it; the remote tty makes it a newline.
    let mark = output().length;
    k.stdin.write('tty; stty size; [ -t 0 ] && [ -t 1 ] && echo stdin-and-stdout-are-terminals\r');
    const ttyName = (await seen(/(\/dev\/pts\/\d+)\s*\r?\n/, mark))[1];
    await seen(/^30 90\r?$/m, mark);
    await seen(/^stdin-and-stdout-are-terminals\r?$/m, mark);
    expect(ttyName).toMatch(/^\/dev\/pts\/\d+$/);
    // Echo comes from the remote terminal (kubectl put ours in raw mode): the typed line, then its answer.
    mark = output().length;
    k.stdin.write('echo typed-$((40+2))\r');
    await seen(/echo typed-\$\(\(40\+2\)\)[\s\S]*^typed-42\r?$/m, mark);
    // A resize of kubectl's terminal (SIGWINCH to it) reaches the container's terminal.
    const kubectlPid = Number(fs.readFileSync(`/proc/${k.pid}/task/${k.pid}/children`, 'utf8').trim().split(/\s+/)[0]);
    const pts = fs.readlinkSync(`/proc/${kubectlPid}/fd/0`);
    expect(fs.readFileSync(`/proc/${kubectlPid}/cmdline`, 'utf8').split('\0')[0]).toBe(KUBECTL);
    await new Promise<void>((resolve, reject) => spawn('stty', ['-F', pts, 'rows', '40', 'cols', '100']).on('close', (c) => (c === 0 ? resolve() : reject(new Error(`stty -F ${pts}: ${c}`)))));
    await eventually(async () => {
      const from = output().length;
      k.stdin.write('stty size\r');
      await new Promise((r) => setTimeout(r, 300));
      return /^40 100\r?$/m.test(output().slice(from));
    }, 10_000, 0);
    // The shell's exit code is kubectl's.
    k.stdin.write('exit 7\r');
    expect(await exited).toBe(7);
  }, 60_000);

  it('names a missing container and a missing pod', async () => {
    const c = await kubectl(['exec', 'shell', '-c', 'nope', '--', 'true']);
    expect(c.code).not.toBe(0);
    expect(c.stderr).toMatch(/container nope is not valid for pod shell/);
    const p = await kubectl(['exec', 'nosuchpod', '--', 'true']);
    expect(p.code).not.toBe(0);
    expect(p.stderr).toMatch(/pods "nosuchpod" not found/);
  });
});

describe('kubectl logs', () => {
  it('shows every line; --previous the run before the restart; --tail, --timestamps, --limit-bytes', async () => {
    // The second run (restartCount 1) after the first one failed.
    await running('logs', 1, 60_000);
    const firstRun = Array.from({ length: 20 }, (_, i) => `run 1 line ${i + 1}\n`).join('');
    const secondStart = Array.from({ length: 20 }, (_, i) => `run 2 line ${i + 1}\n`).join('');

    const all = await kubectl(['logs', 'logs']);
    expect(all.code).toBe(0);
    expect(all.stdout.startsWith(secondStart)).toBe(true);

    const prev = await kubectl(['logs', 'logs', '--previous']);
    expect({ code: prev.code, stdout: prev.stdout }).toEqual({ code: 0, stdout: firstRun });

    const tail = await kubectl(['logs', 'logs', '--previous', '--tail=3']);
    expect(tail.stdout).toBe('run 1 line 18\nrun 1 line 19\nrun 1 line 20\n');

    const ts = await kubectl(['logs', 'logs', '--previous', '--timestamps', '--tail=2']);
    const lines = ts.stdout.trimEnd().split('\n');
    expect(lines.map((l) => l.replace(/^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d+(Z|[+-]\d{2}:\d{2}) /, ''))).toEqual(['run 1 line 19', 'run 1 line 20']);

    const limited = await kubectl(['logs', 'logs', '--previous', '--limit-bytes=13']);
    expect(limited.stdout).toBe('run 1 line 1\n');
  }, 90_000);

  it('-f shows a new line within a second', async () => {
    await running('logs', 1, 60_000);
    const f = kubectlBackground(['logs', '-f', 'logs', '--tail=1']);
    const first = await eventually(() => /run 2 line (\d+)\n/.exec(f.output())?.[1], 10_000, 20);
    const seenAt = Date.now();
    await eventually(() => new RegExp(`run 2 line ${Number(first) + 1}\\n`).test(f.output()), 3000, 20);
    expect(Date.now() - seenAt).toBeLessThan(1000);
    expect(f.child.exitCode).toBeNull();
    await stop(f.child);
  }, 30_000);
});

describe('kubectl attach', () => {
  it('sees the running container\'s output', async () => {
    await running('logs', 1, 60_000);
    const a = kubectlBackground(['attach', 'logs']);
    // Lines written after the attach: the numbers keep growing.
    const n1 = Number(await eventually(() => /run 2 line (\d+)\n/.exec(a.output())?.[1], 10_000, 20));
    await eventually(() => new RegExp(`run 2 line ${n1 + 2}\\n`).test(a.output()), 5000, 20);
    await stop(a.child);
  }, 30_000);
});

describe('kubectl port-forward', () => {
  it('reaches a port served inside a pod with its own network', async () => {
    const web = await running('web');
    expect(web.status?.podIP).toMatch(/^\d+\.\d+\.\d+\.\d+$/);
    const local = await freePort();
    const pf = kubectlBackground(['port-forward', 'pod/web', `${local}:8080`]);
    await eventually(() => /Forwarding from 127\.0\.0\.1/.test(pf.output()), 10_000, 20);
    const answer = await new Promise<string>((resolve, reject) => {
      const s = net.connect({ host: '127.0.0.1', port: local }, () => s.write('GET /index.html HTTP/1.0\r\n\r\n'));
      let b = '';
      s.on('data', (d: Buffer) => (b += d.toString()));
      s.on('end', () => resolve(b));
      s.on('error', reject);
      s.setTimeout(10_000, () => s.destroy(new Error(`no answer; port-forward said: ${pf.output()}`)));
    });
    expect(answer).toMatch(/^HTTP\/1\.[01] 200/);
    expect(answer).toContain('hello-from-the-pod');
    await stop(pf.child);
  }, 30_000);
});

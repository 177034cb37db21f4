/**
 * The machine facts a Node reports, read once at startup (the edge for node/status.ts):
 * CPU count and memory, machine-id, product UUID, boot ID, kernel and OS image, in the
 * names the kubelet uses (GOOS/GOARCH for os/arch). Unreadable files give '' (a VM or a
 * container may hide the DMI product UUID), never an error.
 */
import fs from 'node:fs';
import os from 'node:os';

const GOARCH: Record<string, string> = { x64: 'amd64', arm64: 'arm64', arm: 'arm', ia32: '386', ppc64: 'ppc64le', s390x: 's390x', riscv64: 'riscv64' };

function read(file: string): string {
  try {
    return fs.readFileSync(file, 'utf8').trim();
  } catch {
    return '';
  }
}

/** PRETTY_NAME of an os-release text (pure). */
export function prettyName(osRelease: string): string {
  const m = /^PRETTY_NAME=(.*)$/m.exec(osRelease);
  return m ? m[1]!.replace(/^["']|["']$/g, '') : '';
}

export interface MachineFacts {
  os: string;
  arch: string;
  cpuCores: number;
  memoryBytes: number;
  info: { machineID: string; systemUUID: string; bootID: string; kernelVersion: string; osImage: string };
}

export function readMachineFacts(): MachineFacts {
  return {
    os: process.platform,
    arch: GOARCH[process.arch] ?? process.arch,
    cpuCores: os.availableParallelism(),
    memoryBytes: os.totalmem(),
    info: {
      machineID: read('/etc/machine-id'),
      systemUUID: read('/sys/class/dmi/id/product_uuid').toLowerCase(),
      bootID: read('/proc/sys/kernel/random/boot_id'),
      kernelVersion: os.release(),
      osImage: prettyName(read('/etc/os-release')),
    },
  };
}

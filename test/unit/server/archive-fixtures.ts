import fs from 'node:fs';
import tar from 'tar-stream';

/** Writes a real tar archive with the given entries (name -> content) at `file`. */
export async function writeTar(file: string, entries: [string, Buffer | string][], mode = 0o644): Promise<void> {
  const pack = tar.pack();
  const out = fs.createWriteStream(file, { mode });
  const done = new Promise<void>((resolve, reject) => {
    out.on('finish', resolve);
    out.on('error', reject);
  });
  pack.pipe(out);
  for (const [name, data] of entries) {
    const buf = Buffer.isBuffer(data) ? data : Buffer.from(data);
    await new Promise<void>((resolve, reject) => pack.entry({ name, size: buf.length }, buf, (err) => (err ? reject(err) : resolve())));
  }
  pack.finalize();
  await done;
}

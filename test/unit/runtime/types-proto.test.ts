/**
 * src/runtime/types.ts mirrors the CRI messages of proto/api.proto by hand (proto-loader's
 * shapes: camelCase fields). This holds the two together: every interface named like a
 * runtime.v1 message has exactly that message's fields (its own and those of the interface
 * it extends), but for the proto fields listed here as not read by nodelet. A field renamed,
 * removed or added in the .proto fails it, naming the message and the field.
 */
import fs from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';
import { describe, expect, it } from 'vitest';

const require = createRequire(import.meta.url);
const root = path.resolve(import.meta.dirname, '../../..');

/** Proto fields the hand-written types leave out on purpose (nodelet never reads them). */
const NOT_MIRRORED: Record<string, string[]> = { Image: ['spec'] };

function interfaces(ts: string): Map<string, { base?: string; fields: string[] }> {
  const out = new Map<string, { base?: string; fields: string[] }>();
  for (const m of ts.matchAll(/^export interface (\w+)(?: extends (\w+))? \{([\s\S]*?)\n\}/gm)) {
    out.set(m[1]!, { ...(m[2] ? { base: m[2] } : {}), fields: [...m[3]!.matchAll(/^ {2}(\w+)\??:/gm)].map((f) => f[1]!) });
  }
  return out;
}

describe('the CRI types and proto/api.proto', () => {
  it('every interface named like a runtime.v1 message has exactly its fields', () => {
    const protobuf = require('protobufjs') as typeof import('protobufjs');
    const proto = new protobuf.Root().loadSync(path.join(root, 'proto/api.proto'), { keepCase: false });
    const ns = proto.lookup('runtime.v1') as import('protobufjs').Namespace;
    const types = interfaces(fs.readFileSync(path.join(root, 'src/runtime/types.ts'), 'utf8'));
    const fieldsOf = (name: string): string[] => {
      const t = types.get(name)!;
      return [...(t.base ? fieldsOf(t.base) : []), ...t.fields];
    };
    const mismatches: string[] = [];
    let checked = 0;
    for (const name of types.keys()) {
      const msg = ns.nested?.[name];
      if (!(msg instanceof protobuf.Type)) continue;
      checked++;
      const mine = fieldsOf(name);
      const theirs = Object.keys(msg.fields).filter((f) => !(NOT_MIRRORED[name] ?? []).includes(f));
      for (const f of mine) if (!theirs.includes(f)) mismatches.push(`${name}.${f}: in types.ts, not in the .proto`);
      for (const f of theirs) if (!mine.includes(f)) mismatches.push(`${name}.${f}: in the .proto, not in types.ts`);
    }
    expect(mismatches).toEqual([]);
    expect(checked).toBeGreaterThan(30);
  });
});

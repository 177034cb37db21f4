/**
 * The CRI runtime.v1 package (the subset in proto/api.proto), for the CRI client and the
 * test CRI server, with the shapes in types.ts: camelCase fields, enums as names, int64 as
 * numbers, defaults filled (the options @grpc/proto-loader is documented with).
 *
 * Start-up cost: parsing api.proto with @grpc/proto-loader (protobufjs' parser, then a
 * FileDescriptorProto of every file for reflection nodelet never uses) took a large part
 * of the time before /healthz answered. The build writes the parsed descriptor as JSON
 * (`dist/proto/api.json`, by scripts/proto-json.mjs); it is read here with protobufjs'
 * light build (no parser). Without the JSON (vitest on the sources) api.proto is parsed
 * with the full protobufjs, to the same definitions.
 *
 * This module is the codec only (per method: path, request encoder, response decoder), for
 * the daemon's CRI client over node:http2 (grpc-unary.ts): it never loads @grpc/grpc-js.
 * The grpc-js service definitions the test CRI server needs are in test/cri/proto-grpc.ts.
 */
import fs from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import type * as Protobuf from 'protobufjs';

const require = createRequire(import.meta.url);

/** How a decoded message becomes the object handed to nodelet (proto-loader's options of the same names). */
export const TO_OBJECT_OPTIONS: Protobuf.IConversionOptions = { enums: String, longs: Number, defaults: true, arrays: true, objects: true, oneofs: true };

/** The nearest `<ancestor>/<rel>` above `from`, or undefined. */
function findAbove(from: string, rel: string): string | undefined {
  for (let dir = from; ; dir = path.dirname(dir)) {
    const candidate = path.join(dir, rel);
    if (fs.existsSync(candidate)) return candidate;
    if (path.dirname(dir) === dir) return undefined;
  }
}

/**
 * Absolute path of proto/api.proto: the nearest ancestor of this module holding it, so it
 * resolves both from src/runtime (vitest, tsx) and from dist/src/runtime (built).
 */
export function criProtoPath(from = path.dirname(fileURLToPath(import.meta.url))): string {
  const p = findAbove(from, path.join('proto', 'api.proto'));
  if (!p) throw new Error(`proto/api.proto not found above ${from}`);
  return p;
}

/** The parsed api.proto as protobufjs JSON (camelCase field names), as the build writes it. */
export function criProtoJson(protoFile = criProtoPath()): unknown {
  const full = require('protobufjs') as typeof Protobuf;
  const root = new full.Root();
  root.loadSync(protoFile, { keepCase: false });
  return root.toJSON();
}

/** One unary method of runtime.v1: its HTTP/2 path and its message codecs (proto-loader's semantics). */
export interface CriMethod {
  /** `/runtime.v1.<Service>/<Method>` */
  path: string;
  requestType: Protobuf.Type;
  responseType: Protobuf.Type;
  serialize(req: object): Buffer;
  deserialize(bytes: Uint8Array): object;
}

export interface CriCodec {
  /** The method `name` of `runtime.v1.<service>`; throws for an unknown one (a bug). */
  method(service: 'RuntimeService' | 'ImageService', name: string): CriMethod;
  /** Every method of a service, by name. */
  methods(service: 'RuntimeService' | 'ImageService'): Map<string, CriMethod>;
  /** Decodes one message of `runtime.v1.<type>` to the shape the services' answers have (list-decoder.ts decodes entries with it). */
  decoder(type: string): (bytes: Uint8Array) => object;
}

let cached: CriCodec | undefined;

/** The root of runtime.v1: from the build's JSON when present (dist), else parsed from api.proto. */
function criRoot(from = path.dirname(fileURLToPath(import.meta.url))): Protobuf.Root {
  // Built: dist/src/runtime/proto.js -> dist/proto/api.json (never the source tree's api.proto parse).
  const json = findAbove(from, path.join('proto', 'api.json'));
  const light = require('protobufjs/light.js') as typeof Protobuf;
  const root = light.Root.fromJSON((json ? JSON.parse(fs.readFileSync(json, 'utf8')) : criProtoJson()) as Protobuf.INamespace);
  root.resolveAll();
  return root;
}

/** proto-loader's serializer: a plain object (camelCase, enum names) -> bytes. */
export function serializer(t: Protobuf.Type): (o: object) => Buffer {
  return (o) => {
    if (Array.isArray(o)) throw new Error(`Failed to serialize message: expected object with ${t.name} structure, got array instead`);
    return t.encode(t.fromObject(o)).finish() as Buffer;
  };
}

/** proto-loader's deserializer: bytes -> the plain object (TO_OBJECT_OPTIONS). */
export function deserializer(t: Protobuf.Type): (b: Uint8Array) => object {
  return (b) => t.toObject(t.decode(b), TO_OBJECT_OPTIONS);
}

/** The runtime.v1 codec (cached). */
export function loadCriCodec(): CriCodec {
  if (cached) return cached;
  const root = criRoot();
  const services = new Map<string, Map<string, CriMethod>>();
  const methods = (service: string): Map<string, CriMethod> => {
    let m = services.get(service);
    if (m) return m;
    const svc = root.lookupService(`runtime.v1.${service}`);
    m = new Map();
    for (const def of svc.methodsArray) {
      const req = def.resolvedRequestType!;
      const res = def.resolvedResponseType!;
      m.set(def.name, {
        path: `/${svc.fullName.replace(/^\./, '')}/${def.name}`,
        requestType: req,
        responseType: res,
        serialize: serializer(req),
        deserialize: deserializer(res),
      });
    }
    services.set(service, m);
    return m;
  };
  cached = {
    methods,
    method(service, name) {
      const m = methods(service).get(name);
      if (!m) throw new Error(`runtime.v1.${service} has no method ${name}`);
      return m;
    },
    decoder: (type) => deserializer(root.lookupType(`runtime.v1.${type}`)),
  };
  return cached;
}

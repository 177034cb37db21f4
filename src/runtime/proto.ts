/**
 * The CRI runtime.v1 package (the subset in proto/api.proto), for the CRI client and the
 * test CRI server, with the shapes in types.ts: camelCase fields, enums as names, int64 as
 * numbers, defaults filled (the options @grpc/proto-loader is documented with).
 *
 * Start-up cost: parsing api.proto with @grpc/proto-loader (protobufjs' parser, then a
 * FileDescriptorProto of every file for reflection nodelet never uses) took a large part
 * of the time before /healthz answered. The build writes the parsed descriptor as JSON
 * (`dist/proto/api.json`, by scripts/proto-json.mjs); it is read here with protobufjs'
 * light build (no parser), and the service definitions grpc-js needs are made directly,
 * with proto-loader's serializers. Without the JSON (vitest on the sources) api.proto is
 * parsed with the full protobufjs, to the same definitions.
 */
import fs from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import * as grpc from '@grpc/grpc-js';
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

export interface CriPackage {
  RuntimeService: grpc.ServiceClientConstructor;
  ImageService: grpc.ServiceClientConstructor;
  /** Decodes one message of `runtime.v1.<type>` to the shape the services' answers have (list-decoder.ts decodes entries with it). */
  decoder(type: string): (bytes: Uint8Array) => object;
}

let cached: CriPackage | undefined;

/** The root of runtime.v1: from the build's JSON when present (dist), else parsed from api.proto. */
function criRoot(from = path.dirname(fileURLToPath(import.meta.url))): Protobuf.Root {
  // Built: dist/src/runtime/proto.js -> dist/proto/api.json (never the source tree's api.proto parse).
  const json = findAbove(from, path.join('proto', 'api.json'));
  const light = require('protobufjs/light.js') as typeof Protobuf;
  const root = light.Root.fromJSON((json ? JSON.parse(fs.readFileSync(json, 'utf8')) : criProtoJson()) as Protobuf.INamespace);
  root.resolveAll();
  return root;
}

/** grpc-js's definition of one service, as proto-loader makes it (without the reflection descriptors). */
function serviceDefinition(service: Protobuf.Service): grpc.ServiceDefinition {
  const def: Record<string, grpc.MethodDefinition<object, object>> = {};
  for (const m of service.methodsArray) {
    const req = m.resolvedRequestType!;
    const res = m.resolvedResponseType!;
    def[m.name] = {
      path: `/${service.fullName.replace(/^\./, '')}/${m.name}`,
      requestStream: !!m.requestStream,
      responseStream: !!m.responseStream,
      requestSerialize: serializer(req),
      requestDeserialize: deserializer(req),
      responseSerialize: serializer(res),
      responseDeserialize: deserializer(res),
      originalName: m.name.charAt(0).toLowerCase() + m.name.slice(1),
    } as grpc.MethodDefinition<object, object>;
  }
  return def as grpc.ServiceDefinition;
}

function serializer(t: Protobuf.Type): (o: object) => Buffer {
  return (o) => {
    if (Array.isArray(o)) throw new Error(`Failed to serialize message: expected object with ${t.name} structure, got array instead`);
    return t.encode(t.fromObject(o)).finish() as Buffer;
  };
}

function deserializer(t: Protobuf.Type): (b: Buffer) => object {
  return (b) => t.toObject(t.decode(b), TO_OBJECT_OPTIONS);
}

/** The runtime.v1 package: client constructors whose `.service` is the server-side definition. */
export function loadCriPackage(): CriPackage {
  if (cached) return cached;
  const root = criRoot();
  const ctor = (name: string) => grpc.makeClientConstructor(serviceDefinition(root.lookupService(`runtime.v1.${name}`)), name);
  cached = {
    RuntimeService: ctor('RuntimeService'),
    ImageService: ctor('ImageService'),
    decoder: (type) => {
      const t = root.lookupType(`runtime.v1.${type}`);
      return (bytes) => t.toObject(t.decode(bytes), TO_OBJECT_OPTIONS);
    },
  };
  return cached;
}

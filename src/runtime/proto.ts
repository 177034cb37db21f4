/**
 * Loads proto/api.proto (the CRI runtime.v1 subset) once per process, for the CRI client
 * and for the test CRI server, with the options that give the shapes in types.ts.
 */
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import * as grpc from '@grpc/grpc-js';
import * as protoLoader from '@grpc/proto-loader';

/** Options shared by every loader of api.proto: camelCase, enums as names, int64 as numbers, defaults filled. */
export const PROTO_LOADER_OPTIONS: protoLoader.Options = {
  keepCase: false,
  enums: String,
  longs: Number,
  defaults: true,
  arrays: true,
  objects: true,
  oneofs: true,
};

/**
 * Absolute path of proto/api.proto: the nearest ancestor of this module holding it, so it
 * resolves both from src/runtime (vitest, tsx) and from dist/src/runtime (built).
 */
export function criProtoPath(from = path.dirname(fileURLToPath(import.meta.url))): string {
  for (let dir = from; ; dir = path.dirname(dir)) {
    const candidate = path.join(dir, 'proto', 'api.proto');
    if (fs.existsSync(candidate)) return candidate;
    if (path.dirname(dir) === dir) throw new Error(`proto/api.proto not found above ${from}`);
  }
}

export interface CriPackage {
  RuntimeService: grpc.ServiceClientConstructor;
  ImageService: grpc.ServiceClientConstructor;
}

let cached: CriPackage | undefined;

/** The runtime.v1 package: client constructors whose `.service` is the server-side definition. */
export function loadCriPackage(): CriPackage {
  if (cached) return cached;
  const def = protoLoader.loadSync(criProtoPath(), PROTO_LOADER_OPTIONS);
  const root = grpc.loadPackageDefinition(def) as unknown as { runtime: { v1: CriPackage } };
  cached = root.runtime.v1;
  return cached;
}

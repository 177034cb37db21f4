/**
 * The runtime.v1 services as @grpc/grpc-js definitions (what proto-loader makes, without
 * the reflection descriptors), for the test CRI server (fake-runtime.ts beside it) and
 * tests that call it with grpc-js. The daemon never imports this module: its CRI client
 * speaks gRPC over node:http2 (grpc-unary.ts) with the codec in proto.ts.
 */
import * as grpc from '@grpc/grpc-js';
import { deserializer, loadCriCodec, serializer } from '../../src/runtime/proto.js';

export interface CriPackage {
  RuntimeService: grpc.ServiceClientConstructor;
  ImageService: grpc.ServiceClientConstructor;
  /** Decodes one message of `runtime.v1.<type>` (proto.ts's decoder). */
  decoder(type: string): (bytes: Uint8Array) => object;
}

let cached: CriPackage | undefined;

function serviceDefinition(service: 'RuntimeService' | 'ImageService'): grpc.ServiceDefinition {
  const codec = loadCriCodec();
  const def: Record<string, grpc.MethodDefinition<object, object>> = {};
  for (const [name, m] of codec.methods(service)) {
    def[name] = {
      path: m.path,
      requestStream: false,
      responseStream: false,
      requestSerialize: m.serialize,
      requestDeserialize: deserializer(m.requestType),
      responseSerialize: serializer(m.responseType),
      responseDeserialize: m.deserialize,
      originalName: name.charAt(0).toLowerCase() + name.slice(1),
    } as grpc.MethodDefinition<object, object>;
  }
  return def as grpc.ServiceDefinition;
}

/** The runtime.v1 package: client constructors whose `.service` is the server-side definition. */
export function loadCriPackage(): CriPackage {
  if (cached) return cached;
  const codec = loadCriCodec();
  cached = {
    RuntimeService: grpc.makeClientConstructor(serviceDefinition('RuntimeService'), 'RuntimeService'),
    ImageService: grpc.makeClientConstructor(serviceDefinition('ImageService'), 'ImageService'),
    decoder: codec.decoder,
  };
  return cached;
}

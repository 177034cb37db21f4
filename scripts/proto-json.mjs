// Build step: proto/api.proto parsed once (protobufjs, camelCase fields) into dist/proto/api.json,
// which src/runtime/proto.ts loads at start instead of parsing the .proto (see there).
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { createRequire } from 'node:module';
const require = createRequire(import.meta.url);
const project = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const protobuf = require('protobufjs');
const root = new protobuf.Root();
root.loadSync(path.join(project, 'proto', 'api.proto'), { keepCase: false });
fs.mkdirSync(path.join(project, 'dist', 'proto'), { recursive: true });
fs.writeFileSync(path.join(project, 'dist', 'proto', 'api.json'), JSON.stringify(root.toJSON()));

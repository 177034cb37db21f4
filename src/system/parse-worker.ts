/**
 * The worker of bounded-parse.ts: parses one YAML text per message with parseYamlSync and
 * posts back the documents or the refusal. It holds no state; the main thread ends it
 * when a parse runs over time or memory, or when it is idle.
 */
import { parentPort } from 'node:worker_threads';
import { NodeletError, errorMessage } from '../errors.js';
import { parseYamlSync, type WorkerReply, type WorkerRequest } from './bounded-parse.js';

parentPort?.on('message', (req: WorkerRequest) => {
  let reply: WorkerReply;
  try {
    reply = { ok: true, docs: parseYamlSync(req.text, { file: req.file, what: req.what, limits: req.limits }) };
  } catch (err) {
    reply =
      err instanceof NodeletError
        ? { ok: false, message: err.message, details: { ...err.details } }
        : { ok: false, message: `${req.what} ${req.file}: could not be parsed: ${errorMessage(err).split('\n')[0]}`, details: { file: req.file, what: req.what } };
  }
  parentPort!.postMessage(reply);
});

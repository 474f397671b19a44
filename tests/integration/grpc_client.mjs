// gRPC clients for the integration tests, from npm packages the project did
// not write: @grpc/grpc-js with @grpc/proto-loader loading
// proto/tqserve/v1/generation.proto, and grpc-health-check's service
// definition of grpc.health.v1.Health.
import net from 'node:net';
import path from 'node:path';

import grpc from '@grpc/grpc-js';
import protoLoader from '@grpc/proto-loader';
import { service as healthService } from 'grpc-health-check';

import { SOURCE_DIR } from './harness.mjs';

/** The daemon's gRPC address from its log line "tqserve: gRPC listening on HOST:PORT". */
export function grpcAddress(stderr) {
  const m = /tqserve: gRPC listening on (\S+):(\d+)\s/.exec(stderr);
  if (!m) throw new Error(`no gRPC listening line in the daemon's log:\n${stderr}`);
  return `${m[1]}:${m[2]}`;
}

const definition = protoLoader.loadSync(path.join(SOURCE_DIR(), 'proto/tqserve/v1/generation.proto'), {
  keepCase: true, // field names as in the .proto (token_ids, finish_reason)
  longs: String,
  enums: String,
  defaults: true,
  oneofs: true,
});
const GenerationService = grpc.loadPackageDefinition(definition).tqserve.v1.GenerationService;
const HealthClient = grpc.makeGenericClientConstructor(healthService, 'Health');

/**
 * { generation, health } clients for `address`; close() closes both.
 * `credentials`: grpc-js channel credentials (plaintext unless given, e.g.
 * grpc.credentials.createSsl(ca)).
 */
export function connect(address, credentials = grpc.credentials.createInsecure()) {
  const generation = new GenerationService(address, credentials);
  const health = new HealthClient(address, credentials);
  return {
    generation,
    health,
    close() {
      generation.close();
      health.close();
    },
  };
}

/** A unary call as a promise (rejects with the grpc-js error: .code, .details). */
export function unary(client, method, request, deadlineMs = 30_000) {
  return new Promise((resolve, reject) => {
    client[method](request, { deadline: Date.now() + deadlineMs }, (err, response) => (err ? reject(err) : resolve(response)));
  });
}

/**
 * Runs Generate to its end: { status (grpc code), details, messages, text
 * (concatenated deltas), token_ids (concatenated), last }.
 */
export function generate(client, request, { deadlineMs = 120_000 } = {}) {
  return new Promise((resolve) => {
    const call = client.Generate(request, { deadline: Date.now() + deadlineMs });
    const out = { messages: [], text: '', token_ids: [] };
    call.on('data', (m) => {
      out.messages.push(m);
      out.text += m.text;
      out.token_ids.push(...m.token_ids);
    });
    call.on('error', () => {}); // the status event carries the code
    call.on('status', (s) => {
      out.status = s.code;
      out.details = s.details;
      out.last = out.messages.at(-1);
      resolve(out);
    });
  });
}

/**
 * The service's method definitions from @grpc/proto-loader (path,
 * requestDeserialize, ...): `serviceMethods.Generate.requestDeserialize(bytes)`
 * decodes with protobufjs, which throws on bytes that are not a valid message.
 */
export const serviceMethods = definition['tqserve.v1.GenerationService'];

/**
 * Calls `method` of the service with `bytes` sent as they are (no
 * serialization: a raw request body). Unary methods resolve to { code,
 * details }; Generate (server streaming) too, with the messages received.
 */
export function rawCall(client, method, bytes, deadlineMs = 10_000) {
  const { path: rpc, responseStream } = serviceMethods[method];
  const asIs = (b) => b;
  const options = { deadline: Date.now() + deadlineMs };
  return new Promise((resolve) => {
    if (!responseStream) {
      client.makeUnaryRequest(rpc, asIs, asIs, bytes, new grpc.Metadata(), options, (err) =>
        resolve(err ? { code: err.code, details: err.details } : { code: grpc.status.OK, details: '' }));
      return;
    }
    const call = client.makeServerStreamRequest(rpc, asIs, asIs, bytes, new grpc.Metadata(), options);
    const messages = [];
    call.on('data', (m) => messages.push(m));
    call.on('error', () => {}); // the status event carries the code
    call.on('status', (s) => resolve({ code: s.code, details: s.details, messages }));
  });
}

/** grpc.health.v1.Health/Check: 'SERVING', 'NOT_SERVING', ... (rejects on errors). */
export async function healthStatus(health, service = '') {
  return (await unary(health, 'Check', { service }, 5_000)).status;
}

export const Status = grpc.status;
export { grpc };

/** A TCP port that is free now (the OS picks it; --grpc-port 0 disables gRPC). */
export function freePort() {
  return new Promise((resolve, reject) => {
    const server = net.createServer();
    server.on('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address();
      server.close(() => resolve(port));
    });
  });
}

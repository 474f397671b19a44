// Prints the grpc.health.v1.Health/Check status (SERVING, NOT_SERVING, ...)
// of the server at ADDRESS for service "" — what Kubernetes' native gRPC
// probe asks — using the integration tests' clients (@grpc/grpc-js and
// grpc-health-check's service definition, tests/integration/node_modules).
//   node tests/deploy/grpc_health.mjs 127.0.0.1:50051
import { connect, healthStatus } from '../integration/grpc_client.mjs';

const address = process.argv[2];
if (!address) {
  console.error('usage: grpc_health.mjs HOST:PORT');
  process.exit(2);
}
const { health, close } = connect(address);
try {
  console.log(await healthStatus(health));
} finally {
  close();
}

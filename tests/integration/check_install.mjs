// Fails with a clear message unless node_modules holds the version of every
// direct dependency (openai, the gRPC clients) that package-lock.json pins
// (scripts/install_deps.sh runs `npm ci` here).
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));
const read = (file) => JSON.parse(fs.readFileSync(path.join(here, file), 'utf8'));
const lock = read('package-lock.json');
let ok = true;
for (const name of Object.keys(read('package.json').dependencies)) {
  const locked = lock.packages[`node_modules/${name}`].version;
  let installed;
  try {
    installed = read(`node_modules/${name}/package.json`).version;
  } catch {
    installed = 'nothing';
  }
  if (installed !== locked) {
    console.error(`tests/integration: ${name} ${installed} installed, ${locked} locked; run scripts/install_deps.sh (npm ci in tests/integration)`);
    ok = false;
  } else {
    console.log(`${name} ${installed} (locked) installed`);
  }
}
if (!ok) process.exit(1);

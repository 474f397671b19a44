// Fails with a clear message unless node_modules holds the openai version that
// package-lock.json pins (scripts/install_deps.sh runs `npm ci` here).
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));
const locked = JSON.parse(fs.readFileSync(path.join(here, 'package-lock.json'), 'utf8')).packages['node_modules/openai'].version;
let installed;
try {
  installed = JSON.parse(fs.readFileSync(path.join(here, 'node_modules/openai/package.json'), 'utf8')).version;
} catch {
  installed = 'nothing';
}
if (installed !== locked) {
  console.error(`tests/integration: openai ${installed} installed, ${locked} locked; run scripts/install_deps.sh (npm ci in tests/integration)`);
  process.exit(1);
}
console.log(`openai ${installed} (locked) installed`);

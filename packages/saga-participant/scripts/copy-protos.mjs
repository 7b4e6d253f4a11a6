// Copies the contract's .proto files from the repository (proto/proto) into this package's
// proto/ folder, so that the built package and its tarball carry the protos they serve.
// Outside the repository (the package unpacked from its tarball) the copies are already
// there and are kept.
import { copyFileSync, existsSync, mkdirSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));
const pkg = path.resolve(here, '..');
const source = path.resolve(pkg, '../../proto/proto');
const files = ['participant/v1/step.proto', 'participant/v1/participant.proto'];

if (!existsSync(path.join(source, files[0]))) {
  const missing = files.filter((f) => !existsSync(path.join(pkg, 'proto', f)));
  if (missing.length > 0) {
    console.error(`copy-protos: ${source} not found and proto/ lacks ${missing.join(', ')}`);
    process.exit(1);
  }
  process.exit(0);
}
for (const file of files) {
  const to = path.join(pkg, 'proto', file);
  mkdirSync(path.dirname(to), { recursive: true });
  copyFileSync(path.join(source, file), to);
}

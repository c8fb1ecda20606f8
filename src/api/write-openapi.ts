// `npm run build` writes the contract to src/api/openapi.json (committed); a test fails when it drifts.
import { writeFileSync } from 'node:fs';
import { createApp } from './app.js';
import type { Deps } from '../service/deps.js';

export function generatedContract(): string {
  // Handlers never run here: the document is built from the route declarations alone.
  return `${JSON.stringify(createApp({} as Deps, { rateLimit: 0 }).contract(), null, 2)}\n`;
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const out = process.argv[2] ?? 'src/api/openapi.json';
  writeFileSync(out, generatedContract());
  process.stdout.write(`wrote ${out}\n`);
}

// Preloaded into a child with NODE_OPTIONS=--import=<this file>: appends every module the process resolves (ES
// imports, through a module.register resolve hook on the loader thread) or requires (CommonJS, through Module._load)
// to the file named by NODE_SVC_TEST_MODULE_LOG, one `import <url>` or `require <request>` line each. The tracing test
// reads it to prove which packages a daemon loaded.
import { appendFileSync } from 'node:fs';
import Module, { register } from 'node:module';
import { isMainThread } from 'node:worker_threads';

const FILE = process.env.NODE_SVC_TEST_MODULE_LOG;
const note = (how, what) => { if (FILE) appendFileSync(FILE, `${how} ${what}\n`); };

/** The loader thread's hook: every ES module resolution. */
export async function resolve(specifier, context, next) {
  const r = await next(specifier, context);
  note('import', r.url);
  return r;
}

if (isMainThread && FILE) {
  register(import.meta.url);
  const load = Module._load;
  Module._load = function probeLoad(request, ...rest) {
    note('require', request);
    return load.call(this, request, ...rest);
  };
}

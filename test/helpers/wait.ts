// Bounded waiting for tests: poll until something holds, or fail naming what and the last value seen.
export const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

export async function waitFor<T>(fn: () => Promise<T | undefined | null | false> | T | undefined | null | false, what: string, timeoutMs = 20_000, everyMs = 50): Promise<T> {
  const end = Date.now() + timeoutMs;
  let last: unknown;
  for (;;) {
    last = await fn();
    if (last) return last as T;
    if (Date.now() > end) throw new Error(`${what}: not reached within ${timeoutMs} ms (last: ${JSON.stringify(last, (_k, v) => (typeof v === 'bigint' ? v.toString() : v))?.slice(0, 2000)})`);
    await sleep(everyMs);
  }
}

/** RFC 3339 UTC with milliseconds, the one time format on the wire. The last answer is kept: hot reads stamp
 *  `asOf` with the same millisecond many times over (a Date and its formatting cost ~0.6 µs each time). */
let lastMs = NaN;
let lastIso = '';
export const iso = (ms: number): string => {
  if (ms !== lastMs) {
    lastIso = new Date(ms).toISOString(); // throws RangeError for a time out of range, as before
    lastMs = ms;
  }
  return lastIso;
};
export const nowSeconds = (ms: number = Date.now()): number => Math.floor(ms / 1000);

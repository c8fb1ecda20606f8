/** RFC 3339 UTC with milliseconds, the one time format on the wire. */
export const iso = (ms: number): string => new Date(ms).toISOString();
export const nowSeconds = (ms: number = Date.now()): number => Math.floor(ms / 1000);

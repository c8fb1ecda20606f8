import { randomBytes } from 'node:crypto';

/** Node ids (DESIGN §3). */
export const NODE_ID_RE = /^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$/;

/** Stream, budget, subscription ids chosen by issuers: printable, bounded, no slash (they sit in paths). */
export const EXTERNAL_ID_RE = /^[A-Za-z0-9][A-Za-z0-9._:@+=-]{0,255}$/;

const CROCKFORD = '0123456789ABCDEFGHJKMNPQRSTVWXYZ';
let lastTime = -1;
let lastRandom: number[] = [];

/** Monotonic ULID: sortable by creation, unique within the process even in the same millisecond. */
export function ulid(now: number = Date.now()): string {
  if (now <= lastTime) {
    // Same (or earlier) millisecond: increment the random part so ids stay ordered.
    now = lastTime;
    for (let i = lastRandom.length - 1; i >= 0; i--) {
      if (lastRandom[i]! < 31) { lastRandom[i]!++; break; }
      lastRandom[i] = 0;
    }
  } else {
    const bytes = randomBytes(16);
    lastRandom = Array.from(bytes, (b) => b & 31);
    lastTime = now;
  }
  let t = now;
  let time = '';
  for (let i = 0; i < 10; i++) { time = CROCKFORD[t % 32] + time; t = Math.floor(t / 32); }
  return time + lastRandom.map((n) => CROCKFORD[n]).join('');
}

export type IdPrefix = 'evt' | 'whk' | 'dlv' | 'atm' | 'tok' | 'ctl' | 'stl' | 'alr' | 'x4p';
export const newId = (prefix: IdPrefix): string => `${prefix}_${ulid()}`;

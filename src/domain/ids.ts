import { randomBytes } from 'node:crypto';

/** Node ids (DESIGN §3). */
export const NODE_ID_RE = /^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$/;

/** Stream, budget, subscription ids chosen by issuers: printable, bounded, no slash (they sit in paths). */
export const EXTERNAL_ID_RE = /^[A-Za-z0-9][A-Za-z0-9._:@+=-]{0,255}$/;

export const CROCKFORD = '0123456789ABCDEFGHJKMNPQRSTVWXYZ';
/** Random bytes fetched at once: 16 are used per new millisecond, so one call to the CSPRNG serves 256 of them. */
const POOL_BYTES = 4096;
let pool = Buffer.alloc(0);
let poolAt = 0;
let lastTime = -1;
/** The last id's time part (10 digits), its random part's 16 five-bit digits, and the first 15 of them as text. */
let timeText = '';
const random = new Uint8Array(16);
let randomHead = '';

/**
 * Monotonic ULID: sortable by creation, unique within the process even in the same millisecond (the random part of
 * the last id plus one; past its largest value, the next millisecond). Many ids in one millisecond is the common case
 * under load (an event, its deliveries' block, the attempts): such an id costs one digit's change, not the 26 digits
 * rebuilt and a call to the CSPRNG for each new millisecond (randomBytes and the string building were ~3 % of the
 * PostgreSQL daemon's CPU on control facts, bench/postgres).
 */
export function ulid(now: number = Date.now()): string {
  if (now <= lastTime) {
    const i = plusOne(random);
    if (i < 0) return ulid(lastTime + 1); // 80 bits used up in one millisecond: the next one, still in order
    if (i < 15) randomHead = digits(random, 15);
  } else {
    if (poolAt + 16 > pool.length) {
      pool = randomBytes(POOL_BYTES);
      poolAt = 0;
    }
    for (let k = 0; k < 16; k++) random[k] = pool[poolAt + k]! & 31;
    poolAt += 16;
    lastTime = now;
    let t = now;
    timeText = '';
    for (let k = 0; k < 10; k++) { timeText = CROCKFORD[t % 32] + timeText; t = Math.floor(t / 32); }
    randomHead = digits(random, 15);
  }
  return timeText + randomHead + CROCKFORD[random[15]!];
}

/**
 * Base-32 digits (most significant first) plus one, in place: the index of the highest digit that changed, or -1 when
 * every digit was 31 (all are 0 now: the caller must not use them as a larger number).
 */
export function plusOne(d: Uint8Array): number {
  let i = d.length - 1;
  while (i >= 0 && d[i] === 31) d[i--] = 0;
  if (i >= 0) d[i]!++;
  return i;
}

function digits(values: Uint8Array, n: number): string {
  let out = '';
  for (let k = 0; k < n; k++) out += CROCKFORD[values[k]!];
  return out;
}

/** The base-32 digits at the end of an id that a block (newIdBlock) leaves to its user: 32^4, 1,048,576 ids. */
export const BLOCK_DIGITS = 4;

/**
 * The first 22 characters of ids that nothing else in this process will ever start with (`prefix_` and the ULID's
 * time and first 12 random digits): the caller makes up to 32^BLOCK_DIGITS ids by appending BLOCK_DIGITS digits of
 * its own, in order (an event's fan-out does so in SQL, one id per matching subscription, however many match). The
 * ids before it are all smaller, the ids after it all larger: the last BLOCK_DIGITS random digits are set to their
 * largest before it is taken (so it starts a new prefix) and again after (so the next id does).
 */
export function newIdBlock(prefix: IdPrefix, now: number = Date.now()): string {
  const fill = () => random.fill(31, 16 - BLOCK_DIGITS);
  fill();
  const first = ulid(now);
  fill();
  return `${prefix}_${first.slice(0, 26 - BLOCK_DIGITS)}`;
}

export type IdPrefix = 'evt' | 'whk' | 'dlv' | 'atm' | 'tok' | 'ctl' | 'stl' | 'alr' | 'x4p';
export const newId = (prefix: IdPrefix): string => `${prefix}_${ulid()}`;

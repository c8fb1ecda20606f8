// The reference consumer (DESIGN §9): signature first (nothing is touched on a mismatch), then the envelope,
// then dedupe on the event id and a join-semilattice merge. Fed every event twice and shuffled, its state
// equals one in-order delivery.
import { checkEnvelope, emptyState, merge, type ConsumerState } from '../domain/consumer.js';
import { verifyWebhookSignature } from './signature.js';

export type { ConsumerState } from '../domain/consumer.js';

export interface ConsumerStore {
  /** Atomically: if `id` was seen, 'duplicate'; else mark it seen, update the state with `fn`, persist, 'applied'. */
  apply(id: string, fn: (state: ConsumerState) => void): Promise<'applied' | 'duplicate'>;
  state(): Promise<ConsumerState>;
  close?(): void;
}

export type HeaderBag = Headers | Record<string, string | string[] | undefined>;

export interface HandleResult {
  status: 'applied' | 'duplicate' | 'rejected';
  reason?: 'bad_signature' | 'bad_envelope' | 'event_id_mismatch';
  detail?: string;
  event?: { id: string; type: string; schemaVersion: string; data: Record<string, unknown> };
}

export function memoryStore(): ConsumerStore {
  const seen = new Set<string>();
  const s = emptyState();
  return {
    async apply(id, fn) {
      if (seen.has(id)) return 'duplicate';
      fn(s);
      seen.add(id);
      return 'applied';
    },
    async state() {
      return structuredClone(s);
    },
  };
}

/** A durable store in one SQLite file (better-sqlite3): seen ids and the state, written in one transaction. */
export async function sqliteStore(path: string): Promise<ConsumerStore> {
  const { createRequire } = await import('node:module');
  const Database = createRequire(import.meta.url)('better-sqlite3') as typeof import('better-sqlite3');
  const db = new Database(path);
  db.pragma('journal_mode = WAL');
  db.pragma('synchronous = FULL');
  db.exec(`CREATE TABLE IF NOT EXISTS consumer_seen (id TEXT PRIMARY KEY) STRICT;
           CREATE TABLE IF NOT EXISTS consumer_state (k INTEGER PRIMARY KEY CHECK (k = 1), json TEXT NOT NULL) STRICT;`);
  const load = (): ConsumerState => {
    const row = db.prepare('SELECT json FROM consumer_state WHERE k = 1').get() as { json: string } | undefined;
    return row ? (JSON.parse(row.json) as ConsumerState) : emptyState();
  };
  const apply = db.transaction((id: string, fn: (s: ConsumerState) => void): 'applied' | 'duplicate' => {
    if (db.prepare('SELECT 1 FROM consumer_seen WHERE id = ?').get(id)) return 'duplicate';
    const s = load();
    fn(s);
    db.prepare('INSERT INTO consumer_seen(id) VALUES (?)').run(id);
    db.prepare('INSERT INTO consumer_state(k, json) VALUES (1, ?) ON CONFLICT(k) DO UPDATE SET json = excluded.json').run(JSON.stringify(s));
    return 'applied';
  });
  return {
    async apply(id, fn) {
      return apply.immediate(id, fn);
    },
    async state() {
      return load();
    },
    close: () => db.close(),
  };
}

function header(h: HeaderBag, name: string): string | undefined {
  if (typeof (h as Headers).get === 'function') return (h as Headers).get(name) ?? undefined;
  const bag = h as Record<string, string | string[] | undefined>;
  const v = bag[name] ?? Object.entries(bag).find(([k]) => k.toLowerCase() === name)?.[1];
  return Array.isArray(v) ? v[0] : v;
}

export interface ConsumerOptions {
  /** The subscription secret (whsec_…); several during a rotation. */
  secret: string | string[];
  store?: ConsumerStore;
}

export function createConsumer(opts: ConsumerOptions) {
  const secrets = (Array.isArray(opts.secret) ? opts.secret : [opts.secret]).filter((s) => typeof s === 'string' && s);
  if (!secrets.length) throw new TypeError('createConsumer needs the subscription secret');
  const store = opts.store ?? memoryStore();
  return {
    async handle(rawBody: string | Uint8Array, headers: HeaderBag): Promise<HandleResult> {
      const sigs = [header(headers, 'x-service-signature'), header(headers, 'x-service-signature-previous')];
      const signed = secrets.some((s) => sigs.some((h) => verifyWebhookSignature(s, rawBody, h)));
      if (!signed) return { status: 'rejected', reason: 'bad_signature', detail: 'x-service-signature does not match the body' };
      let parsed: unknown;
      try {
        parsed = JSON.parse(typeof rawBody === 'string' ? rawBody : Buffer.from(rawBody).toString('utf8'));
      } catch {
        return { status: 'rejected', reason: 'bad_envelope', detail: 'body is not JSON' };
      }
      const e = checkEnvelope(parsed);
      if (typeof e === 'string') return { status: 'rejected', reason: 'bad_envelope', detail: e };
      const idHeader = header(headers, 'x-service-event-id');
      if (idHeader !== undefined && idHeader !== e.id) return { status: 'rejected', reason: 'event_id_mismatch', detail: 'x-service-event-id differs from the body id' };
      const status = await store.apply(e.id, (s) => merge(s, e));
      return { status, event: { id: e.id, type: e.type, schemaVersion: e.schemaVersion, data: e.data } };
    },
    state: () => store.state(),
    close: () => store.close?.(),
  };
}
export type Consumer = ReturnType<typeof createConsumer>;

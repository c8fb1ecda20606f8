import type Database from 'better-sqlite3';
import m0010 from './0010-admin.js';
import m0020 from './0020-streams.js';
import m0030 from './0030-webhooks.js';
import m0040 from './0040-settlements.js';
import m0050 from './0050-card.js';
import m0060 from './0060-funding.js';
import m0070 from './0070-fair-delivery.js';
import m0080 from './0080-stream-activity.js';
import m0090 from './0090-history.js';
import m0100 from './0100-flat-health.js';
import m0110 from './0110-leases.js';
import m0120 from './0120-event-visibility.js';
import m0130 from './0130-counter-slots.js';
import m0140 from './0140-receipts.js';
import m0150 from './0150-alerts.js';
import m0160 from './0160-x402.js';
import m0170 from './0170-x402-streams.js';
import m0180 from './0180-dead-resolved.js';
import m0190 from './0190-delivery-write-cost.js';
import m0200 from './0200-one-body-per-event.js';
import m0210 from './0210-no-due-index.js';
import m0220 from './0220-statement-counts.js';
import m0230 from './0230-inline-insert-counts.js';

export interface Migration {
  version: number;
  name: string;
  /** SQLite: the DDL (and backfills) run in the migration's transaction. */
  up(db: Database.Database): void;
  /**
   * PostgreSQL: the same schema step as SQL (several statements, run in the migration's transaction). A PostgreSQL
   * database is always created from 0010 by a build that has every step, so backfills of existing rows are left out.
   */
  postgres: string;
}

/** In order, steps of 10 (Signal's habit) so a fix can slot in between. */
export const MIGRATIONS: Migration[] = [m0010, m0020, m0030, m0040, m0050, m0060, m0070, m0080, m0090, m0100, m0110, m0120, m0130, m0140, m0150, m0160, m0170, m0180, m0190, m0200, m0210, m0220, m0230];

// Placeholder until the PostgreSQL store lands (branch pg).
import type { Store } from './sql.js';
export async function openPostgresStore(_url: string, _o: { dataDir: string; readonly?: boolean }): Promise<Store> {
  throw new Error('PostgreSQL store not built yet');
}

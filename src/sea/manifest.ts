// What the build embeds and the binary extracts: shared by build.ts (writer) and assets.ts (reader).

/** The SEA asset holding the manifest itself. */
export const MANIFEST_ASSET = 'manifest.json';

export interface EmbeddedFile {
  /** SEA asset key. */
  asset: string;
  /** Hex sha256 of the content: names the extracted file (content-addressed, so versions never clash). */
  sha256: string;
  /** Bytes: an extracted file of another size is written again. */
  size: number;
}

export interface SeaManifest {
  version: string;
  /** better-sqlite3's native addon, built for the very node binary the blob is injected into. */
  sqlite: EmbeddedFile;
  /** ESM bundles of the TUI, keyed by their path under dist/tui (e.g. `watch.js`). */
  tui: Record<string, EmbeddedFile>;
}

/** The module id better-sqlite3's addon resolves as (src/store/db.ts asks require.resolve for it). */
export const SQLITE_ADDON_ID = 'better-sqlite3/build/Release/better_sqlite3.node';

/** The CLI as far as `verify` goes (src/sea/start.ts runs it), and its V8 code cache. */
export const CLI_ASSET = 'cli.cjs';
export const CLI_CACHE_ASSET = 'cli.cjs.cache';

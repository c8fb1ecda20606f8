// The single binary's CLI (DESIGN §12): build.ts bundles this into the CJS asset that the SEA main (start.ts) runs.
// Nothing is extracted up front: the SQLite addon (sqlite.ts) and the TUI (tui.ts) are written to the cache dir
// the first time a command needs them, so `--help` or `version` touch no disk.
import '../cli/main.js';

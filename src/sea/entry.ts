// The single binary's main (DESIGN §12): build.ts bundles this into one CJS file that node's SEA runs.
// Nothing is extracted up front: the SQLite addon (sqlite.ts) and the TUI (tui.ts) are written to the cache dir
// the first time a command needs them, so `--help` or `version` touch no disk.
import '../cli/main.js';

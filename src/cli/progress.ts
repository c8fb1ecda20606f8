// A progress bar on stderr when it is a terminal; silent otherwise (scripts read stdout's JSON).
export function progressBar(label: string) {
  const tty = !!process.stderr.isTTY;
  let last = -1;
  return {
    update(done: number, total: number) {
      if (!tty || total <= 0) return;
      const pct = Math.min(100, Math.floor((done * 100) / total));
      if (pct === last) return;
      last = pct;
      const width = 30;
      const full = Math.round((pct * width) / 100);
      process.stderr.write(`\r${label} [${'#'.repeat(full)}${'.'.repeat(width - full)}] ${String(pct).padStart(3)}% (${done}/${total})`);
    },
    end() {
      if (tty && last >= 0) process.stderr.write('\n');
    },
  };
}

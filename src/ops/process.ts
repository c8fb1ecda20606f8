// The process metrics Prometheus clients export by default (prom-client's names), and node_svc_build_info:
// read at scrape time, no dependency.
import { readdirSync, readFileSync } from 'node:fs';
import { COMMIT, VERSION } from '../version.js';

const startSeconds = Math.round((Date.now() - process.uptime() * 1000) / 1000);

const line = (name: string, type: 'gauge' | 'counter', help: string, value: number, labels = '') =>
  `# HELP ${name} ${help}\n# TYPE ${name} ${type}\n${name}${labels} ${value}`;

function openFds(): number | undefined {
  try {
    return readdirSync('/proc/self/fd').length; // Linux only; left out elsewhere
  } catch {
    return undefined;
  }
}

/** The soft limit on open files (`Max open files` of /proc/self/limits); undefined where unknown or unlimited. */
function maxFds(): number | undefined {
  try {
    const m = /^Max open files\s+(\d+)/m.exec(readFileSync('/proc/self/limits', 'utf8'));
    return m ? Number(m[1]) : undefined;
  } catch {
    return undefined;
  }
}

export function renderProcessMetrics(): string {
  const cpu = process.cpuUsage();
  const mem = process.memoryUsage();
  const fds = openFds();
  const parts = [
    line('node_svc_build_info', 'gauge', 'Always 1; the labels say which build is running', 1, `{version="${VERSION}",commit="${COMMIT}",node_version="${process.version}"}`),
    line('process_cpu_user_seconds_total', 'counter', 'User CPU time spent in seconds', cpu.user / 1e6),
    line('process_cpu_system_seconds_total', 'counter', 'System CPU time spent in seconds', cpu.system / 1e6),
    line('process_cpu_seconds_total', 'counter', 'Total user and system CPU time spent in seconds', (cpu.user + cpu.system) / 1e6),
    line('process_start_time_seconds', 'gauge', 'Start time of the process since unix epoch in seconds', startSeconds),
    line('process_resident_memory_bytes', 'gauge', 'Resident memory size in bytes', mem.rss),
    line('nodejs_heap_size_total_bytes', 'gauge', 'Process heap size from Node.js in bytes', mem.heapTotal),
    line('nodejs_heap_size_used_bytes', 'gauge', 'Process heap size used from Node.js in bytes', mem.heapUsed),
    line('nodejs_external_memory_bytes', 'gauge', 'Node.js external memory size in bytes', mem.external),
  ];
  if (fds !== undefined) parts.push(line('process_open_fds', 'gauge', 'Number of open file descriptors', fds));
  const max = maxFds();
  if (max !== undefined) parts.push(line('process_max_fds', 'gauge', 'Maximum number of open file descriptors', max));
  return parts.join('\n');
}

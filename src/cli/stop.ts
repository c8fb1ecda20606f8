// What a long-running command (daemon, dev) does once it has stopped what it started.

/**
 * End the process shortly after the command returns (its exit code set by then), even if a library still holds a
 * timer or a socket: the stop already waited for what was worth waiting for, each part with its own bound. Seen: an
 * OTLP exporter retrying a collector that is down kept a stopped daemon alive for about 40 s after its 5 s bound; an
 * abandoned step of the sandbox payer can poll a stopped chain. A service manager (systemd, a container runtime)
 * expects the process to end once it said it stopped, not to be killed after its own timeout.
 */
export function exitOnceStopped(graceMs = 200): void {
  setTimeout(() => process.exit(), graceMs).unref();
}

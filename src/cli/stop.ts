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

/**
 * A fault nothing caught (an exception thrown in a callback, a rejected promise nobody awaited) still ends the
 * process, as Node's default does, with exit code 1: state is unknown after it, and a supervisor restarts the daemon
 * into a known one. But first it is named in the log, as a JSON line like every other (`daemon crashed`, with the
 * error's name, message and stack, URLs redacted), where Node alone writes a bare stack to stderr that a log pipeline
 * keeping JSON lines drops. Installed by the long-running commands only.
 */
export function logFatalFaults(log: { error(msg: string, f?: Record<string, unknown>): void }): void {
  const fatal = (origin: string) => (err: unknown) => {
    const e = err instanceof Error ? err : new Error(process.getBuiltinModule('node:util').inspect(err, { depth: 2 }));
    try {
      log.error('daemon crashed', { origin, error: e.name, message: e.message, stack: e.stack });
    } finally {
      process.exit(1);
    }
  };
  process.on('uncaughtException', fatal('uncaught exception'));
  process.on('unhandledRejection', fatal('unhandled rejection'));
}

// Issue #21: the fleet in containers, run the way deploy/README.md tells an operator. deploy/images.sh builds the
// images (the Debian base by mmdebstrap when it is missing, node-svc from the single binary, PostgreSQL 15 from
// Debian's package; unchanged layers come from podman's cache), podman-compose brings compose.yaml up (PostgreSQL and
// two daemons on one database) with a .env written here, and then: the CLI inside daemon A's container adds a node,
// issues its token and trusts an issuer; a webhook subscribed through daemon A's API receives an event, signed, at a
// receiver in this process (on the host, listening on the container network's gateway, which the containers call
// host.containers.internal); every container's own health check passes; with daemon A stopped, daemon B still serves
// /v1 and delivers. Whatever the run made is removed afterwards, failed or not (containers, volumes, network); the
// images stay, by name, for the next run. Skipped only outside CI on a machine without podman (.ci/run installs it).
import { execFile, spawnSync } from 'node:child_process';
import { copyFile, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { randomBytes } from 'node:crypto';
import { afterAll, beforeAll, beforeEach, describe, expect, it, vi } from 'vitest';
import { ensureBinary } from '../helpers/binary.js';
import { REPO_ROOT } from '../helpers/cli.js';
import { freePort, http, type HttpResult } from '../helpers/daemon.js';
import { ISSUER, issuerKeyPair, nowSeconds, publicJwks, signCompact, type KeyPair } from '../helpers/issuer.js';
import { ack, startReceiver, verifyServiceSignature, verifyStandardSignature, type Receiver } from '../helpers/receiver.js';
import { sleep, waitFor } from '../helpers/wait.js';

// The first run on a machine makes the base image (mmdebstrap, ~50 s) and installs PostgreSQL in its image (~50 s).
vi.setConfig({ testTimeout: 120_000, hookTimeout: 480_000 });

const hasPodman = spawnSync('podman', ['--version'], { stdio: 'ignore' }).status === 0;
if (!process.env.CI && !hasPodman) console.warn('[container] SKIPPED: podman is not installed (apt-get install podman podman-compose mmdebstrap; .ci/run does)');

interface Ran {
  code: number;
  stdout: string;
  stderr: string;
}

/** `cmd ...args`, never rejecting for an exit code; killed after `timeoutMs`. */
function run(cmd: string, args: string[], o: { input?: string; timeoutMs?: number; cwd?: string; env?: NodeJS.ProcessEnv } = {}): Promise<Ran> {
  return new Promise((resolve, reject) => {
    const child = execFile(cmd, args, { cwd: o.cwd ?? REPO_ROOT, env: o.env ?? process.env, timeout: o.timeoutMs ?? 60_000, maxBuffer: 64 * 1024 * 1024, encoding: 'utf8' },
      (err, stdout, stderr) => {
        if (err && typeof (err as { code?: unknown }).code !== 'number' && !(err as { killed?: boolean }).killed) return reject(new Error(`${cmd} ${args.join(' ')}: ${err.message}\n${stderr}`));
        resolve({ code: err ? ((err as { code?: number }).code ?? -1) : 0, stdout, stderr: (err as { killed?: boolean } | null)?.killed ? `${stderr}\n(killed after ${o.timeoutMs ?? 60_000} ms)` : stderr });
      });
    child.stdin?.end(o.input ?? '');
  });
}

/** The last `n` lines of some output, for an error message. */
const tail = (s: string, n = 40) => s.trimEnd().split('\n').slice(-n).join('\n');

/** podman prints its own complaints about the missing systemd (health check timers) on every run with a health check. */
const quiet = (s: string) => s.split('\n').filter((l) => !l.includes('systemd connection')).join('\n');

describe.skipIf(!process.env.CI && !hasPodman)('the fleet in containers: PostgreSQL and two daemons (compose.yaml)', () => {
  const project = `nsvctest${randomBytes(4).toString('hex')}`;
  const container = (service: string) => `${project}_${service}_1`;
  const A = container('node-svc-a');
  const B = container('node-svc-b');
  const PG = container('postgres');
  let dir = '';
  let composeFile = '';
  let env: NodeJS.ProcessEnv;
  let urlA = '';
  let urlB = '';
  let receiver: Receiver | undefined;
  let hookUrl = '';
  let issuer: KeyPair;
  let token = '';
  let secret = '';
  let up = false;

  const compose = (args: string[], timeoutMs = 180_000) => run('podman-compose', ['-p', project, '-f', composeFile, ...args], { cwd: dir, env, timeoutMs });
  /** `node-svc ...args` inside a container, as an operator runs it (`podman exec`); stdin from `input`. */
  const cli = (ctr: string, args: string[], input?: string) => run('podman', ['exec', ...(input === undefined ? [] : ['-i']), ctr, 'node-svc', ...args], { ...(input === undefined ? {} : { input }) });
  const ok = async (p: Promise<Ran>, what: string) => {
    const r = await p;
    if (r.code !== 0) throw new Error(`${what} → exit ${r.code}\n${tail(quiet(r.stderr))}\n${tail(r.stdout)}`);
    return r.stdout;
  };

  /** Every container's state and last log lines: what a failure needs to be understood. */
  async function fleetLogs(): Promise<string> {
    const out: string[] = [(await run('podman', ['ps', '-a', '--filter', `label=io.podman.compose.project=${project}`, '--format', '{{.Names}} {{.Status}}'])).stdout];
    for (const c of [PG, A, B]) {
      const r = await run('podman', ['logs', '--tail', '25', c]);
      out.push(`--- ${c}\n${tail(quiet(r.stdout + r.stderr), 25)}`);
    }
    return out.join('\n');
  }

  /** A control fact from the trusted issuer (DESIGN §7): `budget.halted`, one event. */
  const control = () =>
    signCompact(
      { alg: issuer.alg, typ: 'control+jwt', kid: issuer.kid },
      { iss: ISSUER, aud: 'node-a', jti: `ctl-${randomBytes(6).toString('hex')}`, iat: nowSeconds(), kind: 'budget.halted', budget: `b-${randomBytes(4).toString('hex')}`, reason: 'anomaly' },
      issuer.privateKey,
    );
  /**
   * A request, again after Retry-After while the daemon answers 503 (its contract when it cannot reach the database):
   * a container stopping makes bookworm's aardvark-dns reopen its sockets, and a new connection's lookup of `postgres`
   * made just then is lost (deploy/README.md).
   */
  async function untilServed(send: () => Promise<HttpResult>): Promise<HttpResult> {
    const end = Date.now() + 30_000;
    for (;;) {
      const r = await send();
      if (r.status !== 503 || Date.now() > end) return r;
      console.warn(`[container] 503 ${r.text.slice(0, 200)}; again after Retry-After`);
      await sleep(Number(r.headers.get('retry-after') ?? 1) * 1000);
    }
  }
  async function emit(base: string): Promise<string> {
    const message = control(); // the same message when sent again: a control fact applies once
    const r = await untilServed(() => http(base, '/v1/control', { token, body: { message } }));
    expect(r.status, r.text).toBe(200);
    expect(r.body.eventId).toMatch(/^evt_/);
    return r.body.eventId as string;
  }
  /** The delivery of `eventId` at the receiver, its signatures checked with the subscription's secret. */
  async function delivered(eventId: string) {
    try {
      await receiver!.waitFor((reqs) => reqs.some((q) => q.eventId === eventId && q.answered === 204), 45_000, `delivery of ${eventId}`);
    } catch (err) {
      throw new Error(`${(err as Error).message}\n${await fleetLogs()}`);
    }
    const req = receiver!.forEvent(eventId)[0]!;
    expect(req.path).toBe('/hook');
    expect(verifyServiceSignature(secret, req.body, req.headers['x-service-signature'])).toBe(true);
    expect(verifyStandardSignature(secret, req)).toBe(true);
    const envelope = JSON.parse(req.body.toString('utf8'));
    expect(envelope).toMatchObject({ id: eventId, type: 'budget.halted' });
    return req;
  }

  beforeEach(({ onTestFailed }) => {
    onTestFailed(async () => {
      if (up) console.error(`[container] ${await fleetLogs()}`);
    });
  });

  beforeAll(async () => {
    const t0 = Date.now();
    issuer = await issuerKeyPair();
    env = {};
    // Nothing of the host's node-svc or compose settings: the .env written below says everything.
    for (const [k, v] of Object.entries(process.env)) if (!/^(NODE_SVC_|POSTGRES_|COMPOSE_|BASE_IMAGE)/.test(k)) env[k] = v;

    await ensureBinary();
    const tBinary = Date.now();
    await ok(run(join(REPO_ROOT, 'deploy', 'images.sh'), [], { env, timeoutMs: 420_000 }), 'deploy/images.sh');
    const tImages = Date.now();

    // compose.yaml as committed, beside a .env of this run's own (podman-compose reads the .env next to the file).
    dir = await mkdtemp(join(tmpdir(), 'node-svc-compose-'));
    composeFile = join(dir, 'compose.yaml');
    await copyFile(join(REPO_ROOT, 'compose.yaml'), composeFile);
    const [portA, portB] = [await freePort(), await freePort()];
    await writeFile(join(dir, '.env'), [
      `POSTGRES_PASSWORD=${randomBytes(18).toString('hex')}`, 'POSTGRES_USER=node_svc', 'POSTGRES_DB=node_svc',
      'NODE_SVC_BIND=127.0.0.1', `NODE_SVC_A_PORT=${portA}`, `NODE_SVC_B_PORT=${portB}`,
      'NODE_SVC_LOG_LEVEL=info', 'NODE_SVC_RETENTION=30d', 'NODE_SVC_RATE_LIMIT=1000', 'NODE_SVC_DELIVERY_TIMEOUT=5',
      'NODE_SVC_WEBHOOK_ALLOW=', 'NODE_SVC_WEBHOOK_DENY=',
      'NODE_SVC_IMAGE=localhost/node-svc:latest', 'POSTGRES_IMAGE=localhost/node-svc-postgres:15', '',
    ].join('\n'), { mode: 0o600 });
    urlA = `http://127.0.0.1:${portA}`;
    urlB = `http://127.0.0.1:${portB}`;

    up = true; // from here on, afterAll has something to take down
    await ok(compose(['up', '-d']), 'podman-compose up -d');
    // The daemons' entrypoint waits for PostgreSQL to accept connections (podman-compose 1.0 does not wait for healthy).
    const healthy = async (url: string) => {
      try {
        return (await fetch(`${url}/healthz`, { signal: AbortSignal.timeout(2000) })).status === 200;
      } catch {
        return false;
      }
    };
    try {
      await waitFor(async () => (await healthy(urlA)) && (await healthy(urlB)), 'both daemons answering /healthz 200', 90_000, 500);
    } catch (err) {
      throw new Error(`${(err as Error).message}\n${await fleetLogs()}`);
    }
    const tUp = Date.now();

    // The receiver listens on the gateway of the compose network: the address the containers reach the host by.
    const gateway = (await ok(run('podman', ['network', 'inspect', `${project}_default`, '--format', '{{range .Subnets}}{{.Gateway}}{{end}}']), 'podman network inspect')).trim();
    expect(gateway).toMatch(/^\d+\.\d+\.\d+\.\d+$/);
    receiver = await startReceiver(ack(204), { host: gateway });
    hookUrl = `http://host.containers.internal:${receiver.port}/hook`;
    console.log(`[container] binary ${((tBinary - t0) / 1000).toFixed(1)} s, images ${((tImages - tBinary) / 1000).toFixed(1)} s, ` +
      `fleet up ${((tUp - tImages) / 1000).toFixed(1)} s; receiver on ${receiver.url}`);
  });

  afterAll(async () => {
    await receiver?.close();
    if (up) {
      const down = await compose(['down', '-v'], 120_000).catch((err: Error) => ({ code: -1, stdout: '', stderr: err.message }));
      if (down.code !== 0) console.error(`[container] podman-compose down -v → ${down.code}\n${tail(quiet(down.stderr))}`);
      // podman-compose 1.0 leaves the network behind, and any container it failed to stop: whatever carries the
      // project's label goes too.
      const label = `label=io.podman.compose.project=${project}`;
      const ids = (await run('podman', ['ps', '-aq', '--filter', label])).stdout.split('\n').filter(Boolean);
      if (ids.length) await run('podman', ['rm', '-f', '-v', ...ids]);
      const vols = (await run('podman', ['volume', 'ls', '-q', '--filter', label])).stdout.split('\n').filter(Boolean);
      if (vols.length) await run('podman', ['volume', 'rm', '-f', ...vols]);
      await run('podman', ['network', 'rm', '-f', `${project}_default`]);
    }
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it('the CLI inside a container adds a node, issues its token and trusts an issuer, on the shared database', async () => {
    expect(JSON.parse(await ok(cli(A, ['nodes', 'add', 'node-a']), 'nodes add'))).toMatchObject({ id: 'node-a' });
    token = (JSON.parse(await ok(cli(A, ['tokens', 'issue', 'node-a']), 'tokens issue')) as { token: string }).token;
    expect(token).toMatch(/^nsv_/);
    // The JWKS through stdin: no file to copy into the container.
    await ok(cli(A, ['keys', 'add', '--issuer', ISSUER, '/dev/stdin'], JSON.stringify(publicJwks(issuer))), 'keys add');
    // Daemon B's container sees the same store.
    const nodes = JSON.parse(await ok(cli(B, ['nodes', 'list']), 'nodes list in B')) as { data: Array<{ id: string }> };
    expect(nodes.data.map((n) => n.id)).toEqual(['node-a']);
    for (const url of [urlA, urlB]) {
      const r = await http(url, '/v1/node', { token });
      expect(r.status, r.text).toBe(200);
      expect(r.body.node).toBe('node-a');
    }
  });

  it('a webhook subscribed through daemon A receives an event, signed, at a receiver on the host', async () => {
    const sub = await http(urlA, '/v1/webhooks', { token, body: { url: hookUrl } });
    expect(sub.status, sub.text).toBe(201);
    secret = sub.body.secret as string;
    expect(secret).toMatch(/^whsec_/);
    const listed = await http(urlB, '/v1/webhooks', { token });
    expect(listed.body.data.map((s: { id: string }) => s.id)).toEqual([sub.body.id]);
    await delivered(await emit(urlA));
  });

  it("each container's own health check passes (the images' HEALTHCHECK, compose's healthcheck); no daemon restarted", async () => {
    // Without systemd podman runs no health check timers; `podman healthcheck run` runs the check once, as they would.
    for (const c of [PG, A, B]) {
      const r = await run('podman', ['healthcheck', 'run', c]);
      expect(r.code, `${c}: ${r.stdout}${quiet(r.stderr)}`).toBe(0);
      expect((await run('podman', ['inspect', '--format', '{{.State.Health.Status}}', c])).stdout.trim()).toBe('healthy');
    }
    // The daemons waited for the database (the image's entrypoint) instead of exiting and being restarted.
    for (const c of [A, B]) expect((await run('podman', ['inspect', '--format', '{{.RestartCount}}', c])).stdout.trim(), c).toBe('0');
  });

  it('with daemon A stopped, daemon B serves /v1 and delivers', async () => {
    await ok(run('podman', ['stop', '--time', '20', A], { timeoutMs: 60_000 }), 'podman stop A');
    expect((await run('podman', ['inspect', '--format', '{{.State.Status}}', A])).stdout.trim()).toBe('exited');
    await expect(fetch(`${urlA}/healthz`, { signal: AbortSignal.timeout(2000) })).rejects.toThrow();
    const node = await untilServed(() => http(urlB, '/v1/node', { token }));
    expect(node.status, node.text).toBe(200);
    const eventId = await emit(urlB);
    await delivered(eventId);
    // B lists the events both daemons recorded (once every write before them has ended).
    await waitFor(async () => {
      const r = await http(urlB, '/v1/events?limit=100', { token });
      const ids = (r.body.data ?? []).map((e: { id: string }) => e.id);
      return ids.length === 2 && ids.includes(eventId) && ids;
    }, 'both events listed by daemon B', 15_000, 200);
  });
});

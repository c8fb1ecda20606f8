// The escrow rail end to end (DESIGN §5–6): the real daemon (bin/node-svc daemon --mode escrow) against a real
// local chain (ganache via startSandboxChain), a real webhook receiver, credentials with cnf.addr, EIP-712 vouchers,
// settlement → checkpointed → final, a SIGKILL mid-settlement, and the refusals to start on a doubtful config.
import { inspectStore, readRows, type Inspector } from '../helpers/inspect.js';
import { join } from 'node:path';
import { keccak256, toHex, type Hex } from 'viem';
import { generatePrivateKey } from 'viem/accounts';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { startSandboxChain, type SandboxChain } from '../../src/rails/escrow/sandbox.js';
import { cliFor, tempDataDir, type TempDataDir } from '../helpers/cli.js';
import { clientOf, http, setupNodes, type RunningDaemon } from '../helpers/daemon.js';
import { channelOf, escrowFlags, eventually, highS, startEscrowDaemon, withV, writeKeyFile } from '../helpers/escrow.js';
import { issuerKeyPair, mintCredential, type KeyPair } from '../helpers/issuer.js';
import { metricValue } from '../helpers/prometheus.js';
import { startReceiver, verifyServiceSignature, type ReceivedRequest, type Receiver } from '../helpers/receiver.js';

vi.setConfig({ testTimeout: 60_000, hookTimeout: 60_000 });

let chain: SandboxChain;
let issuer: KeyPair;
let seq = 0;
const uid = (p: string) => `${p}-${++seq}-${Math.random().toString(36).slice(2, 8)}`;
type Client = ReturnType<typeof clientOf>;

beforeAll(async () => {
  [chain, issuer] = await Promise.all([startSandboxChain(), issuerKeyPair()]);
});
afterAll(async () => {
  await chain?.stop();
});

/** The operator key in every spelling it could leak in. */
const keyLeaks = (text: string) => {
  const hex = chain.operator.key.slice(2).toLowerCase();
  return text.toLowerCase().includes(hex);
};

interface Stream {
  id: string;
  channel: Hex;
  credential: string;
  sign(amount: bigint, key?: Hex): Promise<Hex>;
}

/** A channel from the sandbox payer to the operator and a credential for it (cnf.addr = payer). */
async function escrowStream(deposit = 5_000_000n, cap = '5000000'): Promise<Stream> {
  const id = uid('stream');
  const channel = await chain.openChannel({ id, payee: chain.operator.address, deposit });
  const credential = mintCredential({
    key: issuer,
    claims: { stream: id, budget: uid('budget'), cap, asset: 'USDC', mode: 'escrow', cnf: { addr: chain.payer.address }, chainId: chain.chainId, escrow: chain.escrow, channel },
  });
  const terms = { chainId: chain.chainId, escrow: chain.escrow, channel };
  return { id, channel, credential, sign: (amount, key) => chain.signVoucher(terms, amount, key) };
}

const postVoucher = (c: Client, s: Stream, amount: bigint, units: bigint, signature: Hex) =>
  c.post(`/v1/streams/${s.id}/vouchers`, { voucher: { stream: s.id, amount: amount.toString(), units: units.toString(), signature } });

const finalityOf = async (c: Client, s: Stream) => {
  const r = await c.get(`/v1/streams/${s.id}/finality`);
  expect(r.status, r.text).toBe(200);
  return r.body as {
    finality: 'none' | 'checkpointed' | 'final'; finalMicro: string; checkpointedMicro: string; unsettledMicro: string; asset: string;
    frontier: { amountMicro: string; finality: string; reference: string | null; checkpointedAt: string | null; finalAt: string | null };
    billedTruth: { amountMicro: string; units: string; voucher: string | null };
  };
};

/** Settlement events for a stream, as the receiver got them (parsed envelopes, in arrival order). */
const settlementEvents = (r: Receiver, stream: string) =>
  r.requests
    .map((q) => ({ q, body: JSON.parse(q.body.toString('utf8')) as { id: string; type: string; data: { stream: string; amountMicro: string; asset: string; reference: string } } }))
    .filter(({ body }) => body.type.startsWith('settlement.') && body.data.stream === stream);

const liveRows = (db: Inspector, stream: string) =>
  db.prepare("SELECT amount_micro AS amount, status, reference FROM settlements WHERE stream = ? AND status != 'failed' ORDER BY amount_micro").all(stream) as Array<{ amount: number; status: string; reference: string | null }>;

describe('escrow rail against the real daemon', () => {
  let t: TempDataDir;
  let daemon: RunningDaemon;
  let A: Client;
  let receiver: Receiver;
  let secret: string;
  let db: Inspector;

  beforeAll(async () => {
    t = await tempDataDir('node-svc-escrow-');
    const { tokenA } = await setupNodes(t.dataDir, issuer);
    const keyFile = await writeKeyFile(t.root, chain.operator.key);
    daemon = await startEscrowDaemon(t.dataDir, escrowFlags(chain, keyFile, { '--settle-threshold': '1', '--confirmations': '2' }));
    A = clientOf(daemon.url, tokenA);
    receiver = await startReceiver();
    const sub = await A.post('/v1/webhooks', { url: `${receiver.url}/hook` });
    expect(sub.status, sub.text).toBe(201);
    secret = sub.body.secret;
    db = inspectStore(t.dataDir, { readonly: true });
  });

  afterAll(async () => {
    db?.close();
    await daemon?.stop('SIGKILL');
    await receiver?.close();
    await t?.cleanup();
  });

  it('credential → vouchers (refusals, stale, over cap) → settle → checkpointed → final, matching the chain; a second voucher raises the frontier', async () => {
    const s = await escrowStream();
    const payee0 = await chain.balanceOf(chain.operator.address);
    // /metrics: USDC billed, checkpointed and final of the whole store, as moved by this stream from here on.
    const money = async () => {
      const text = (await http(daemon.url, '/metrics')).text;
      return (['billed', 'checkpointed', 'final'] as const).map((stage) => BigInt(metricValue(text, `node_svc_${stage}_micro`, { asset: 'USDC' }) ?? '0'));
    };
    const before = await money();
    const moved = async () => (await money()).map((v, k) => v - before[k]!);

    const v = await A.post('/v1/allowances/verify', { credential: s.credential });
    expect(v.status, v.text).toBe(200);
    expect(v.body).toMatchObject({ valid: true, stream: s.id, mode: 'escrow', escrow: { chainId: 1337, contract: chain.escrow.toLowerCase(), channel: s.channel.toLowerCase(), payerAddress: chain.payer.address.toLowerCase() } });
    expect((await finalityOf(A, s)).finality).toBe('none');

    // Refused before anything is billed: not the payer's key, another channel's voucher, non-canonical signatures.
    const badSignatures: Array<[string, Hex]> = [
      ['signed by the payee', await s.sign(1_000n, chain.operator.key)],
      ['signed by a stranger', await s.sign(1_000n, generatePrivateKey())],
      ['for another channel', await chain.signVoucher({ chainId: chain.chainId, escrow: chain.escrow, channel: keccak256(toHex('elsewhere')) }, 1_000n)],
      ['for another chain', await chain.signVoucher({ chainId: 1, escrow: chain.escrow, channel: s.channel }, 1_000n)],
      ['high-s', highS(await s.sign(1_000n))],
      ['v = 0/1', withV(await s.sign(1_000n), parseInt((await s.sign(1_000n)).slice(130), 16) - 27)],
    ];
    for (const [what, sig] of badSignatures) {
      const r = await postVoucher(A, s, 1_000n, 40n, sig);
      expect(r.status, `${what}: ${r.text}`).toBe(422);
      expect(r.body, what).toMatchObject({ code: 'voucher_refused', refusal: 'bad_signature' });
    }
    const badAmount = await postVoucher(A, s, 1_001n, 40n, await s.sign(1_000n)); // signature for another amount
    expect(badAmount.body.refusal).toBe('bad_signature');
    expect((await finalityOf(A, s)).billedTruth.amountMicro).toBe('0');

    // Sample the view while settling: the frontier never goes down, final never exceeds it.
    const seen: Array<{ frontier: bigint; final: bigint; finality: string }> = [];
    let sampling = true;
    const sampler = (async () => {
      while (sampling) {
        const f = await finalityOf(A, s);
        seen.push({ frontier: BigInt(f.frontier.amountMicro), final: BigInt(f.finalMicro), finality: f.finality });
        await new Promise((r) => setTimeout(r, 50));
      }
    })();

    const ok = await postVoucher(A, s, 1_000n, 40n, await s.sign(1_000n));
    expect(ok.status, ok.text).toBe(200);
    expect(ok.body).toMatchObject({ accepted: true, billedMicro: '1000', billedUnits: '40' });
    const again = await postVoucher(A, s, 1_000n, 40n, await s.sign(1_000n));
    expect(again.body).toMatchObject({ accepted: false, reason: 'stale', billedMicro: '1000' });
    const lower = await postVoucher(A, s, 500n, 20n, await s.sign(500n));
    expect(lower.body).toMatchObject({ accepted: false, reason: 'stale', billedMicro: '1000' });
    const over = await postVoucher(A, s, 5_000_001n, 50n, await s.sign(5_000_001n));
    expect(over.status, over.text).toBe(422);
    expect(over.body).toMatchObject({ code: 'voucher_refused', refusal: 'over_cap' });

    // Settled by threshold (1 micro): mined at once, one confirmation → checkpointed with the tx hash as reference.
    const cp = await eventually(async () => { const f = await finalityOf(A, s); return f.finality === 'checkpointed' && f; }, 'checkpointed at 1000');
    expect(cp.frontier).toMatchObject({ amountMicro: '1000', finality: 'checkpointed', finalAt: null });
    expect(cp.frontier.reference).toMatch(/^0x[0-9a-f]{64}$/);
    expect(cp).toMatchObject({ finalMicro: '0', checkpointedMicro: '1000', unsettledMicro: '0', asset: 'USDC' });
    const receipt = await chain.client.getTransactionReceipt({ hash: cp.frontier.reference as Hex });
    expect(receipt.status).toBe('success');
    expect(receipt.to?.toLowerCase()).toBe(chain.escrow.toLowerCase());
    expect(receipt.from.toLowerCase()).toBe(chain.operator.address.toLowerCase());
    expect(await chain.balanceOf(chain.operator.address)).toBe(payee0 + 1_000n); // paid on chain, but not final yet
    expect(await moved()).toEqual([1_000n, 1_000n, 0n]); // billed, checkpointed, final

    await chain.mine(3);
    const fin = await eventually(async () => { const f = await finalityOf(A, s); return f.finality === 'final' && f; }, 'final at 1000');
    expect(fin.frontier).toMatchObject({ amountMicro: '1000', finality: 'final', reference: cp.frontier.reference });
    expect(fin.frontier.finalAt).not.toBeNull();
    expect(BigInt(fin.finalMicro)).toBe((await chain.balanceOf(chain.operator.address)) - payee0);
    expect((await channelOf(chain, s.channel)).settled).toBe(1_000n);

    // A second voucher raises the frontier again, with a new transaction.
    expect((await postVoucher(A, s, 2_500n, 100n, await s.sign(2_500n))).body).toMatchObject({ accepted: true, billedMicro: '2500' });
    const cp2 = await eventually(async () => { const f = await finalityOf(A, s); return f.frontier.amountMicro === '2500' && f.finality === 'checkpointed' && f; }, 'checkpointed at 2500');
    expect(cp2.frontier.reference).not.toBe(cp.frontier.reference);
    expect(cp2.finalMicro).toBe('1000'); // the credit-safe amount is still the old final
    expect(await moved()).toEqual([2_500n, 2_500n, 1_000n]);
    await chain.mine(3);
    const fin2 = await eventually(async () => { const f = await finalityOf(A, s); return f.finality === 'final' && f.finalMicro === '2500' && f; }, 'final at 2500');
    expect(fin2.frontier.reference).toBe(cp2.frontier.reference);
    expect(BigInt(fin2.finalMicro)).toBe((await chain.balanceOf(chain.operator.address)) - payee0);
    expect((await channelOf(chain, s.channel)).settled).toBe(2_500n);
    expect(await moved()).toEqual([2_500n, 2_500n, 2_500n]);

    sampling = false;
    await sampler;
    expect(seen.length).toBeGreaterThan(5);
    for (let i = 1; i < seen.length; i++) {
      expect(seen[i]!.frontier, `sample ${i}`).toBeGreaterThanOrEqual(seen[i - 1]!.frontier);
      expect(seen[i]!.final, `sample ${i}`).toBeGreaterThanOrEqual(seen[i - 1]!.final);
      expect(seen[i]!.final).toBeLessThanOrEqual(seen[i]!.frontier);
    }
    expect(seen.some((x) => x.finality === 'checkpointed')).toBe(true);

    // Never the same amount twice, never lower: one live settlement per amount, both final.
    expect(liveRows(db, s.id)).toEqual([
      { amount: 1000, status: 'final', reference: cp.frontier.reference },
      { amount: 2500, status: 'final', reference: cp2.frontier.reference },
    ]);

    // The receiver: checkpointed then final for each amount, monotone cumulative amounts, asset and reference.
    await receiver.waitFor(() => settlementEvents(receiver, s.id).filter((e) => e.body.type === 'settlement.final').length >= 2, 20_000, 'two settlement.final');
    const events = settlementEvents(receiver, s.id);
    for (const { q } of events) expect(verifyServiceSignature(secret, q.body, q.headers['x-service-signature'])).toBe(true);
    const firsts = events.filter(({ q }) => q.seen === 0).map(({ body }) => body);
    expect(firsts.map((b) => [b.type, b.data.amountMicro, b.data.reference, b.data.asset])).toEqual([
      ['settlement.checkpointed', '1000', cp.frontier.reference, 'USDC'],
      ['settlement.final', '1000', cp.frontier.reference, 'USDC'],
      ['settlement.checkpointed', '2500', cp2.frontier.reference, 'USDC'],
      ['settlement.final', '2500', cp2.frontier.reference, 'USDC'],
    ]);
  });

  it('many small vouchers on one stream: each settles above the last, and the chain paid exactly the billed truth', async () => {
    const s = await escrowStream();
    const payee0 = await chain.balanceOf(chain.operator.address);
    expect((await A.post('/v1/allowances/verify', { credential: s.credential })).status).toBe(200);
    let amount = 0n;
    for (let i = 1; i <= 6; i++) {
      amount += 100n * BigInt(i);
      expect((await postVoucher(A, s, amount, BigInt(i), await s.sign(amount))).body.accepted).toBe(true);
      await new Promise((r) => setTimeout(r, 300 + 97 * i)); // some land while a settlement is in flight
    }
    await eventually(async () => {
      await chain.mine(1);
      const f = await finalityOf(A, s);
      return f.finality === 'final' && BigInt(f.finalMicro) === amount && f;
    }, `final at ${amount}`, 30_000, 300);
    expect((await chain.balanceOf(chain.operator.address)) - payee0).toBe(amount);
    expect((await channelOf(chain, s.channel)).settled).toBe(amount);
    const rows = liveRows(db, s.id);
    const amounts = rows.map((r) => r.amount);
    expect(new Set(amounts).size).toBe(amounts.length);
    expect(amounts).toEqual([...amounts].sort((a, b) => a - b));
    expect(amounts.at(-1)).toBe(Number(amount));
    expect(rows.every((r) => r.status === 'final')).toBe(true);
  });

  it('the wallet key never appears in the daemon output', () => {
    expect(daemon.stdout).toMatch(/listening on/);
    expect(keyLeaks(daemon.stdout)).toBe(false);
    expect(keyLeaks(daemon.stderr)).toBe(false);
  });
});

describe('a daemon killed mid-settlement', () => {
  let t: TempDataDir;
  let daemon: RunningDaemon | undefined;
  let token: string;
  let flags: string[];
  let receiver: Receiver;
  const outputs: string[] = [];

  beforeAll(async () => {
    t = await tempDataDir('node-svc-escrow-crash-');
    ({ tokenA: token } = await setupNodes(t.dataDir, issuer));
    flags = escrowFlags(chain, await writeKeyFile(t.root, chain.operator.key), { '--settle-threshold': '1', '--confirmations': '2' });
    receiver = await startReceiver();
  });
  afterAll(async () => {
    await daemon?.stop('SIGKILL');
    await receiver?.close();
    await t?.cleanup();
  });

  const start = async () => {
    // Each restart waits for the killed daemon's settlement lease to run out: 3 s here instead of 10 s.
    daemon = await startEscrowDaemon(t.dataDir, flags, { env: { NODE_SVC_SETTLER_LEASE_MS: '3000' } });
    return clientOf(daemon.url, token);
  };
  const kill = async () => {
    const d = daemon!;
    await d.stop('SIGKILL');
    outputs.push(d.stdout, d.stderr);
    daemon = undefined;
  };
  /**
   * Poll the daemon's database (a fresh read-only connection each time) until `pred` holds for the stream's rows.
   * Never blocking this process: the sandbox chain answers the daemon's RPC calls from here (readRows).
   */
  const waitRows = async (stream: string, pred: (rows: Array<{ amount: number; status: string }>) => boolean, what: string) => {
    const end = Date.now() + 15_000;
    for (;;) {
      const rows = await readRows<{ amount: number | string; status: string }>(t.dataDir, 'SELECT amount_micro AS amount, status FROM settlements WHERE stream = ?', [stream]);
      const shaped = rows.map((r) => ({ amount: Number(r.amount), status: r.status }));
      if (pred(shaped)) return shaped;
      if (Date.now() > end) throw new Error(`${what}: not reached (rows: ${JSON.stringify(shaped)})`);
      await new Promise((r) => setTimeout(r, 2));
    }
  };

  it('neither pays twice nor loses the settlement, at three crash points', async () => {
    let A = await start();
    const sub = await A.post('/v1/webhooks', { url: `${receiver.url}/hook` });
    expect(sub.status, sub.text).toBe(201);
    const s = await escrowStream();
    const payee0 = await chain.balanceOf(chain.operator.address);
    expect((await A.post('/v1/allowances/verify', { credential: s.credential })).status).toBe(200);

    const settleThroughCrash = async (amount: bigint, crashPoint: 'after the voucher' | 'settlement recorded' | 'transaction sent') => {
      expect((await postVoucher(A, s, amount, amount / 10n, await s.sign(amount))).body, crashPoint).toMatchObject({ accepted: true });
      if (crashPoint === 'settlement recorded') await waitRows(s.id, (rows) => rows.some((r) => BigInt(r.amount) === amount), crashPoint);
      if (crashPoint === 'transaction sent') await waitRows(s.id, (rows) => rows.some((r) => BigInt(r.amount) === amount && r.status !== 'pending'), crashPoint);
      await kill();
      A = await start(); // same data dir
      await eventually(async () => { const f = await finalityOf(A, s); return BigInt(f.frontier.amountMicro) === amount && f; }, `${crashPoint}: frontier at ${amount}`);
      await chain.mine(3);
      const fin = await eventually(async () => { const f = await finalityOf(A, s); return f.finality === 'final' && BigInt(f.finalMicro) === amount && f; }, `${crashPoint}: final at ${amount}`);
      const paid = (await chain.balanceOf(chain.operator.address)) - payee0;
      expect(paid, crashPoint).toBe(amount); // paid exactly the billed truth: not twice, not less
      expect(BigInt(fin.finalMicro)).toBe(paid);
      expect((await channelOf(chain, s.channel)).settled, crashPoint).toBe(amount);
    };

    await settleThroughCrash(1_000n, 'after the voucher');
    await settleThroughCrash(3_000n, 'settlement recorded');
    await settleThroughCrash(7_000n, 'transaction sent');

    const db = inspectStore(t.dataDir, { readonly: true });
    try {
      const rows = liveRows(db, s.id);
      const amounts = rows.map((r) => r.amount);
      expect(new Set(amounts).size).toBe(amounts.length); // one non-failed row per amount
      expect(amounts.at(-1)).toBe(7_000);
      expect(rows.at(-1)!.status).toBe('final');
    } finally {
      db.close();
    }

    // The receiver saw each amount reach final, and the cumulative amounts never went down (first deliveries).
    await receiver.waitFor(() => settlementEvents(receiver, s.id).some((e) => e.body.type === 'settlement.final' && e.body.data.amountMicro === '7000'), 20_000, 'final at 7000');
    const finals = settlementEvents(receiver, s.id).filter(({ q, body }) => q.seen === 0 && body.type === 'settlement.final').map(({ body }) => BigInt(body.data.amountMicro));
    expect(finals).toEqual([...finals].sort((a, b) => (a < b ? -1 : a > b ? 1 : 0)));
    expect(finals).toEqual(expect.arrayContaining([1_000n, 3_000n, 7_000n]));
    expect(new Set(finals.map(String)).size).toBe(finals.length);

    outputs.push(daemon!.stdout, daemon!.stderr);
    for (const o of outputs) expect(keyLeaks(o)).toBe(false);
  });
});

describe('escrow config refusals (exit 4, the problem named, the key never echoed)', () => {
  let t: TempDataDir;
  let keyFile: string;
  let cli: ReturnType<typeof cliFor>;

  beforeAll(async () => {
    t = await tempDataDir('node-svc-escrow-config-');
    await setupNodes(t.dataDir, issuer);
    keyFile = await writeKeyFile(t.root, chain.operator.key);
    cli = cliFor(t.dataDir);
  });
  afterAll(async () => {
    await t?.cleanup();
  });

  const refuse = async (over: Record<string, string | undefined>, problem: RegExp, env: Record<string, string> = {}, file = keyFile) => {
    const r = await cli.with(['daemon', '--port', '0', '--host', '127.0.0.1', ...escrowFlags(chain, file, over)], { env, timeoutMs: 20_000 });
    expect(r.code, `${r.stdout}\n${r.stderr}`).toBe(4);
    expect(r.stderr).toMatch(problem);
    expect(r.stdout).not.toMatch(/listening on/);
    expect(keyLeaks(r.stdout) || keyLeaks(r.stderr)).toBe(false);
    return r;
  };

  it('--chain-id 1 against the local chain: the mismatch', async () => {
    await refuse({ '--chain-id': '1' }, /chain id 1337.*not the configured 1\b/);
  });

  it('--rail production on chain 1337', async () => {
    await refuse({ '--rail': 'production' }, /production rail refuses local development chain id 1337/);
  });

  it('a wallet key file with garbage (its content is not echoed)', async () => {
    const garbage = await writeKeyFile(t.root, 'correct horse battery staple 0xdeadbeef', 'garbage.key');
    const r = await refuse({}, /--wallet-key-file .*garbage\.key does not hold a 32-byte hex private key/, {}, garbage);
    expect(r.stderr).not.toMatch(/horse battery/);
    const outOfRange = await writeKeyFile(t.root, `0x${'ff'.repeat(32)}`, 'order.key'); // 32 bytes, but >= the curve order
    const r2 = await refuse({}, /wallet key is not a valid secp256k1 private key/, {}, outOfRange);
    expect(r2.stderr).not.toMatch(/f{64}/i);
    await refuse({}, /--wallet-key-file .*missing\.key cannot be read/, {}, join(t.root, 'missing.key'));
  });

  it('escrow mode with NODE_SVC_CARD_KEY set (the card key is not echoed either)', async () => {
    const r = await refuse({}, /card processor keys are set, but escrow mode takes no card credentials/, { NODE_SVC_CARD_KEY: 'sk_test_escrowmustrefuse123' });
    expect(r.stderr).not.toMatch(/sk_test_escrowmustrefuse123/);
  });

  it('missing --contract, or one with no code on the chain', async () => {
    await refuse({ '--contract': undefined }, /--contract is required in escrow mode/);
    await refuse({ '--contract': '0x000000000000000000000000000000000000dEaD' }, /no contract at 0x000000000000000000000000000000000000dEaD on chain 1337/);
  });

  it('every problem of the flags at once', async () => {
    const r = await refuse({ '--contract': undefined, '--rpc-url': undefined, '--confirmations': 'lots', '--settle-poll': '2m' }, /--rpc-url is required/);
    expect(r.stderr).toMatch(/--contract is required/);
    expect(r.stderr).toMatch(/--confirmations must be an integer/);
    expect(r.stderr).toMatch(/--settle-poll must be a duration from 100ms to 60s/);
  });
});

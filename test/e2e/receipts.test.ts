// Signed settlement receipts end to end (issue #24): the real daemon settles a stream to final on the local chain
// (escrow) and on the local card processor; settlement.final is delivered with a receipt; GET /v1/streams/{id}/receipt
// and `node-svc receipts jwks` give the same receipt and keys; `node-svc receipts verify` (the SDK's verifyReceipt)
// accepts it, and refuses by name a tampered receipt, another daemon's key, the wrong node, and an RPC that disagrees.
import { readFileSync } from 'node:fs';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { Hex } from 'viem';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { startLocalProcessor, type LocalProcessor } from '../../src/rails/card/processor.js';
import { startSandboxChain, type SandboxChain } from '../../src/rails/escrow/sandbox.js';
import { newEd25519KeyPair, signCompactEdDSA } from '../../src/sdk/jws.js';
import { verifyReceipt } from '../../src/sdk/index.js';
import { cardCredential, cardFlags, newWebhookSecret, startCardDaemon, voucher, writeSecretFile } from '../helpers/card.js';
import { cliFor, json, tempDataDir, type TempDataDir } from '../helpers/cli.js';
import { clientOf, setupNodes, type RunningDaemon } from '../helpers/daemon.js';
import { escrowFlags, eventually, startEscrowDaemon, writeKeyFile } from '../helpers/escrow.js';
import { issuerKeyPair, mintCredential, payerKeyPair, type KeyPair } from '../helpers/issuer.js';
import { startReceiver, verifyServiceSignature, type Receiver } from '../helpers/receiver.js';

vi.setConfig({ testTimeout: 60_000, hookTimeout: 60_000 });

type Client = ReturnType<typeof clientOf>;
interface Envelope { id: string; type: string; externalRef: string; data: Record<string, string> }

const b64 = (v: unknown) => Buffer.from(JSON.stringify(v)).toString('base64url');
const partsOf = (jws: string) => {
  const [h, p, s] = jws.split('.') as [string, string, string];
  return { header: JSON.parse(Buffer.from(h, 'base64url').toString()), claims: JSON.parse(Buffer.from(p, 'base64url').toString()), h, p, s };
};

/** The verified settlement.final envelopes the receiver got for a stream. */
function finals(receiver: Receiver, secret: string, stream: string): Envelope[] {
  return receiver.at('/hook')
    .filter((r) => verifyServiceSignature(secret, r.body, r.headers['x-service-signature']))
    .map((r) => JSON.parse(r.body.toString('utf8')) as Envelope)
    .filter((e) => e.type === 'settlement.final' && e.externalRef === `stream:${stream}`);
}

/** A receipt JWKS of our own and a signer for it: receipts the chain can disagree with, on purpose. */
function forger() {
  const { publicKey, privateKey } = newEd25519KeyPair(); // not generateKeyPairSync: its JWK export can hang (src/sdk/jws.ts)
  const jwk = { ...publicKey.export({ format: 'jwk' }), kid: 'forged-1', alg: 'EdDSA', use: 'sig' };
  return { jwks: { keys: [jwk] }, sign: (claims: Record<string, unknown>) => signCompactEdDSA({ alg: 'EdDSA', typ: 'node-svc-receipt+jwt', kid: 'forged-1' }, claims, privateKey) };
}

describe('receipts on the escrow rail (real daemon, local chain)', () => {
  let chain: SandboxChain;
  let issuer: KeyPair;
  let t: TempDataDir;
  let other: TempDataDir;
  let daemon: RunningDaemon;
  let A: Client;
  let receiver: Receiver;
  let secret: string;
  let stream: string;
  let receipt: string;
  let jwksFile: string;
  let cli: ReturnType<typeof cliFor>;
  let token: string;

  beforeAll(async () => {
    [chain, issuer, t, other] = await Promise.all([startSandboxChain(), issuerKeyPair(), tempDataDir('node-svc-receipts-'), tempDataDir('node-svc-receipts-other-')]);
    const { tokenA } = await setupNodes(t.dataDir, issuer);
    token = tokenA;
    const keyFile = await writeKeyFile(t.root, chain.operator.key);
    daemon = await startEscrowDaemon(t.dataDir, escrowFlags(chain, keyFile, { '--settle-threshold': '1', '--confirmations': '2' }));
    A = clientOf(daemon.url, tokenA);
    receiver = await startReceiver();
    const sub = await A.post('/v1/webhooks', { url: `${receiver.url}/hook` });
    expect(sub.status, sub.text).toBe(201);
    secret = sub.body.secret;
    cli = cliFor(t.dataDir);
  });

  afterAll(async () => {
    await daemon?.stop();
    await receiver?.close();
    await chain?.stop();
    await t?.cleanup();
    await other?.cleanup();
  });

  it('a stream settles final → settlement.final carries a receipt; GET receipt and receipts jwks agree; receipts verify --rpc accepts it', async () => {
    stream = `rcpt-${Math.random().toString(36).slice(2, 8)}`;
    const channel = await chain.openChannel({ id: stream, payee: chain.operator.address, deposit: 5_000_000n });
    const credential = mintCredential({
      key: issuer,
      claims: { stream, budget: 'b-rcpt', cap: '5000000', asset: 'USDC', mode: 'escrow', cnf: { addr: chain.payer.address }, chainId: chain.chainId, escrow: chain.escrow, channel },
    });
    expect((await A.post('/v1/allowances/verify', { credential })).status).toBe(200);

    // Nothing final yet: 409 not_final, named (and an unknown stream is 404).
    const early = await A.get(`/v1/streams/${stream}/receipt`);
    expect(early.status, early.text).toBe(409);
    expect(early.body).toMatchObject({ code: 'not_final', status: 409 });
    expect((await A.get('/v1/streams/no-such-stream/receipt')).body).toMatchObject({ code: 'not_found', status: 404 });

    const payee0 = await chain.balanceOf(chain.operator.address);
    const sig = await chain.signVoucher({ chainId: chain.chainId, escrow: chain.escrow, channel }, 1_500_000n);
    const v = await A.post(`/v1/streams/${stream}/vouchers`, { voucher: { stream, amount: '1500000', units: '15', signature: sig } });
    expect(v.status, v.text).toBe(200);
    await eventually(async () => (await A.get(`/v1/streams/${stream}/finality`)).body.finality === 'checkpointed', 'checkpointed');
    await chain.mine(3);
    await eventually(() => finals(receiver, secret, stream).length >= 1, 'settlement.final delivered');
    const [final] = finals(receiver, secret, stream);
    expect(final!.data).toMatchObject({ stream, budget: 'b-rcpt', asset: 'USDC', amountMicro: '1500000', receipt: expect.stringMatching(/^[\w-]+\.[\w-]+\.[\w-]+$/) });
    receipt = final!.data.receipt!;

    // What it says, and that it matches the chain: the mined transaction, its block, the paid amount.
    const { header, claims } = partsOf(receipt);
    const mined = await chain.client.getTransactionReceipt({ hash: final!.data.reference as Hex });
    expect(header).toEqual({ alg: 'EdDSA', typ: 'node-svc-receipt+jwt', kid: expect.any(String) });
    expect(claims).toMatchObject({
      iss: expect.stringMatching(/^urn:node-svc:receipts:/), iat: expect.any(Number), jti: expect.stringMatching(/^stl_/), node: 'node-a', stream, asset: 'USDC', amountMicro: '1500000',
      finalAt: expect.any(String), rail: 'escrow',
      escrow: { chainId: chain.chainId, contract: chain.escrow.toLowerCase(), txHash: mined.transactionHash, blockNumber: Number(mined.blockNumber), channel: channel.toLowerCase() },
    });
    expect(await chain.balanceOf(chain.operator.address)).toBe(payee0 + 1_500_000n);

    const got = await A.get(`/v1/streams/${stream}/receipt`);
    expect(got.status, got.text).toBe(200);
    expect(got.body).toEqual({ stream, amountMicro: '1500000', finalAt: claims.finalAt, kid: header.kid, receipt });
    const bare = await cli('streams', 'receipt', stream, '--url', daemon.url, '--token', token);
    expect(bare.code, bare.stderr).toBe(0);
    expect(bare.stdout).toBe(`${receipt}\n`); // piped: the bare JWS, for JWS=$(node-svc streams receipt …)

    // The JWKS: the same over HTTP (bearer) and from the store (CLI); public members only.
    const httpJwks = await A.get('/v1/receipts/jwks.json');
    expect(httpJwks.status).toBe(200);
    const cliJwks = await cli('receipts', 'jwks');
    expect(cliJwks.code, cliJwks.stderr).toBe(0);
    expect(json(cliJwks.stdout)).toEqual(httpJwks.body);
    expect(httpJwks.body.keys).toEqual([{ kty: 'OKP', crv: 'Ed25519', x: expect.any(String), kid: header.kid, alg: 'EdDSA', use: 'sig' }]);
    expect((await clientOf(daemon.url, 'nsv_not-a-token').get('/v1/receipts/jwks.json')).status).toBe(401);
    jwksFile = join(t.root, 'receipts.jwks.json');
    await writeFile(jwksFile, cliJwks.stdout);

    const ok = await cli('receipts', 'verify', receipt, '--jwks', jwksFile, '--node', 'node-a', '--rpc', chain.rpcUrl);
    expect(ok.code, ok.stderr + ok.stdout).toBe(0);
    expect(json(ok.stdout)).toMatchObject({ valid: true, kid: header.kid, claims, chain: { chainId: chain.chainId, txHash: mined.transactionHash, blockNumber: Number(mined.blockNumber), amountChecked: true } });
    expect(json(ok.stdout).chain.confirmations).toBeGreaterThanOrEqual(2);
    // Without --jwks the CLI reads the keys from the store; the SDK gives the same answer.
    expect(json((await cli('receipts', 'verify', receipt)).stdout)).toMatchObject({ valid: true, chain: null });
    expect(await verifyReceipt(receipt, { jwks: httpJwks.body, node: 'node-a', rpcUrl: chain.rpcUrl })).toEqual(json(ok.stdout));
  });

  it('refused by name: tampered, another daemon\'s key, the wrong node', async () => {
    const { h, p, s, claims } = partsOf(receipt);
    const tampered = `${h}.${b64({ ...claims, amountMicro: '9500000' })}.${s}`;
    const expectRefused = async (args: string[], refusal: string) => {
      const r = await cli('receipts', 'verify', ...args);
      expect(r.code, `${refusal}: ${r.stdout}${r.stderr}`).toBe(1);
      expect(json(r.stdout)).toMatchObject({ valid: false, refusal, detail: expect.any(String) });
    };
    await expectRefused([tampered, '--jwks', jwksFile], 'bad_signature');
    await expectRefused([`${h}.${p}.${Buffer.from(s, 'base64url').reverse().toString('base64url')}`, '--jwks', jwksFile], 'bad_signature');

    // Another daemon's receipt keys (a store of its own): the kid is not among them.
    const otherJwks = await cliFor(other.dataDir)('receipts', 'jwks');
    expect(otherJwks.code, otherJwks.stderr).toBe(0);
    const otherFile = join(other.root, 'other.jwks.json');
    await writeFile(otherFile, otherJwks.stdout);
    expect(json(otherJwks.stdout).keys[0].kid).not.toBe(partsOf(receipt).header.kid);
    await expectRefused([receipt, '--jwks', otherFile], 'unknown_key');
    // The other daemon's key under this daemon's kid: the signature does not verify.
    const swapped = { keys: [{ ...json(otherJwks.stdout).keys[0], kid: partsOf(receipt).header.kid }] };
    await writeFile(otherFile, JSON.stringify(swapped));
    await expectRefused([receipt, '--jwks', otherFile], 'bad_signature');

    await expectRefused([receipt, '--jwks', jwksFile, '--node', 'node-b'], 'wrong_node');
    // The JWKS from a URL (as a third party would fetch the operator's published copy; loopback http is allowed).
    const published = createServer((_req, res) => res.writeHead(200, { 'content-type': 'application/json' }).end(readFileSync(jwksFile)));
    await new Promise<void>((r) => published.listen(0, '127.0.0.1', r));
    try {
      const url = `http://127.0.0.1:${(published.address() as AddressInfo).port}/receipts-jwks.json`;
      const fetched = await cli('receipts', 'verify', receipt, '--jwks', url, '--node', 'node-a');
      expect(fetched.code, fetched.stdout + fetched.stderr).toBe(0);
      expect(json(fetched.stdout)).toMatchObject({ valid: true });
    } finally {
      await new Promise((r) => published.close(r));
    }
    // A human on a terminal gets the same answer in words (here: --format table).
    const words = await cli('receipts', 'verify', receipt, '--jwks', jwksFile, '--node', 'node-b', '--format', 'table');
    expect(words.stdout).toMatch(/^refused: wrong_node/);
  });

  it('refused by name when the chain disagrees: another chain without the transaction, a wrong block, contract or amount', async () => {
    const { claims } = partsOf(receipt);
    const expectRefused = async (jws: string, jwks: string, rpc: string, refusal: string) => {
      const r = await cli('receipts', 'verify', jws, '--jwks', jwks, '--rpc', rpc);
      expect(r.code, `${refusal}: ${r.stdout}${r.stderr}`).toBe(1);
      expect(json(r.stdout)).toMatchObject({ valid: false, refusal });
    };
    // The daemon's own receipt against a chain that never saw its transaction (same chain id, fresh state).
    const elsewhere = await startSandboxChain();
    try {
      await expectRefused(receipt, jwksFile, elsewhere.rpcUrl, 'tx_not_found');
    } finally {
      await elsewhere.stop();
    }
    // An RPC that cannot be read confirms nothing.
    await expectRefused(receipt, jwksFile, 'http://127.0.0.1:9', 'chain_unavailable');

    // Receipts that are well signed (by a key of our own) but say something the chain does not.
    const f = forger();
    const forgedJwks = join(t.root, 'forged.jwks.json');
    await writeFile(forgedJwks, JSON.stringify(f.jwks));
    const e = claims.escrow;
    expect(json((await cli('receipts', 'verify', f.sign(claims), '--jwks', forgedJwks, '--rpc', chain.rpcUrl)).stdout)).toMatchObject({ valid: true, chain: { amountChecked: true } });
    await expectRefused(f.sign({ ...claims, escrow: { ...e, blockNumber: e.blockNumber + 1 } }), forgedJwks, chain.rpcUrl, 'block_mismatch');
    await expectRefused(f.sign({ ...claims, amountMicro: '1500001' }), forgedJwks, chain.rpcUrl, 'amount_mismatch');
    await expectRefused(f.sign({ ...claims, escrow: { ...e, contract: chain.token.toLowerCase() } }), forgedJwks, chain.rpcUrl, 'wrong_contract');
    await expectRefused(f.sign({ ...claims, escrow: { ...e, chainId: 1 } }), forgedJwks, chain.rpcUrl, 'chain_mismatch');
    await expectRefused(f.sign({ ...claims, escrow: { ...e, txHash: `0x${'ab'.repeat(32)}` } }), forgedJwks, chain.rpcUrl, 'tx_not_found');
  });

  it('key rotation: the new key signs, the old one stays published until retired; the active key cannot be retired', async () => {
    const before = json((await cli('receipts', 'jwks')).stdout).keys.map((k: { kid: string }) => k.kid);
    const rot = await cli('receipts', 'rotate');
    expect(rot.code, rot.stderr).toBe(0);
    const { kid, previous } = json(rot.stdout);
    expect(previous).toBe(before[0]);
    const after = json((await cli('receipts', 'jwks')).stdout).keys.map((k: { kid: string }) => k.kid);
    expect(after).toEqual([previous, kid]);
    expect((await A.get('/v1/receipts/jwks.json')).body.keys.map((k: { kid: string }) => k.kid)).toEqual([previous, kid]);
    // A kid is a base64url thumbprint: one in 64 begins with '-', which only reads as a value after '--'.
    expect((await cli('receipts', 'retire', '--', kid)).code).toBe(4); // the active key: a conflict, named
    const dashed = await cli('receipts', 'retire', '-Qx0');
    expect(dashed.code).toBe(2);
    expect(dashed.stderr).toContain("put -- before it: e.g. node-svc receipts retire -- -Qx0");
    expect((await cli('receipts', 'retire', '--', '-Qx0')).code).toBe(3); // a value now: no such key
    expect(json((await cli('receipts', 'keys')).stdout).data.map((k: { status: string }) => k.status)).toEqual(['rotated', 'active']);
    // The old receipt verifies until its key is retired.
    expect((await cli('receipts', 'verify', receipt)).code).toBe(0);
    expect((await cli('receipts', 'retire', '--', previous)).code).toBe(0);
    expect(json((await cli('receipts', 'jwks')).stdout).keys.map((k: { kid: string }) => k.kid)).toEqual([kid]);
    expect(json((await cli('receipts', 'verify', receipt)).stdout)).toMatchObject({ valid: false, refusal: 'unknown_key' });
  });
});

describe('receipts on the card rail (real daemon, local processor)', () => {
  let t: TempDataDir;
  let p: LocalProcessor;
  let daemon: RunningDaemon;
  let receiver: Receiver;
  let issuer: KeyPair;
  let payer: KeyPair;
  let A: Client;
  let secret: string;
  let acct: string;
  const whsec = newWebhookSecret();

  beforeAll(async () => {
    t = await tempDataDir('node-svc-receipts-card-');
    p = await startLocalProcessor();
    acct = p.createAccount().id;
    [issuer, payer] = await Promise.all([issuerKeyPair(), payerKeyPair()]);
    const { tokenA } = await setupNodes(t.dataDir, issuer);
    const keyFile = await writeSecretFile(t.root, 'card.key', p.testKey);
    const secretFile = await writeSecretFile(t.root, 'card-webhook.secret', whsec);
    daemon = await startCardDaemon(t.dataDir, cardFlags(p, { key: keyFile, webhookSecret: secretFile }, acct));
    A = clientOf(daemon.url, tokenA);
    receiver = await startReceiver();
    const sub = await A.post('/v1/webhooks', { url: `${receiver.url}/hook` });
    expect(sub.status, sub.text).toBe(201);
    secret = sub.body.secret;
  });

  afterAll(async () => {
    await daemon?.stop();
    await receiver?.close();
    await p?.close();
    await t?.cleanup();
  });

  it('a capture whose funds become available → settlement.final with a receipt naming the processor and capture; receipts verify accepts it', async () => {
    const pi = p.createPaymentIntent({ amount: 500, destination: acct }) as { id: string };
    const stream = `card-rcpt-${Math.random().toString(36).slice(2, 8)}`;
    expect((await A.post('/v1/allowances/verify', { credential: cardCredential(issuer, payer, stream, pi.id) })).status).toBe(200);
    const v = await A.post(`/v1/streams/${stream}/vouchers`, { voucher: voucher(payer, stream, 2_000_000n) });
    expect(v.body.accepted, v.text).toBe(true);
    const cp = await eventually(async () => { const f = (await A.get(`/v1/streams/${stream}/finality`)).body; return f.finality === 'checkpointed' && f; }, 'checkpointed');
    p.makeAvailable(cp.frontier.reference);
    await p.sendWebhook(`${daemon.url}/processor/webhook`, whsec, p.event('balance.available', { object: 'balance', livemode: false }));
    await eventually(() => finals(receiver, secret, stream).length >= 1, 'settlement.final delivered');
    const receipt = finals(receiver, secret, stream)[0]!.data.receipt!;
    expect(partsOf(receipt).claims).toMatchObject({
      node: 'node-a', stream, asset: 'USD', amountMicro: '2000000', rail: 'card',
      card: { processor: 'stripe', captureId: cp.frontier.reference, paymentIntent: pi.id, account: acct },
    });
    expect((await A.get(`/v1/streams/${stream}/receipt`)).body.receipt).toBe(receipt);

    const cli = cliFor(t.dataDir);
    const ok = await cli('receipts', 'verify', receipt, '--node', 'node-a');
    expect(ok.code, ok.stdout + ok.stderr).toBe(0);
    expect(json(ok.stdout)).toMatchObject({ valid: true, claims: { rail: 'card' }, chain: null });
    const wrong = await cli('receipts', 'verify', receipt, '--node', 'node-b');
    expect(json(wrong.stdout)).toMatchObject({ valid: false, refusal: 'wrong_node' });
    const { h, s, claims } = partsOf(receipt);
    const tampered = await cli('receipts', 'verify', `${h}.${b64({ ...claims, card: { ...claims.card, captureId: 'txn_other' } })}.${s}`);
    expect(json(tampered.stdout)).toMatchObject({ valid: false, refusal: 'bad_signature' });
  });
});

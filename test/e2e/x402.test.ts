// node-svc as an x402 facilitator (issue #24), end to end with the official packages unmodified: a resource server on
// @x402/hono whose HTTPFacilitatorClient points at the real daemon's /v1/x402 (bearer header from createAuthHeaders),
// and a client on @x402/fetch + @x402/evm with a local-chain account, on the local ganache chain with the EIP-3009
// test token. Then each refusal over HTTP with nothing sent, and the same authorization settled twice at once.
import { randomBytes } from 'node:crypto';
import type { AddressInfo } from 'node:net';
import { serve, type ServerType } from '@hono/node-server';
import { Hono } from 'hono';
import { HTTPFacilitatorClient } from '@x402/core/server';
import { paymentMiddleware, x402ResourceServer } from '@x402/hono';
import { ExactEvmScheme as ExactEvmServer } from '@x402/evm/exact/server';
import { ExactEvmScheme as ExactEvmClient } from '@x402/evm/exact/client';
import { decodePaymentResponseHeader, wrapFetchWithPayment, x402Client } from '@x402/fetch';
import { generatePrivateKey, privateKeyToAccount } from 'viem/accounts';
import { getAddress, type Hex } from 'viem';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { startSandboxChain, type SandboxChain } from '../../src/rails/escrow/sandbox.js';
import { AUTHORIZATION_TYPES } from '../../src/rails/escrow/x402.js';
import { verifyReceipt } from '../../src/sdk/index.js';
import { tempDataDir, type TempDataDir } from '../helpers/cli.js';
import { storeUrlFor, testServerUrl } from '../helpers/postgres.js';
import { clientOf, setupNodes, type RunningDaemon } from '../helpers/daemon.js';
import { escrowFlags, eventually, startEscrowDaemon, writeKeyFile } from '../helpers/escrow.js';
import { issuerKeyPair } from '../helpers/issuer.js';
import { startReceiver, verifyServiceSignature, type Receiver } from '../helpers/receiver.js';

vi.setConfig({ testTimeout: 60_000, hookTimeout: 60_000 });

const DOMAIN = { name: 'node-svc Test USD', version: '2' };
const PRICE = 1000n;
interface Envelope { id: string; type: string; externalRef: string; data: Record<string, any> }

describe('x402 facilitator (real daemon, local chain, official x402 packages)', () => {
  let chain: SandboxChain;
  let t: TempDataDir;
  let daemon: RunningDaemon;
  let A: ReturnType<typeof clientOf>;
  let tokenA: string;
  let tokenB: string;
  let receiver: Receiver;
  let secret: string;
  let resource: ServerType;
  let resourceUrl: string;
  let network: string;

  const events = (type: string) => receiver.at('/hook')
    .filter((r) => verifyServiceSignature(secret, r.body, r.headers['x-service-signature']))
    .map((r) => JSON.parse(r.body.toString('utf8')) as Envelope)
    .filter((e) => e.type === type && e.externalRef.startsWith('stream:x402-'));
  /** Everything the daemon's wallet sent and the chain mined (ganache mines each at once unless its miner is stopped). */
  const sent = () => chain.client.getTransactionCount({ address: chain.operator.address, blockTag: 'latest' });

  beforeAll(async () => {
    let issuer;
    [chain, issuer, t] = await Promise.all([startSandboxChain(), issuerKeyPair(), tempDataDir('node-svc-x402-')]);
    network = `eip155:${chain.chainId}`;
    ({ tokenA, tokenB } = await setupNodes(t.dataDir, issuer));
    const keyFile = await writeKeyFile(t.root, chain.operator.key);
    daemon = await startEscrowDaemon(t.dataDir, escrowFlags(chain, keyFile, { '--confirmations': '2', '--settle-stuck-after': '1s', '--rebroadcast-after': '1s', '--x402-settle-wait': '1500ms' }));
    A = clientOf(daemon.url, tokenA);
    receiver = await startReceiver();
    const sub = await A.post('/v1/webhooks', { url: `${receiver.url}/hook` });
    expect(sub.status, sub.text).toBe(201);
    secret = sub.body.secret;

    // The resource server, as x402's README sets one up, with node-svc as its facilitator.
    const auth = { authorization: `Bearer ${tokenA}` };
    const facilitator = new HTTPFacilitatorClient({ url: `${daemon.url}/v1/x402`, createAuthHeaders: async () => ({ verify: auth, settle: auth, supported: auth }) });
    const app = new Hono();
    app.use(paymentMiddleware(
      { 'GET /weather': { accepts: [{ scheme: 'exact', network: network as `${string}:${string}`, payTo: chain.operator.address, price: { amount: PRICE.toString(), asset: chain.token, extra: DOMAIN } }], description: 'Weather' } },
      new x402ResourceServer(facilitator).register(network as `${string}:${string}`, new ExactEvmServer()),
    ));
    app.get('/weather', (c) => c.json({ weather: 'sunny' }));
    resource = await new Promise<ServerType>((res) => { const s = serve({ fetch: app.fetch, hostname: '127.0.0.1', port: 0 }, () => res(s)); });
    resourceUrl = `http://127.0.0.1:${(resource.address() as AddressInfo).port}`;
  });

  afterAll(async () => {
    await new Promise((r) => resource?.close(r));
    await daemon?.stop();
    await receiver?.close();
    await chain?.stop();
    await t?.cleanup();
  });

  it('GET /v1/x402/supported: exact on the configured chain, the wallet as signer; bearer required', async () => {
    const r = await A.get('/v1/x402/supported');
    expect(r.status, r.text).toBe(200);
    expect(r.body).toEqual({ kinds: [{ x402Version: 2, scheme: 'exact', network }], extensions: [], signers: { 'eip155:*': [getAddress(chain.operator.address)] } });
    expect((await fetch(`${daemon.url}/v1/x402/supported`)).status).toBe(401);
  });

  it('@x402/fetch pays @x402/hono through node-svc: the resource is served, the payee gets exactly the price, then checkpointed and final with a receipt', async () => {
    const payee0 = await chain.balanceOf(chain.operator.address);
    const payer0 = await chain.balanceOf(chain.payer.address);
    const unpaid = await fetch(`${resourceUrl}/weather`);
    expect(unpaid.status).toBe(402);
    // A token that is not one of x402's default assets is paid only when the client allows it (spendControls).
    const client = x402Client.fromConfig({
      schemes: [{ network: 'eip155:*', client: new ExactEvmClient(privateKeyToAccount(chain.payer.key)) }],
      spendControls: { allowedAssets: [{ network: network as `${string}:${string}`, asset: chain.token, maxAmountPerPayment: '1000000' }] },
    });
    const pay = wrapFetchWithPayment(fetch, client);
    const res = await pay(`${resourceUrl}/weather`);
    expect(res.status, await res.clone().text()).toBe(200);
    expect(await res.json()).toEqual({ weather: 'sunny' });
    const settled = decodePaymentResponseHeader(res.headers.get('PAYMENT-RESPONSE')!);
    expect(settled).toMatchObject({ success: true, network, payer: getAddress(chain.payer.address), transaction: expect.stringMatching(/^0x[0-9a-f]{64}$/) });
    expect(await chain.balanceOf(chain.operator.address)).toBe(payee0 + PRICE);
    expect(await chain.balanceOf(chain.payer.address)).toBe(payer0 - PRICE);

    // Mined: settlement.checkpointed (success was answered only then); final after --confirmations 2.
    await eventually(() => events('settlement.checkpointed').some((e) => e.data.reference === settled.transaction), 'settlement.checkpointed');
    expect(events('settlement.final').filter((e) => e.data.reference === settled.transaction)).toEqual([]);
    await chain.mine(3);
    await eventually(() => events('settlement.final').some((e) => e.data.reference === settled.transaction), 'settlement.final');
    const final = events('settlement.final').find((e) => e.data.reference === settled.transaction)!;
    expect(final.data).toMatchObject({
      stream: expect.stringMatching(new RegExp(`^x402-${chain.payer.address.toLowerCase()}-[0-9a-f]{16}$`)), budget: 'x402',
      asset: `${network}/erc20:${chain.token.toLowerCase()}`, amountMicro: PRICE.toString(),
      x402: { payer: chain.payer.address.toLowerCase(), resource: `${resourceUrl}/weather`, paidMicro: PRICE.toString() },
    });
    const served = await A.get(`/v1/streams/${final.data.stream}/receipt`);
    expect(served.body, served.text).toMatchObject({ stream: final.data.stream, amountMicro: PRICE.toString(), receipt: final.data.receipt });
    expect((await clientOf(daemon.url, tokenB).get(`/v1/streams/${final.data.stream}/receipt`)).status).toBe(404); // another node's
    const jwks = (await A.get('/v1/receipts/jwks.json')).body;
    const checked = await verifyReceipt(final.data.receipt as string, { jwks, node: 'node-a', rpcUrl: chain.rpcUrl });
    expect(checked).toMatchObject({
      valid: true,
      claims: { node: 'node-a', stream: final.data.stream, amountMicro: PRICE.toString(), rail: 'escrow', escrow: { chainId: chain.chainId, contract: chain.token.toLowerCase(), txHash: settled.transaction } },
    });
  });

  /** A signed exact payment of `value` (default: the price) to the wallet, as @x402/evm makes one; `over` changes the requirements. */
  async function payment(o: { key?: Hex; to?: Hex; value?: bigint; validAfter?: bigint; validBefore?: bigint; nonce?: Hex; signWith?: Hex; req?: Record<string, unknown> } = {}) {
    const now = BigInt(Math.floor(Date.now() / 1000));
    const key = o.key ?? chain.payer.key;
    const requirements = { scheme: 'exact', network, amount: (o.value ?? PRICE).toString(), asset: chain.token, payTo: chain.operator.address, maxTimeoutSeconds: 60, extra: DOMAIN, ...o.req };
    const authorization = {
      from: privateKeyToAccount(key).address, to: o.to ?? chain.operator.address, value: o.value ?? PRICE,
      validAfter: o.validAfter ?? now - 600n, validBefore: o.validBefore ?? now + 300n, nonce: o.nonce ?? (`0x${randomBytes(32).toString('hex')}` as Hex),
    };
    const signature = await privateKeyToAccount(o.signWith ?? key).signTypedData({
      domain: { ...DOMAIN, chainId: chain.chainId, verifyingContract: chain.token }, types: AUTHORIZATION_TYPES, primaryType: 'TransferWithAuthorization', message: authorization,
    });
    const payload = { signature, authorization: Object.fromEntries(Object.entries(authorization).map(([k, v]) => [k, typeof v === 'bigint' ? v.toString() : v])) };
    return { x402Version: 2, paymentPayload: { x402Version: 2, resource: { url: 'http://resource.test/data' }, accepted: requirements, payload }, paymentRequirements: requirements };
  }

  it('each refusal is named (verify and settle) and sends nothing', async () => {
    const stranger = generatePrivateKey();
    const used = await payment();
    const first = await A.post('/v1/x402/settle', used);
    expect(first.body, first.text).toMatchObject({ success: true });
    const cases: Array<[string, Awaited<ReturnType<typeof payment>>]> = [
      ['invalid_exact_evm_recipient_mismatch', await payment({ req: { payTo: privateKeyToAccount(stranger).address } })],
      ['invalid_exact_evm_recipient_mismatch', await payment({ to: privateKeyToAccount(stranger).address })],
      ['invalid_payment_requirements', await payment({ req: { asset: chain.escrow } })],
      ['invalid_network', await payment({ req: { network: 'eip155:8453' } })],
      ['invalid_exact_evm_payload_authorization_valid_before', await payment({ validBefore: BigInt(Math.floor(Date.now() / 1000)) - 1n })],
      ['invalid_exact_evm_payload_authorization_valid_after', await payment({ validAfter: BigInt(Math.floor(Date.now() / 1000)) + 3600n })],
      ['invalid_exact_evm_insufficient_balance', await payment({ key: stranger })],
      ['invalid_exact_evm_signature', await payment({ signWith: stranger })],
      ['invalid_exact_evm_authorization_value', { ...(await payment()), paymentRequirements: { ...(await payment()).paymentRequirements, amount: '999' } }],
      ['invalid_x402_version', { ...(await payment()), x402Version: 1 }],
      ['unsupported_scheme', await payment({ req: { scheme: 'upto' } })],
      ['invalid_exact_evm_missing_eip712_domain', await payment({ req: { extra: {} } })],
      ['invalid_exact_evm_network_mismatch', await (async () => { const p = await payment(); p.paymentPayload.accepted = { ...p.paymentPayload.accepted, network: 'eip155:1' }; return p; })()],
      ['invalid_payload', await (async () => { const p = await payment(); (p.paymentPayload.payload.authorization as Record<string, unknown>).nonce = '0x12'; return p; })()],
    ];
    // The used nonce: verify reads it on chain (the store claim answers settle first, for the same node: below).
    const replay = await A.post('/v1/x402/verify', used);
    expect(replay.body).toMatchObject({ isValid: false, invalidReason: 'invalid_exact_evm_nonce_already_used' });
    const before = await sent();
    const balances = [await chain.balanceOf(chain.operator.address), await chain.balanceOf(chain.payer.address)];
    for (const [reason, body] of cases) {
      const v = await A.post('/v1/x402/verify', body);
      expect(v.status, v.text).toBe(200);
      expect(v.body, reason).toMatchObject({ isValid: false, invalidReason: reason, invalidMessage: expect.any(String) });
      const s = await A.post('/v1/x402/settle', body);
      expect(s.status, s.text).toBe(200);
      expect(s.body, reason).toMatchObject({ success: false, errorReason: reason, transaction: '', network });
    }
    // The same authorization settled again by another node: refused as used; nothing sent.
    const B = clientOf(daemon.url, tokenB);
    expect((await B.post('/v1/x402/settle', used)).body).toMatchObject({ success: false, errorReason: 'invalid_exact_evm_nonce_already_used', transaction: '' });
    expect(await sent()).toBe(before);
    expect([await chain.balanceOf(chain.operator.address), await chain.balanceOf(chain.payer.address)]).toEqual(balances);
    // A body that does not match the document is 400 (the project's rule), not an x402 answer.
    expect((await A.post('/v1/x402/verify', { x402Version: 2 })).status).toBe(400);
  });

  it('the same authorization settled twice at once sends one transaction; both answers name it', async () => {
    const body = await payment();
    const before = await sent();
    const payee0 = await chain.balanceOf(chain.operator.address);
    const [a, b] = await Promise.all([A.post('/v1/x402/settle', body), A.post('/v1/x402/settle', body)]);
    expect(a.body, a.text).toMatchObject({ success: true, transaction: expect.stringMatching(/^0x[0-9a-f]{64}$/) });
    expect(b.body, b.text).toMatchObject({ success: true, transaction: a.body.transaction });
    expect(await sent()).toBe(before + 1);
    expect(await chain.balanceOf(chain.operator.address)).toBe(payee0 + PRICE);
  });

  it('a stalled chain answers settlement_pending (never success) with the one transaction; once mined, success, then final', async () => {
    const body = await payment();
    const before = await sent();
    await chain.client.request({ method: 'miner_stop' as never, params: [] as never });
    let pending;
    try {
      pending = await A.post('/v1/x402/settle', body);
      expect(pending.body, pending.text).toMatchObject({ success: false, errorReason: 'settlement_pending', transaction: expect.stringMatching(/^0x[0-9a-f]{64}$/) });
      // Not mined, so the chain still calls the nonce unused: verify refuses it from the claim.
      expect((await A.post('/v1/x402/verify', body)).body).toMatchObject({ isValid: false, invalidReason: 'invalid_exact_evm_nonce_already_used' });
      // Asked again while it is not mined: still pending, the same transaction, nothing more sent.
      const again = await A.post('/v1/x402/settle', body);
      expect(again.body).toMatchObject({ success: false, errorReason: 'settlement_pending', transaction: pending.body.transaction });
      expect(await chain.client.getTransaction({ hash: pending.body.transaction })).toMatchObject({ blockNumber: null, from: chain.operator.address.toLowerCase() });
      expect(events('settlement.checkpointed').some((e) => e.data.reference === pending.body.transaction)).toBe(false);
      // Not mined past --settle-stuck-after: settlement.stuck is raised (an operational alert), still no success.
      const stuck = /node_svc_alerts_emitted_total\{kind="settlement\.stuck"\} [1-9]/;
      await eventually(async () => stuck.test(await (await fetch(`${daemon.url}/metrics`)).text()), 'settlement.stuck raised');
      expect((await A.post('/v1/x402/settle', body)).body).toMatchObject({ success: false, errorReason: 'settlement_pending' });
    } finally {
      await chain.client.request({ method: 'miner_start' as never, params: [] as never });
    }
    await chain.mine(1);
    await eventually(() => events('settlement.checkpointed').some((e) => e.data.reference === pending.body.transaction), 'settlement.checkpointed once mined');
    await eventually(async () => /node_svc_alerts_emitted_total\{kind="settlement\.recovered"\} [1-9]/.test(await (await fetch(`${daemon.url}/metrics`)).text()), 'settlement.recovered');
    const mined = await A.post('/v1/x402/settle', body);
    expect(mined.body).toMatchObject({ success: true, transaction: pending.body.transaction, amount: PRICE.toString() });
    await chain.mine(3);
    await eventually(() => events('settlement.final').some((e) => e.data.reference === pending.body.transaction), 'settlement.final');
    expect(await sent()).toBe(before + 1);
  });

  // Two daemons on one PostgreSQL database (the PostgreSQL pass): the claim is the database's unique key.
  it.runIf(!!testServerUrl())('the same authorization settled at once through two daemons on one PostgreSQL sends one transaction', async () => {
    const t2 = await tempDataDir('node-svc-x402-second-');
    const keyFile = await writeKeyFile(t2.root, chain.operator.key);
    const second = await startEscrowDaemon(t2.dataDir, escrowFlags(chain, keyFile, { '--confirmations': '2' }), { env: { NODE_SVC_STORE: (await storeUrlFor(t.dataDir))! } });
    try {
      const body = await payment();
      const before = await sent();
      const [a, b] = await Promise.all([A.post('/v1/x402/settle', body), clientOf(second.url, tokenA).post('/v1/x402/settle', body)]);
      expect(a.body, a.text).toMatchObject({ success: true, transaction: expect.stringMatching(/^0x[0-9a-f]{64}$/) });
      expect(b.body, b.text).toMatchObject({ success: true, transaction: a.body.transaction });
      expect(await sent()).toBe(before + 1);
    } finally {
      await second.stop();
      await t2.cleanup();
    }
  });
});

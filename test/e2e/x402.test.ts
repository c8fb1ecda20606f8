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
import { verifyReceipt } from '../../src/sdk/index.js';
import { tempDataDir, type TempDataDir } from '../helpers/cli.js';
import { storeUrlFor, testServerUrl } from '../helpers/postgres.js';
import { clientOf, setupNodes, type RunningDaemon } from '../helpers/daemon.js';
import { escrowFlags, eventually, startEscrowDaemon, writeKeyFile } from '../helpers/escrow.js';
import { json, runCli } from '../helpers/cli.js';
import { startRpcProxy, type RpcProxy } from '../helpers/rpc-proxy.js';
import { x402Stream } from '../../src/service/x402.js';
import { X402_DOMAIN as DOMAIN, x402Payment, type X402PaymentOptions } from '../helpers/x402.js';
import { issuerKeyPair, mintCredential, type KeyPair } from '../helpers/issuer.js';
import { startReceiver, verifyServiceSignature, type Receiver } from '../helpers/receiver.js';

vi.setConfig({ testTimeout: 60_000, hookTimeout: 60_000 });

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
  let proxy: RpcProxy;
  let issuer: KeyPair;

  const events = (type: string) => receiver.at('/hook')
    .filter((r) => verifyServiceSignature(secret, r.body, r.headers['x-service-signature']))
    .map((r) => JSON.parse(r.body.toString('utf8')) as Envelope)
    .filter((e) => e.type === type && e.externalRef.startsWith('stream:x402-'));
  /** Everything the daemon's wallet sent and the chain mined (ganache mines each at once unless its miner is stopped). */
  const sent = () => chain.client.getTransactionCount({ address: chain.operator.address, blockTag: 'latest' });

  beforeAll(async () => {
    [chain, issuer, t] = await Promise.all([startSandboxChain(), issuerKeyPair(), tempDataDir('node-svc-x402-')]);
    network = `eip155:${chain.chainId}`;
    ({ tokenA, tokenB } = await setupNodes(t.dataDir, issuer));
    const keyFile = await writeKeyFile(t.root, chain.operator.key);
    // The chain RPC through a loopback proxy that keeps every transaction the daemon sends (nonce, target, fee).
    proxy = await startRpcProxy(chain.rpcUrl);
    daemon = await startEscrowDaemon(t.dataDir, escrowFlags(chain, keyFile, { '--rpc-url': proxy.url, '--confirmations': '2', '--settle-stuck-after': '1s', '--rebroadcast-after': '1s', '--x402-settle-wait': '1500ms' }));
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
    await proxy?.stop();
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

  /** A signed exact payment (default: the price) to the wallet, as @x402/evm makes one (test/helpers/x402.ts). */
  const payment = (o: Partial<X402PaymentOptions> = {}) => x402Payment(chain, { value: PRICE, ...o });

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

  it('x402 payments are streams of the node that asked: in GET /v1/streams and …/finality (and the CLI), billed, checkpointed, final; another node sees none', async () => {
    const url = `http://resource.test/streams-${randomBytes(4).toString('hex')}`;
    const stream = x402Stream(chain.payer.address, url);
    const first = await A.post('/v1/x402/settle', await payment({ resource: url }));
    const second = await A.post('/v1/x402/settle', await payment({ resource: url, value: 2500n }));
    expect([first.body, second.body], second.text).toMatchObject([{ success: true }, { success: true }]);
    // Credential streams of the same node around it in id order (one named like an x402 stream): the list merges both kinds.
    const tag = randomBytes(4).toString('hex');
    const credentialIds = [`a-${tag}`, `x402-zz-${tag}`, `zz-${tag}`];
    for (const id of credentialIds) {
      const r = await A.post('/v1/allowances/verify', { credential: mintCredential({ key: issuer, claims: { stream: id, budget: `b-${id}` } }) });
      expect(r.status, r.text).toBe(200);
    }
    const all = async (client: ReturnType<typeof clientOf>, q = '') => (await client.get(`/v1/streams?limit=500${q}`)).body.data as Array<Record<string, any>>;
    // Mined (settle answered success only then): checkpointed, not final before --confirmations.
    const summary = (await all(A)).find((s) => s.stream === stream);
    expect(summary).toMatchObject({
      stream, source: 'x402', budget: 'x402', issuer: 'x402', mode: 'escrow', payer: chain.payer.address.toLowerCase(), asset: `${network}/erc20:${chain.token.toLowerCase()}`,
      status: 'open', degradationStage: 'halted', billedMicro: '3500', capMicro: '3500', remainingCapMicro: '0', checkpointedMicro: '3500',
      unsettledMicro: '0', expiresAt: expect.any(String), lastActivityAt: expect.any(String),
    });
    expect(['none', 'checkpointed']).toContain(summary!.finality); // final only at --confirmations
    await chain.mine(3);
    let f: Record<string, any> = {};
    await eventually(async () => (f = (await A.get(`/v1/streams/${stream}/finality`)).body).finality === 'final' && f.finalMicro === '3500', 'the x402 stream final');
    expect(f).toMatchObject({
      stream, source: 'x402', finalMicro: '3500', checkpointedMicro: '3500', unsettledMicro: '0', reason: null, settlement: null,
      frontier: { amountMicro: '3500', finality: 'final', reference: second.body.transaction, checkpointedAt: expect.any(String), finalAt: expect.any(String) },
      billedTruth: { amountMicro: '3500', units: '2', voucher: null }, funding: { status: 'none' },
      x402: { payer: chain.payer.address.toLowerCase(), resource: url, payments: 2 },
    });
    // Headroom: no credential behind it, nothing authorized ahead; verify: not payable by voucher.
    expect((await A.get(`/v1/streams/${stream}/headroom`)).body).toMatchObject({ stream, source: 'x402', capMicro: '3500', billedMicro: '3500', remainingCapMicro: '0', remainingUnits: '0', unitPriceMicro: '2500', degradationStage: 'halted', fundedMicro: null });
    expect((await A.get(`/v1/streams/${stream}/verify`)).body).toMatchObject({ stream, source: 'x402', open: true, payable: false, status: 'open' });
    // The list's filters and pages: open and all (never closed); a page of 1 at a time visits every stream once, in both sorts.
    expect((await all(A, '&status=closed')).some((s) => s.stream === stream)).toBe(false);
    expect((await all(A, '&status=open')).some((s) => s.stream === stream)).toBe(true);
    for (const sort of ['id', 'activity']) {
      const whole = (await all(A, `&sort=${sort}`)).map((s) => s.stream);
      const paged: string[] = [];
      let cursor: string | null = null;
      for (let i = 0; i <= whole.length; i++) {
        const page: Record<string, any> = (await A.get(`/v1/streams?limit=1&sort=${sort}${cursor ? `&cursor=${cursor}` : ''}`)).body;
        paged.push(...page.data.map((s: { stream: string }) => s.stream));
        cursor = page.nextCursor;
        if (!cursor) break;
      }
      expect(paged, sort).toEqual(whole);
      expect(whole, sort).toEqual(expect.arrayContaining([stream, ...credentialIds]));
      if (sort === 'id') expect(whole).toEqual([...whole].sort());
    }
    for (const id of credentialIds) {
      expect((await all(A)).find((s) => s.stream === id)).toMatchObject({ source: 'credential' });
      expect((await A.get(`/v1/streams/${id}/finality`)).body).toMatchObject({ stream: id, source: 'credential' });
    }
    // The CLI shows the same.
    const listed = await runCli(['streams', 'list', '--limit', '500', '--url', daemon.url, '--token', tokenA]);
    expect(listed.code, listed.stderr).toBe(0);
    expect(json(listed.stdout).data.find((s: { stream: string }) => s.stream === stream)).toMatchObject({ source: 'x402', finalMicro: '3500' });
    const fin = await runCli(['streams', 'finality', stream, '--url', daemon.url, '--token', tokenA]);
    expect(fin.code, fin.stderr).toBe(0);
    expect(json(fin.stdout)).toMatchObject({ stream, source: 'x402', finality: 'final', finalMicro: '3500' });
    // Another node's token: not in its list, 404 on every read (as for any stream that is not its own).
    const B = clientOf(daemon.url, tokenB);
    expect((await all(B)).some((s) => s.stream === stream)).toBe(false);
    for (const read of ['finality', 'headroom', 'verify', 'receipt']) expect((await B.get(`/v1/streams/${stream}/${read}`)).status, read).toBe(404);
  });

  it('a stalled chain: settlement_pending (never success), rebroadcast then fee-bumped at the same nonce, stuck in finality; once mined, success with the transaction that paid, then final', async () => {
    const url = `http://resource.test/stalled-${randomBytes(4).toString('hex')}`;
    const stream = x402Stream(chain.payer.address, url);
    const body = await payment({ resource: url });
    const before = await sent();
    const payee0 = await chain.balanceOf(chain.operator.address);
    const metric = async (re: RegExp) => re.exec(await (await fetch(`${daemon.url}/metrics`)).text());
    const token = chain.token.toLowerCase();
    await chain.client.request({ method: 'miner_stop' as never, params: [] as never });
    let pending;
    let nonce: number;
    try {
      pending = await A.post('/v1/x402/settle', body);
      expect(pending.body, pending.text).toMatchObject({ success: false, errorReason: 'settlement_pending', transaction: expect.stringMatching(/^0x[0-9a-f]{64}$/) });
      const first = proxy.sent.find((x) => x.hash === pending.body.transaction)!;
      expect(first, 'the transaction settle named was sent through the RPC').toMatchObject({ to: token });
      nonce = first.nonce;
      // Not mined, so the chain still calls the nonce unused: verify refuses it from the claim.
      expect((await A.post('/v1/x402/verify', body)).body).toMatchObject({ isValid: false, invalidReason: 'invalid_exact_evm_nonce_already_used' });
      // Rebroadcast, then replaced at the same nonce with a higher fee (as escrow settles are, #11).
      await eventually(() => proxy.sent.some((x) => x.nonce === nonce && x.to === token && x.hash !== first.hash && BigInt(x.maxFeePerGas!) > BigInt(first.maxFeePerGas!)), 'a fee-bumped replacement at the same nonce', 20_000);
      // Stuck: in the finality view (the newest payment not final) and as the settlement.stuck alert; never final.
      let f: Record<string, any> = {};
      await eventually(async () => (f = (await A.get(`/v1/streams/${stream}/finality`)).body).settlement?.stuck === true && f.settlement.attempts >= 3, 'stuck, with its broadcasts counted');
      expect(f).toMatchObject({ source: 'x402', finality: 'none', finalMicro: '0', checkpointedMicro: '0', billedTruth: { amountMicro: PRICE.toString() }, unsettledMicro: PRICE.toString(),
        settlement: { status: 'submitted', amountMicro: PRICE.toString(), payment: expect.stringMatching(/^x4p_/), reference: expect.stringMatching(/^0x[0-9a-f]{64}$/) } });
      expect(proxy.sent.some((x) => x.hash === f.settlement.reference && x.nonce === nonce)).toBe(true);
      await eventually(async () => !!(await metric(/node_svc_alerts_emitted_total\{kind="settlement\.stuck"\} [1-9]/)), 'settlement.stuck raised');
      expect(Number((await metric(/^node_svc_x402_pending_transactions (\d+)$/m))?.[1])).toBeGreaterThanOrEqual(1);
      // …and in the daemon's status: the settlements check counts it stuck (no escrow settlement is open in this file).
      expect(Number((await metric(/^node_svc_settlements\{state="stuck"\} (\d+)$/m))?.[1])).toBeGreaterThanOrEqual(1);
      expect((await (await fetch(`${daemon.url}/healthz`)).json()).checks.find((c: { name: string }) => c.name === 'settlements')).toMatchObject({ status: 'degraded' });
      // Asked again while it is not mined: still pending, naming a transaction of that one nonce; nothing else sent.
      const again = await A.post('/v1/x402/settle', body);
      expect(again.body).toMatchObject({ success: false, errorReason: 'settlement_pending' });
      expect(proxy.sent.filter((x) => x.nonce === nonce).map((x) => x.hash)).toContain(again.body.transaction);
      expect(proxy.sent.filter((x) => x.to === token && x.nonce !== nonce && proxy.sent.indexOf(x) > proxy.sent.indexOf(first))).toEqual([]);
      expect(events('settlement.checkpointed').some((e) => e.data.stream === stream)).toBe(false);
    } finally {
      await chain.client.request({ method: 'miner_start' as never, params: [] as never });
    }
    await chain.mine(1);
    await eventually(() => events('settlement.checkpointed').some((e) => e.data.stream === stream), 'settlement.checkpointed once mined');
    const paid = events('settlement.checkpointed').find((e) => e.data.stream === stream)!.data.reference as string;
    expect(proxy.sent.filter((x) => x.nonce === nonce!).map((x) => x.hash), 'the reference is the transaction of that nonce that mined').toContain(paid);
    expect((await chain.client.getTransactionReceipt({ hash: paid as Hex })).status).toBe('success');
    await eventually(async () => !!(await metric(/node_svc_alerts_emitted_total\{kind="settlement\.recovered"\} [1-9]/)), 'settlement.recovered');
    const mined = await A.post('/v1/x402/settle', body);
    expect(mined.body).toMatchObject({ success: true, transaction: paid, amount: PRICE.toString() });
    await chain.mine(3);
    await eventually(() => events('settlement.final').some((e) => e.data.reference === paid), 'settlement.final');
    expect((await A.get(`/v1/streams/${stream}/finality`)).body).toMatchObject({ finality: 'final', finalMicro: PRICE.toString(), settlement: null, frontier: { reference: paid } });
    // One nonce used, the price paid exactly once.
    expect(await sent()).toBe(before + 1);
    expect(await chain.balanceOf(chain.operator.address)).toBe(payee0 + PRICE);
    expect((await metric(/^node_svc_x402_pending_transactions (\d+)$/m))?.[1]).toBe('0');
  });

  it('/metrics counts x402 verify and settle answers by outcome', async () => {
    const text = await (await fetch(`${daemon.url}/metrics`)).text();
    const count = (re: RegExp) => Number(re.exec(text)?.[1] ?? 0);
    expect(text).toMatch(/# TYPE node_svc_x402_verify_total counter/);
    expect(count(/^node_svc_x402_verify_total\{result="valid"\} (\d+)$/m)).toBeGreaterThanOrEqual(1); // @x402/hono verifies before it settles
    expect(count(/^node_svc_x402_verify_total\{result="invalid_exact_evm_signature"\} (\d+)$/m)).toBe(1);
    expect(count(/^node_svc_x402_verify_total\{result="invalid_exact_evm_nonce_already_used"\} (\d+)$/m)).toBeGreaterThanOrEqual(2);
    expect(count(/^node_svc_x402_settle_total\{outcome="success",reason="none"\} (\d+)$/m)).toBeGreaterThanOrEqual(5);
    expect(count(/^node_svc_x402_settle_total\{outcome="pending",reason="settlement_pending"\} (\d+)$/m)).toBeGreaterThanOrEqual(2);
    expect(count(/^node_svc_x402_settle_total\{outcome="failed",reason="invalid_exact_evm_signature"\} (\d+)$/m)).toBe(1);
    expect(text).toMatch(/^# TYPE node_svc_x402_pending_transactions gauge$/m);
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

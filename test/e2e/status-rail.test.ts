// `node-svc status` of a daemon on the escrow rail, against a real local chain (ganache): where it settles, whether
// the RPC answers, the payee wallet's gas; a wallet without gas and a chain gone are degraded, never a crash.
import { generatePrivateKey } from 'viem/accounts';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { startSandboxChain, type SandboxChain } from '../../src/rails/escrow/sandbox.js';
import { json, runCli, tempDataDir, type TempDataDir } from '../helpers/cli.js';
import { http, setupNodes, type RunningDaemon } from '../helpers/daemon.js';
import { escrowFlags, startEscrowDaemon, writeKeyFile } from '../helpers/escrow.js';
import { issuerKeyPair } from '../helpers/issuer.js';
import { startLocalProcessor } from '../../src/rails/card/processor.js';
import { cardFlags, startCardDaemon, writeSecretFile } from '../helpers/card.js';

vi.setConfig({ testTimeout: 90_000, hookTimeout: 60_000 });

let chain: SandboxChain;
const dirs: TempDataDir[] = [];
const daemons: RunningDaemon[] = [];

beforeAll(async () => { chain = await startSandboxChain(); });
afterAll(async () => {
  for (const d of daemons) await d.stop();
  await chain?.stop().catch(() => undefined);
  for (const d of dirs) await d.cleanup();
});

async function daemonWith(walletKey: string) {
  const dir = await tempDataDir();
  dirs.push(dir);
  const { tokenA } = await setupNodes(dir.dataDir, await issuerKeyPair());
  const d = await startEscrowDaemon(dir.dataDir, escrowFlags(chain, await writeKeyFile(dir.root, walletKey)));
  daemons.push(d);
  return { d, token: tokenA };
}
const railOf = (s: { checks: Array<{ name: string }> }) => s.checks.find((c) => c.name === 'rail') as { status: string; reason: string | null; figures: Record<string, any> };

describe('status: the escrow rail', () => {
  it('names the chain, says it is reachable and shows the wallet\'s gas; the key never appears', async () => {
    const { d, token } = await daemonWith(chain.operator.key);
    const r = await runCli(['status', '--url', d.url, '--token', token]);
    expect(r.code, r.stdout).toBe(0);
    const rail = railOf(json(r.stdout));
    expect(rail).toMatchObject({ status: 'ok', figures: { mode: 'escrow', env: 'sandbox', network: `chain ${chain.chainId}`, reachable: true } });
    expect(rail.figures.wallet.address.toLowerCase()).toBe(chain.operator.address.toLowerCase());
    expect(BigInt(rail.figures.wallet.balanceWei)).toBeGreaterThan(0n);
    const table = await runCli(['status', '--url', d.url, '--token', token, '--format', 'table']);
    expect(table.stdout).toMatch(new RegExp(`rail\\s+ok\\s+escrow sandbox on chain ${chain.chainId}, reachable, wallet 0x[0-9a-fA-F]{40} gas \\d+\\.\\d{6} ETH`));
    expect((r.stdout + table.stdout).toLowerCase()).not.toContain(chain.operator.key.slice(2).toLowerCase());
  });

  it('a wallet without gas is degraded and named; a chain that is gone is degraded, /healthz still 200', async () => {
    const { d, token } = await daemonWith(generatePrivateKey());
    const r = await runCli(['status', '--url', d.url, '--token', token]);
    expect(r.code).toBe(1);
    expect(railOf(json(r.stdout))).toMatchObject({ status: 'degraded', reason: expect.stringMatching(/holds no gas: settlements cannot be sent/) });

    await chain.stop();
    const h = await http(d.url, '/healthz');
    expect(h.status).toBe(200);
    expect(h.body.status).toBe('degraded');
    expect(railOf(h.body)).toMatchObject({ status: 'degraded', figures: { reachable: false } });
    expect(railOf(h.body).reason).toMatch(/chain RPC unreachable|did not answer within/);
  });
});

describe('status: the card rail', () => {
  it('names the connected account and says the processor answers; a processor gone is degraded', async () => {
    const p = await startLocalProcessor();
    const acct = p.createAccount().id;
    const dir = await tempDataDir();
    dirs.push(dir);
    const { tokenA } = await setupNodes(dir.dataDir, await issuerKeyPair());
    const d = await startCardDaemon(dir.dataDir, cardFlags(p, { key: await writeSecretFile(dir.root, 'card.key', p.testKey) }, acct));
    daemons.push(d);
    const r = await runCli(['status', '--url', d.url, '--token', tokenA]);
    expect(r.code, r.stdout).toBe(0);
    expect(railOf(json(r.stdout))).toMatchObject({ status: 'ok', figures: { mode: 'card', env: 'sandbox', network: acct, reachable: true } });
    expect(r.stdout).not.toContain(p.testKey);

    await p.close();
    const h = await http(d.url, '/healthz');
    expect(h.status).toBe(200);
    expect(railOf(h.body)).toMatchObject({ status: 'degraded', figures: { reachable: false } });
  });
});

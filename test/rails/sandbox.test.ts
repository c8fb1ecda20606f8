// The sandbox chain's stop(): ganache closes its database on server.close(), and a call it was still simulating
// (eth_call, eth_estimateGas) then wrote to the closed database — an unhandled `WriteError: Database is not open` in
// the process hosting the chain, after the client that asked was gone (a test's SIGKILLed daemon). stop() now refuses
// new requests and waits for those in flight.
import { encodeFunctionData } from 'viem';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { TOKEN_ABI } from '../../src/rails/escrow/artifacts.js';
import { startSandboxChain } from '../../src/rails/escrow/sandbox.js';

vi.setConfig({ testTimeout: 60_000 });

const stray: unknown[] = [];
const onStray = (e: unknown) => { stray.push(e); };
afterEach(() => {
  process.off('unhandledRejection', onStray);
  process.off('uncaughtException', onStray);
});

describe('sandbox chain stop()', () => {
  it('waits for the calls in flight: none writes to a closed database', async () => {
    process.on('unhandledRejection', onStray);
    process.on('uncaughtException', onStray);
    const answers: string[] = [];
    let waitedFor = 0; // calls in flight when stop() began, over the rounds: the case this test is about
    // Stopped 0, 5 and 15 ms after the calls went out, and once the first of them was answered: on a loaded machine
    // (a fresh-clone CI run) none of the 30 had reached the chain 15 ms after they were sent, so every one was refused
    // and no round reached the case this test is about; the fourth round stops with the first answer in and the others
    // on their way. stop() says how many calls it found in flight: some round must have had one.
    for (const delayMs of [0, 5, 15, 'first answer'] as const) {
      const chain = await startSandboxChain();
      const data = encodeFunctionData({ abi: TOKEN_ABI, functionName: 'transfer', args: [chain.operator.address, 1n] });
      const calls = Array.from({ length: 30 }, (_, i) =>
        fetch(chain.rpcUrl, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify({ jsonrpc: '2.0', id: i, method: i % 2 ? 'eth_estimateGas' : 'eth_call', params: [{ from: chain.payer.address, to: chain.token, data }, ...(i % 2 ? [] : ['latest'])] }),
        }).then(async (r) => JSON.stringify(await r.json()), (e: Error) => `fetch: ${e.message}`));
      if (delayMs === 'first answer') await Promise.race(calls);
      else await new Promise((r) => setTimeout(r, delayMs));
      waitedFor += (await chain.stop()).inFlight;
      answers.push(...(await Promise.all(calls)));
      await new Promise((r) => setTimeout(r, 200)); // what ganache does after close() surfaces here
    }
    expect(stray.map(String)).toEqual([]);
    // Each call was answered (a result, or refused by name while stopping) or found the server closed.
    for (const a of answers) expect(a).toMatch(/"result":"0x|the sandbox chain is stopping|^fetch: /);
    expect(answers.filter((a) => a.includes('"result"')).length).toBeGreaterThan(0);
    expect(waitedFor).toBeGreaterThan(0);
  });
});

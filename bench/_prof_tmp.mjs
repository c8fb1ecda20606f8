import { startSandboxChain } from '/work/main/dist/rails/escrow/sandbox.js';
import { ESCROW_ABI } from '/work/main/dist/rails/escrow/artifacts.js';
import { encodeFunctionData, createPublicClient, http } from 'viem';
import { privateKeyToAccount } from 'viem/accounts';
const chain = await startSandboxChain();
const client = createPublicClient({ transport: http(chain.rpcUrl) });
const acct = privateKeyToAccount(chain.operator.key);
const t = () => performance.now();
const ch = await chain.openChannel({ id: 'x', payee: chain.operator.address, deposit: 10000n });
for (let i = 1; i <= 4; i++) {
  const amount = BigInt(i * 10);
  const sig = await chain.signVoucher({ chainId: 1337, escrow: chain.escrow, channel: ch }, amount);
  const data = encodeFunctionData({ abi: ESCROW_ABI, functionName: 'settle', args: [ch, amount, sig] });
  let a = t(); await client.readContract({ address: chain.escrow, abi: ESCROW_ABI, functionName: 'channels', args: [ch] }); const r1 = t() - a;
  a = t(); const gas = await client.estimateGas({ account: acct, to: chain.escrow, data }); const r2 = t() - a;
  a = t(); const nonce = await client.getTransactionCount({ address: acct.address, blockTag: 'pending' }); const r3 = t() - a;
  a = t(); const fees = await client.estimateFeesPerGas(); const r4 = t() - a;
  a = t(); const s = await acct.signTransaction({ to: chain.escrow, data, nonce, gas: gas * 12n / 10n, chainId: 1337, type: 'eip1559', maxFeePerGas: fees.maxFeePerGas, maxPriorityFeePerGas: fees.maxPriorityFeePerGas }); const r5 = t() - a;
  a = t(); await client.sendRawTransaction({ serializedTransaction: s }); const r6 = t() - a;
  console.log({ read: r1.toFixed(1), estimate: r2.toFixed(1), nonce: r3.toFixed(1), fees: r4.toFixed(1), sign: r5.toFixed(1), send: r6.toFixed(1) });
}
await chain.stop();

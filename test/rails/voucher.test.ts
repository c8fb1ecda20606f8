// EIP-712 vouchers checked off chain exactly as the escrow contract checks them on chain (DESIGN §5–6):
// the signer of Voucher(channelId, cumulativeAmount) under the contract's domain, canonical signatures only.
import { recoverTypedDataAddress, keccak256, toHex, type Hex } from 'viem';
import { generatePrivateKey, privateKeyToAccount } from 'viem/accounts';
import { describe, expect, it } from 'vitest';
import { recoverVoucherSigner, UINT128_MAX, voucherDigest, voucherDomain, VOUCHER_TYPES, type EscrowTerms } from '../../src/rails/escrow/voucher.js';
import { highS, SECP256K1_N, withV } from '../helpers/escrow.js';

const payer = privateKeyToAccount(generatePrivateKey());
const other = privateKeyToAccount(generatePrivateKey());
const terms: EscrowTerms = { chainId: 1337, escrow: '0x5b1869D9A4C187F2EAa108f3062412ecf0526b24', channel: keccak256(toHex('channel-1')) };

/** What the payer's wallet (and the sandbox's signVoucher) signs. */
const sign = (t: EscrowTerms, amount: bigint, account = payer) =>
  account.signTypedData({ domain: voucherDomain(t), types: VOUCHER_TYPES, primaryType: 'Voucher', message: { channelId: t.channel, cumulativeAmount: amount } });

const addressOf = (r: ReturnType<typeof recoverVoucherSigner>) => ('address' in r ? r.address : undefined);
const errorOf = (r: ReturnType<typeof recoverVoucherSigner>) => ('error' in r ? r.error : undefined);

describe('recoverVoucherSigner', () => {
  it('recovers the signer of a voucher (lowercase address), for small and huge amounts', async () => {
    for (const amount of [1n, 100n, 1_000_000n, 123_456_789_012n, UINT128_MAX]) {
      const sig = await sign(terms, amount);
      expect(addressOf(recoverVoucherSigner(terms, amount, sig))).toBe(payer.address.toLowerCase());
    }
  });

  it('agrees with viem on the typed-data digest and the recovered address', async () => {
    const sig = await sign(terms, 4242n);
    const viemAddr = await recoverTypedDataAddress({ domain: voucherDomain(terms), types: VOUCHER_TYPES, primaryType: 'Voucher', message: { channelId: terms.channel, cumulativeAmount: 4242n }, signature: sig });
    expect(addressOf(recoverVoucherSigner(terms, 4242n, sig))).toBe(viemAddr.toLowerCase());
    expect(voucherDigest(terms, 4242n)).toMatch(/^0x[0-9a-f]{64}$/);
    expect(voucherDigest(terms, 4242n)).not.toBe(voucherDigest(terms, 4243n));
  });

  it('accepts upper-case hex in the signature', async () => {
    const sig = await sign(terms, 7n);
    expect(addressOf(recoverVoucherSigner(terms, 7n, `0x${sig.slice(2).toUpperCase()}`))).toBe(payer.address.toLowerCase());
  });

  it('refuses a high-s signature (s → n − s, v flipped), though it is the same signer mathematically', async () => {
    let seen = 0;
    for (let amount = 1n; amount <= 5n; amount++) {
      const sig = await sign(terms, amount);
      const flipped = highS(sig);
      expect(BigInt(`0x${flipped.slice(66, 130)}`)).toBeGreaterThan(SECP256K1_N >> 1n);
      expect(await recoverTypedDataAddress({ domain: voucherDomain(terms), types: VOUCHER_TYPES, primaryType: 'Voucher', message: { channelId: terms.channel, cumulativeAmount: amount }, signature: flipped }))
        .toBe(payer.address); // malleable twin: viem still recovers the payer
      expect(errorOf(recoverVoucherSigner(terms, amount, flipped))).toMatch(/high-s/);
      seen++;
    }
    expect(seen).toBe(5);
  });

  it('refuses a signature of the wrong length or not hex', async () => {
    const sig = await sign(terms, 9n);
    for (const bad of [sig.slice(0, 130), `${sig}00`, sig.slice(2), `0x${'zz'.repeat(65)}`, '', '0x', `${sig.slice(0, 66)}`]) {
      expect(errorOf(recoverVoucherSigner(terms, 9n, bad)), bad).toMatch(/65 bytes/);
    }
  });

  it('refuses v other than 27 or 28 (the contract\'s ecrecover refuses them too)', async () => {
    const sig = await sign(terms, 11n);
    expect([27, 28]).toContain(parseInt(sig.slice(130), 16));
    for (const v of [0, 1, 2, 26, 29, 35, 36, 255]) {
      expect(errorOf(recoverVoucherSigner(terms, 11n, withV(sig, v))), `v=${v}`).toMatch(/v must be 27 or 28/);
    }
  });

  it('a voucher signed for another channel, chain or contract does not recover the payer', async () => {
    const elsewhere: EscrowTerms[] = [
      { ...terms, channel: keccak256(toHex('channel-2')) },
      { ...terms, chainId: 1 },
      { ...terms, chainId: 31337 },
      { ...terms, escrow: '0x000000000000000000000000000000000000dEaD' },
    ];
    for (const t of elsewhere) {
      const sig = await sign(t, 500n);
      expect(addressOf(recoverVoucherSigner(t, 500n, sig))).toBe(payer.address.toLowerCase()); // valid where it was meant
      expect(addressOf(recoverVoucherSigner(terms, 500n, sig))).not.toBe(payer.address.toLowerCase());
    }
  });

  it('a voucher for another amount, or by another key, does not recover the payer', async () => {
    const sig = await sign(terms, 500n);
    expect(addressOf(recoverVoucherSigner(terms, 501n, sig))).not.toBe(payer.address.toLowerCase());
    const byOther = await sign(terms, 500n, other);
    expect(addressOf(recoverVoucherSigner(terms, 500n, byOther))).toBe(other.address.toLowerCase());
  });

  it('r = 0 or s = 0 does not recover a key', async () => {
    const sig = await sign(terms, 3n);
    const zeroR = `0x${'00'.repeat(32)}${sig.slice(66)}` as Hex;
    const zeroS = `${sig.slice(0, 66)}${'00'.repeat(32)}${sig.slice(130)}` as Hex;
    for (const bad of [zeroR, zeroS]) expect(addressOf(recoverVoucherSigner(terms, 3n, bad))).toBeUndefined();
  });
});

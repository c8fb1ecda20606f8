// EIP-712 vouchers: Voucher(bytes32 channelId, uint128 cumulativeAmount) under the escrow contract's domain.
// Checked synchronously (inside the voucher transaction) with noble's secp256k1; high-s signatures are refused,
// as the contract's ECDSA.recover refuses them.
import { secp256k1 } from '@noble/curves/secp256k1';
import { keccak_256 } from '@noble/hashes/sha3';
import type { Hex } from 'viem'; // types only: viem (~20 MB resident) stays out of every daemon that does not settle on chain

export const EIP712_NAME = 'node-svc escrow';
export const EIP712_VERSION = '1';
export const VOUCHER_TYPES = { Voucher: [{ name: 'channelId', type: 'bytes32' }, { name: 'cumulativeAmount', type: 'uint128' }] } as const;
export const UINT128_MAX = (1n << 128n) - 1n;
const HALF_N = secp256k1.CURVE.n >> 1n;

export interface EscrowTerms {
  chainId: number;
  escrow: Hex;
  channel: Hex;
}

export const voucherDomain = (t: EscrowTerms) => ({ name: EIP712_NAME, version: EIP712_VERSION, chainId: t.chainId, verifyingContract: t.escrow });

const keccak = (...parts: Uint8Array[]) => keccak_256(Buffer.concat(parts));
const utf8 = (s: string) => Buffer.from(s, 'utf8');
/** One 32-byte ABI word: an unsigned integer, or an address/bytes32 given as hex, left-padded. */
const word = (v: bigint | string) => Buffer.from((typeof v === 'bigint' ? v.toString(16) : v.replace(/^0x/, '')).padStart(64, '0'), 'hex');
const DOMAIN_TYPEHASH = keccak(utf8('EIP712Domain(string name,string version,uint256 chainId,address verifyingContract)'));
const VOUCHER_TYPEHASH = keccak(utf8('Voucher(bytes32 channelId,uint128 cumulativeAmount)'));
const NAME_HASH = keccak(utf8(EIP712_NAME));
const VERSION_HASH = keccak(utf8(EIP712_VERSION));

/** The EIP-712 digest of Voucher(channelId, cumulativeAmount) in the escrow's domain (the contract's _hashTypedDataV4). */
export function voucherDigest(t: EscrowTerms, cumulativeAmount: bigint): Hex {
  const domain = keccak(DOMAIN_TYPEHASH, NAME_HASH, VERSION_HASH, word(BigInt(t.chainId)), word(t.escrow.toLowerCase()));
  const struct = keccak(VOUCHER_TYPEHASH, word(t.channel.toLowerCase()), word(cumulativeAmount));
  return `0x${Buffer.from(keccak(Buffer.from([0x19, 0x01]), domain, struct)).toString('hex')}`;
}

/** The signer's address (lowercase 0x…), or a reason the signature is not acceptable. */
export function recoverVoucherSigner(t: EscrowTerms, cumulativeAmount: bigint, signature: string): { address: string } | { error: string } {
  if (!/^0x[0-9a-fA-F]{130}$/.test(signature)) return { error: 'signature must be 65 bytes of hex (r, s, v)' };
  const bytes = Buffer.from(signature.slice(2), 'hex');
  const r = BigInt(`0x${bytes.subarray(0, 32).toString('hex')}`);
  const s = BigInt(`0x${bytes.subarray(32, 64).toString('hex')}`);
  const v = bytes[64]!;
  // No 0/1 → 27/28 normalising: the contract's ECDSA.recover passes v to ecrecover as is, which refuses 0 and 1.
  if (v !== 27 && v !== 28) return { error: 'signature v must be 27 or 28' };
  if (s > HALF_N) return { error: 'high-s signature (not canonical)' };
  try {
    const digest = Buffer.from(voucherDigest(t, cumulativeAmount).slice(2), 'hex');
    const pub = new secp256k1.Signature(r, s).addRecoveryBit(v - 27).recoverPublicKey(digest).toRawBytes(false);
    const address = `0x${Buffer.from(keccak_256(pub.subarray(1))).subarray(12).toString('hex')}`;
    return { address };
  } catch {
    return { error: 'signature does not recover a key' };
  }
}

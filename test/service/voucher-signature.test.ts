// A JWS voucher's signature may be found good in the thread pool before the voucher is judged (service/streams.ts
// checkSignatureAhead); the judge trusts that only for the same voucher, the same stream key, and an answer made there.
import { describe, expect, it } from 'vitest';
import { checkJwsVoucher, type SignatureChecked } from '../../src/service/streams.js';
import type { StreamRow } from '../../src/store/streams.js';
import { keyPair, nowSeconds, signCompact } from '../helpers/issuer.js';

describe('JWS voucher signature', () => {
  it('a look-alike of the pool\'s answer does not stand in for the signature check', async () => {
    const payer = await keyPair('EdDSA', 'payer-1');
    const forger = await keyPair('EdDSA', 'payer-1');
    const row = { id: 's1', voucher_key: JSON.stringify({ jwk: payer.publicJwk }) } as StreamRow;
    const claims = { stream: 's1', amount: '1000', units: '40', iat: nowSeconds() };
    const good = signCompact({ alg: 'EdDSA', typ: 'voucher+jwt', kid: 'payer-1' }, claims, payer.privateKey);
    const forged = signCompact({ alg: 'EdDSA', typ: 'voucher+jwt', kid: 'payer-1' }, { ...claims, amount: '999999' }, forger.privateKey);
    expect(checkJwsVoucher(row, good)).toMatchObject({ stream: 's1', amount: 1000n });
    expect(() => checkJwsVoucher(row, forged)).toThrow(/signature does not verify/);
    // An object shaped like checkSignatureAhead's answer, made elsewhere: the signature is still checked.
    const lookalike: SignatureChecked = { voucher: forged, voucherKey: row.voucher_key, signed: { parts: forged.split('.') as [string, string, string], alg: 'EdDSA', key: payer.publicKey } };
    expect(() => checkJwsVoucher(row, forged, lookalike)).toThrow(/signature does not verify/);
  });
});

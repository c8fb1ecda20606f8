// The committed artifacts (src/rails/escrow/artifacts.ts) are what solc-js makes of the committed sources today:
// nobody can change Escrow.sol without regenerating the ABI and bytecode the daemon and sandbox deploy.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it, vi } from 'vitest';
import { artifactsModule, compile, SOURCE_DIR } from '../../src/rails/escrow/compile.js';
import { ESCROW_ABI, ESCROW_BYTECODE, TOKEN_ABI, TOKEN_BYTECODE } from '../../src/rails/escrow/artifacts.js';

vi.setConfig({ testTimeout: 120_000 });

describe('escrow artifacts', () => {
  const built = compile();

  it('compiles both contracts from src/rails/escrow/contracts', () => {
    expect(SOURCE_DIR.replace(/\\/g, '/')).toMatch(/src\/rails\/escrow\/contracts$/);
    expect(Object.keys(built).sort()).toEqual(['Escrow', 'TestToken']);
  });

  it('reproduces the committed ESCROW_ABI and ESCROW_BYTECODE exactly', () => {
    expect(built.Escrow!.abi).toEqual(ESCROW_ABI);
    expect(built.Escrow!.bytecode).toBe(ESCROW_BYTECODE);
    expect(ESCROW_BYTECODE).toMatch(/^0x[0-9a-f]{2000,}$/);
  });

  it('reproduces the committed TOKEN_ABI and TOKEN_BYTECODE exactly', () => {
    expect(built.TestToken!.abi).toEqual(TOKEN_ABI);
    expect(built.TestToken!.bytecode).toBe(TOKEN_BYTECODE);
    expect(TOKEN_BYTECODE).toMatch(/^0x[0-9a-f]{1000,}$/);
  });

  it('the committed module is byte for byte what compile.ts would write', () => {
    const committed = readFileSync(join(SOURCE_DIR, '..', 'artifacts.ts'), 'utf8');
    expect(committed).toBe(artifactsModule(built));
  });

  it('the ABI carries the functions, events and errors the rail and the tests rely on', () => {
    const names = (type: string) => ESCROW_ABI.filter((e) => e.type === type).map((e) => (e as { name: string }).name);
    expect(names('function')).toEqual(expect.arrayContaining(['open', 'deposit', 'settle', 'requestClose', 'withdraw', 'channels', 'closeGrace', 'domainSeparator']));
    expect(names('event')).toEqual(expect.arrayContaining(['ChannelOpened', 'Settled', 'CloseRequested', 'Withdrawn']));
    expect(names('error')).toEqual(expect.arrayContaining(['BadSigner', 'OverDeposit', 'GracePending', 'ChannelClosed', 'ECDSAInvalidSignatureS']));
  });
});

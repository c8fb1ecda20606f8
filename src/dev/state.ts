// The sandbox's own state (dev only): the dev issuer's and payer's keys, the node, the chain's contracts.
// Kept in <data-dir>/sandbox.json, mode 0600. Never used outside `node-svc dev`.
import { createPrivateKey, type KeyObject } from 'node:crypto';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { newEd25519KeyPair } from '../sdk/jws.js';

export const DEV_ISSUER = 'https://issuer.sandbox.node-svc.invalid';
export const DEV_NODE = 'dev-node';
export const DEV_KID = 'dev-issuer-1';

export interface SandboxState {
  issuer: { iss: string; kid: string; privateJwk: Record<string, unknown> };
  payer: { privateJwk: Record<string, unknown> };
  node: string;
  runs: number;
  chain?: { escrow: `0x${string}`; token: `0x${string}` };
}

export const statePath = (dataDir: string) => join(dataDir, 'sandbox.json');

export function loadState(dataDir: string): SandboxState | undefined {
  const p = statePath(dataDir);
  return existsSync(p) ? (JSON.parse(readFileSync(p, 'utf8')) as SandboxState) : undefined;
}

export function saveState(dataDir: string, s: SandboxState): void {
  writeFileSync(statePath(dataDir), `${JSON.stringify(s, null, 2)}\n`, { mode: 0o600 });
}

export function newState(): SandboxState {
  const jwk = (k: KeyObject) => k.export({ format: 'jwk' }) as Record<string, unknown>;
  return {
    issuer: { iss: DEV_ISSUER, kid: DEV_KID, privateJwk: jwk(newEd25519KeyPair().privateKey) },
    payer: { privateJwk: jwk(newEd25519KeyPair().privateKey) },
    node: DEV_NODE,
    runs: 0,
  };
}

export const keyOf = (privateJwk: Record<string, unknown>) => createPrivateKey({ key: privateJwk as never, format: 'jwk' });

/** The public half of a private Ed25519 JWK. */
export const publicJwk = (privateJwk: Record<string, unknown>) => ({ kty: privateJwk.kty, crv: privateJwk.crv, x: privateJwk.x });

// What every gateway plugin shares: read the credential, verify it offline, build the 402 answer,
// and (optionally) forward vouchers to the daemon off the request path.
import type { ValidCredential } from '../../domain/credential.js';
import type { KeySet } from '../keys.js';
import { Verifier } from '../verifier.js';

export interface GatewayOptions {
  keys: KeySet | KeySet[];
  /** The node id credentials must be aimed at. */
  audience: string;
  /** Header carrying the credential (default `authorization`, value `Allowance <jws>`). */
  header?: string;
  /** Scheme before the JWS in that header (default `Allowance`; empty string: the whole value). */
  scheme?: string;
  clockTolerance?: number;
  /** Forward vouchers found in `voucherHeader` (default `x-allowance-voucher`) to the daemon, asynchronously. */
  forwardVouchers?: { url: string; token: string; voucherHeader?: string; maxQueue?: number; onError?: (err: unknown) => void };
}

export interface Refusal402 {
  status: 402;
  headers: Record<string, string>;
  body: { type: string; title: string; status: 402; detail: string; code: 'credential_refused'; valid: false; refusal: string };
}

export type GuardResult = { ok: true; allowance: ValidCredential } | { ok: false; response: Refusal402 };

export function createGuard(opts: GatewayOptions) {
  if (!opts?.keys || !opts.audience) throw new TypeError('gateway needs { keys, audience }');
  const header = (opts.header ?? 'authorization').toLowerCase();
  const scheme = opts.scheme ?? 'Allowance';
  const verifier = new Verifier({ keys: opts.keys, ...(opts.clockTolerance !== undefined ? { clockTolerance: opts.clockTolerance } : {}) });
  const forwarder = opts.forwardVouchers ? createForwarder(opts.forwardVouchers) : undefined;

  const refuse = (refusal: string, detail: string): GuardResult => ({
    ok: false,
    response: {
      status: 402,
      headers: { 'content-type': 'application/problem+json', 'www-authenticate': `${scheme || 'Allowance'} realm="node-svc"` },
      body: { type: 'urn:node-svc:problem:credential_refused', title: 'Payment Required', status: 402, detail, code: 'credential_refused', valid: false, refusal },
    },
  });

  return {
    header,
    voucherHeader: (opts.forwardVouchers?.voucherHeader ?? 'x-allowance-voucher').toLowerCase(),
    check(value: string | undefined | null, voucher?: string | null): GuardResult {
      if (!value) return refuse('malformed', `no credential: send ${header}: ${scheme ? `${scheme} ` : ''}<jws>`);
      let jws = value.trim();
      if (scheme) {
        const sp = jws.indexOf(' ');
        if (sp < 0 || jws.slice(0, sp).toLowerCase() !== scheme.toLowerCase()) return refuse('malformed', `${header} must be "${scheme} <jws>"`);
        jws = jws.slice(sp + 1).trim();
      }
      const r = verifier.verify(jws, { audience: opts.audience });
      if (!r.valid) return refuse(r.refusal, r.detail);
      if (voucher && forwarder) forwarder.push(r.stream, voucher, jws);
      return { ok: true, allowance: r };
    },
    close: () => forwarder?.close(),
  };
}

/** A bounded queue of vouchers sent to POST /v1/streams/{id}/vouchers one at a time, never on the request path. */
function createForwarder(o: NonNullable<GatewayOptions['forwardVouchers']>) {
  const queue: Array<{ stream: string; voucher: string; credential: string }> = [];
  const max = o.maxQueue ?? 10_000;
  let running = false;
  let closed = false;
  async function drain() {
    running = true;
    while (queue.length && !closed) {
      const v = queue.shift()!;
      try {
        const res = await fetch(`${o.url.replace(/\/+$/, '')}/v1/streams/${encodeURIComponent(v.stream)}/vouchers`, {
          method: 'POST',
          headers: { authorization: `Bearer ${o.token}`, 'content-type': 'application/json' },
          body: JSON.stringify({ voucher: v.voucher, credential: v.credential }),
          signal: AbortSignal.timeout(10_000),
        });
        await res.arrayBuffer();
        if (!res.ok) o.onError?.(new Error(`voucher forward answered HTTP ${res.status}`));
      } catch (err) {
        o.onError?.(err);
      }
    }
    running = false;
  }
  return {
    push(stream: string, voucher: string, credential: string) {
      if (closed) return;
      if (queue.length >= max) queue.shift(); // newest vouchers supersede older ones (cumulative amounts)
      queue.push({ stream, voucher, credential });
      if (!running) void drain();
    },
    close() {
      closed = true;
    },
  };
}

// zod schemas: they validate requests, type handlers and generate /openapi.json (never hand-edited).
import { z } from '@hono/zod-openapi';
import { EVENT_KIND_LIST, HALT_REASONS, SCHEMA_VERSIONS } from '../domain/events.js';
import { REFUSALS, VOUCHER_REFUSALS, CONTROL_REFUSALS, REQUEST_REFUSALS } from '../domain/refusals.js';
import { STAGES } from '../domain/stages.js';
import { NO_CONTROL_PATTERN } from '../domain/text.js';

/** Free text that an operator will read on a terminal: no control characters (the pattern is in the document too). */
export const noControl = (s: z.ZodString) => s.regex(new RegExp(NO_CONTROL_PATTERN), { message: 'must not contain control characters' });

export const Micro = z.string().max(78).regex(/^(0|[1-9][0-9]*)$/).openapi({ description: 'Micro units of the asset, a decimal string (never a float)', example: '1500000' });
const Time = z.string().openapi({ description: 'RFC 3339 UTC with milliseconds', example: '2026-11-21T10:00:00.000Z' });

export const Problem = z
  .object({
    type: z.string(),
    title: z.string(),
    status: z.number().int(),
    detail: z.string(),
    code: z.enum(['unauthorized', 'not_found', 'method_not_allowed', 'invalid_request', 'payload_too_large', 'unsupported_media_type', 'rate_limited', 'limit_exceeded', 'credential_refused', 'voucher_refused', 'control_refused', 'request_refused', 'not_final', 'conflict', 'internal', 'unavailable']),
    refusal: z.string().optional().openapi({ description: 'For *_refused: the named refusal' }),
    valid: z.literal(false).optional(),
    issues: z.array(z.object({ path: z.string(), message: z.string() })).optional(),
    limit: z.enum(['subscriptions', 'redeliveries']).optional().openapi({ description: 'For limit_exceeded: which per-node limit is full' }),
    max: z.number().int().optional().openapi({ description: 'For limit_exceeded: the limit' }),
    retryAfterSeconds: z.number().int().optional().openapi({ description: 'For 429: seconds to wait (also in Retry-After)' }),
  })
  .openapi('Problem', { description: 'RFC 9457 problem details (application/problem+json)' });

export const problemResponses = (...statuses: number[]) =>
  Object.fromEntries(
    statuses.map((s) => [
      s,
      { description: PROBLEM_DESCRIPTIONS[s] ?? 'Error', content: { 'application/problem+json': { schema: s === 422 ? RefusalProblem : Problem } } },
    ]),
  );
const PROBLEM_DESCRIPTIONS: Record<number, string> = {
  400: 'invalid_request: the request does not match this document (malformed JSON or UTF-8, missing or unknown fields, unknown query parameters, a value outside its schema; each named)',
  401: 'Missing, unknown or revoked bearer token',
  404: 'Unknown, or owned by another node (never 403)',
  413: 'Body over 64 KiB',
  415: 'Body is not application/json',
  422: 'A named refusal',
  429: 'Rate limited (rate_limited, see Retry-After), or a per-node limit is full (limit_exceeded: subscriptions, or redeliveries pending)',
  503: "The stream's rail (chain RPC, card processor) cannot be read now: retry after Retry-After; never a payable answer",
};
export const RefusalProblem = Problem.extend({ refusal: z.string() }).openapi('RefusalProblem');

/** 422 request_refused: the request matches the document; a rule the document names refuses it (`refusal` names which). */
export const RequestRefusal = RefusalProblem.extend({ code: z.literal('request_refused'), refusal: z.enum(REQUEST_REFUSALS) }).openapi('RequestRefusal');
export const requestRefusedResponse = (rules: string) => ({
  422: {
    description: `request_refused: the request matches this document and a rule it names refuses it; \`refusal\` says which (${rules})`,
    content: { 'application/problem+json': { schema: RequestRefusal } },
  },
});

export const VerifyRequest = z
  .strictObject({
    credential: z.string().min(1).max(65536).openapi({
      description: 'The allowance credential (compact JWS) as presented; whitespace around it is trimmed (as the CLI and SDK do). ' +
        'Over 16 KiB, or a header or payload repeating a member name, is refused as malformed (422).',
    }),
  })
  .openapi('VerifyRequest');
export const ValidCredential = z
  .object({
    valid: z.literal(true),
    credentialId: z.string(),
    issuer: z.string(),
    payer: z.string(),
    node: z.string(),
    stream: z.string(),
    budget: z.string(),
    capMicro: Micro,
    asset: z.string(),
    unitPriceMicro: Micro,
    rateMicroPerSecond: Micro.nullable(),
    mode: z.enum(['escrow', 'card']),
    issuedAt: Time,
    expiresAt: Time,
    escrow: z
      .object({ chainId: z.number().int(), contract: z.string(), channel: z.string(), payerAddress: z.string() })
      .optional()
      .openapi({ description: 'Escrow mode (cnf.addr): the contract, chain and channel its EIP-712 vouchers are redeemable on' }),
  })
  .openapi('ValidCredential');
export const CredentialRefusal = RefusalProblem.extend({ valid: z.literal(false), refusal: z.enum(REFUSALS) }).openapi('CredentialRefusal');

export const StreamId = z.object({ id: z.string().min(1).max(256).openapi({ param: { name: 'id', in: 'path' }, example: 'stream-42' }) });

const StreamStatus = z.enum(['open', 'exhausted', 'revoked', 'expired', 'budget_halted', 'budget_released', 'unfunded']).openapi({
  description: "unfunded: the credential's funding source cannot pay this node (escrow channel missing, closed, paying another wallet, funded by another payer or in another token, or already backing another stream; card authorization unusable); `reason` names what differs",
});
/** Added in contract 1.4.0 (additive): what a stream is made of. */
const StreamSource = z.enum(['credential', 'x402']).openapi({
  description: 'Added in 1.4.0: `credential` (an allowance credential and its vouchers) or `x402` (x402 payments settled by this daemon as facilitator, ' +
    'stream x402-<payer>-<resource hash>, budget x402: no credential behind it, every request paid by its own authorization, so nothing is authorized ' +
    'ahead: cap = billed, remaining 0, stage halted, never payable by voucher)',
});
export const StreamVerify = z.object({ stream: z.string(), open: z.boolean(), payable: z.boolean(), status: StreamStatus, reason: z.string().nullable(), source: StreamSource }).openapi('StreamVerify');

export const Headroom = z
  .object({
    stream: z.string(),
    asset: z.string(),
    source: StreamSource,
    capMicro: Micro.openapi({ description: "The credential's cap (x402: what was paid)" }),
    effectiveCapMicro: Micro.openapi({ description: 'The smaller of the cap and what the funding source can pay in all (escrow: the channel deposit); remaining cap, units and stage use it' }),
    fundedMicro: Micro.nullable().openapi({ description: 'What the funding source can pay in all, as last read on the rail (null: the credential names no funding source)' }),
    billedMicro: Micro,
    remainingCapMicro: Micro,
    unitPriceMicro: Micro.openapi({ description: 'x402: the newest payment (the price of one request)' }),
    remainingUnits: Micro.openapi({ description: 'remaining cap ÷ unit price, floored' }),
    rate: z.object({ limitMicroPerSecond: Micro.nullable(), observedMicroPerSecond: Micro }),
    degradationStage: z.enum(STAGES),
    status: StreamStatus,
    asOf: Time,
  })
  .openapi('Headroom');

const Finality = z.enum(['none', 'checkpointed', 'final']);
export const FinalityView = z
  .object({
    stream: z.string(),
    asset: z.string(),
    source: StreamSource,
    finality: Finality.openapi({ description: 'Finality of the settled frontier; only "final" is a credit signal' }),
    finalMicro: Micro.openapi({ description: 'The credit-safe amount' }),
    checkpointedMicro: Micro,
    frontier: z.object({ amountMicro: Micro, finality: Finality, reference: z.string().nullable(), checkpointedAt: Time.nullable(), finalAt: Time.nullable() }),
    billedTruth: z.object({
      amountMicro: Micro.openapi({ description: 'x402: the payments sent (failed ones and claims not sent excluded)' }),
      units: Micro.openapi({ description: 'x402: the number of payments sent' }),
      signedAt: Time.nullable(), voucher: z.string().nullable().openapi({ description: 'The last signed voucher (x402: null)' }),
    }),
    unsettledMicro: Micro,
    funding: z.object({
      status: z.enum(['none', 'pending', 'funded', 'unfunded']).openapi({ description: 'none: the credential names no funding source; pending: not read on the rail yet' }),
      reason: z.string().nullable(),
      fundedMicro: Micro.nullable().openapi({ description: 'What the funding source can pay in all, as last read (escrow: the channel deposit)' }),
    }),
    settlement: z
      .object({
        amountMicro: Micro.openapi({ description: 'Cumulative amount this settlement brings the frontier to' }),
        status: z.enum(['pending', 'submitted', 'checkpointed', 'failed']),
        reference: z.string().nullable().openapi({ description: 'Escrow: the settle transaction hash (the latest replacement); card: the balance transaction or PaymentIntent' }),
        createdAt: Time,
        submittedAt: Time.nullable(),
        attempts: z.number().int().openapi({ description: 'Broadcasts: the first send, rebroadcasts and fee-bumped replacements' }),
        lastError: z.string().nullable(),
        stuck: z.boolean().openapi({ description: 'Sent but not mined (captured) for longer than the stuck limit' }),
        payment: z.string().optional().openapi({ description: 'Added in 1.4.0, x402 streams only: the payment (x4p_…); attempts counts its broadcasts, fee-bumped replacements included' }),
      })
      .nullable()
      .openapi({ description: 'The newest settlement while it is not final (null when none is): a settlement not progressing shows here (x402: the newest payment not final)' }),
    x402: z.object({ payer: z.string(), resource: z.string(), payments: z.number().int() }).optional()
      .openapi({ description: 'Added in 1.4.0, x402 streams only: the payer, the resource URL, and the payments sent' }),
    reason: z.string().nullable().openapi({ description: 'Why the billed truth is not final yet (e.g. "no escrow channel in the credential"); null when all of it is final' }),
    asOf: Time,
  })
  .openapi('Finality');

export const StreamSummary = z
  .object({
    stream: z.string(), budget: z.string(), payer: z.string(), issuer: z.string().openapi({ description: 'x402 streams: "x402"' }), mode: z.enum(['escrow', 'card']), asset: z.string(),
    source: StreamSource,
    status: StreamStatus, degradationStage: z.enum(STAGES), capMicro: Micro, billedMicro: Micro, remainingCapMicro: Micro,
    finality: Finality, finalMicro: Micro, unsettledMicro: Micro, expiresAt: Time,
    checkpointedMicro: Micro.openapi({ description: 'Settled and visible, not yet final (pending information, not a credit signal)' }),
    lastActivityAt: Time.openapi({ description: 'Last change: voucher, renewal, status or settlement (what sort=activity orders by)' }),
  })
  .openapi('StreamSummary');
export const StreamList = z.object({ data: z.array(StreamSummary), nextCursor: z.string().nullable() }).openapi('StreamList');
export const Paging = z.object({
  cursor: z.string().max(1024).optional().openapi({ param: { name: 'cursor', in: 'query', description: 'Opaque: the nextCursor of a previous page of the same sort; any other is 422 `cursor_unknown`' } }),
  limit: z.coerce.number().int().min(1).max(500).default(100).openapi({ param: { name: 'limit', in: 'query' } }),
});
export const StreamListQuery = Paging.extend({
  status: z.enum(['open', 'closed', 'all']).default('all').openapi({
    param: { name: 'status', in: 'query' },
    description: 'open: payable standing; closed: revoked, exhausted, budget halted or released, or expired; all (default)',
  }),
  sort: z.enum(['id', 'activity']).default('id').openapi({
    param: { name: 'sort', in: 'query' },
    description: 'id (default, ascending) or activity (most recent change first); the cursor belongs to the sort it came from',
  }),
});

export const Eip712Voucher = z
  .strictObject({ stream: z.string().min(1).max(256), amount: Micro, units: Micro, signature: z.string().regex(/^0x[0-9a-fA-F]{130}$/) })
  .openapi('Eip712Voucher', { description: 'Escrow mode: EIP-712 Voucher(bytes32 channelId, uint128 cumulativeAmount) signed by cnf.addr' });
export const VoucherRequest = z
  .strictObject({
    voucher: z.union([z.string().min(1).max(16384).openapi({ description: 'JWS voucher (typ voucher+jwt) signed by cnf.jwk' }), Eip712Voucher]),
    credential: z.string().min(1).max(16384).optional().openapi({ description: "Registers the stream if the daemon has not seen it (e.g. verified offline by a gateway)" }),
  })
  .openapi('VoucherRequest');
export const VoucherAccepted = z
  .object({
    accepted: z.boolean(),
    reason: z.literal('stale').optional(),
    stream: z.string(),
    billedMicro: Micro,
    billedUnits: Micro,
    remainingCapMicro: Micro.optional(),
    exhausted: z.boolean().optional(),
    voucherHash: z.string().optional(),
  })
  .openapi('VoucherResult');
export const VoucherRefusal = RefusalProblem.extend({ refusal: z.enum(VOUCHER_REFUSALS) }).openapi('VoucherRefusal');

export const ControlRequest = z.strictObject({ message: z.string().min(1).max(16384).openapi({ description: 'Control fact: compact JWS, typ control+jwt, signed by a trusted issuer key' }) }).openapi('ControlRequest');
export const ControlResult = z.object({ applied: z.boolean(), duplicate: z.boolean(), kind: z.string(), eventId: z.string() }).openapi('ControlResult');
export const ControlRefusal = RefusalProblem.extend({ refusal: z.enum(CONTROL_REFUSALS) }).openapi('ControlRefusal');

// ---- events (the webhook contract, also under top-level `webhooks`) ----
const money = { asset: z.string(), amountMicro: Micro };
const X402EventData = z.object({
  payment: z.string(), payer: z.string(), resource: z.string(), paidMicro: Micro,
}).optional().openapi({ description: 'Added in contract 1.3.0 (additive): on an x402 payment\'s settlement (stream x402-<payer>-<resource hash>, budget x402), the payment it moved, its payer, resource URL and amount; amountMicro is the stream\'s cumulative amount' });
export const EVENT_DATA = {
  'settlement.checkpointed': z.object({ stream: z.string(), budget: z.string(), ...money, reference: z.string(), x402: X402EventData }),
  'settlement.final': z.object({
    stream: z.string(), budget: z.string(), ...money, reference: z.string(), x402: X402EventData,
    receipt: z.string().optional().openapi({
      description: 'Added in contract 1.2.0 (additive; the event schema stays 1.1.0): the signed settlement receipt, a compact JWS (EdDSA, typ node-svc-receipt+jwt) ' +
        'to check offline against GET /v1/receipts/jwks.json (`node-svc receipts verify`, SDK verifyReceipt). Absent on events recorded before receipts existed',
    }),
  }),
  'capture.created': z.object({ stream: z.string(), budget: z.string(), ...money, reference: z.string() }),
  'refund.final': z.object({ stream: z.string(), budget: z.string(), ...money, reference: z.string() }),
  'stream.revoked': z.object({ stream: z.string(), budget: z.string().optional(), reason: z.string().optional() }),
  'stream.exhausted': z.object({ stream: z.string(), budget: z.string(), asset: z.string(), capMicro: Micro, billedMicro: Micro }),
  'budget.released': z.object({ budget: z.string(), asset: z.string().optional(), amountMicro: Micro.optional() }),
  'budget.halted': z.object({ budget: z.string(), reason: z.enum(HALT_REASONS) }),
  'subscription.period_opened': z.object({ subscription: z.string(), period: z.number().int(), periodStart: Time.optional(), periodEnd: Time.optional() }),
  'subscription.renewal_declined': z.object({ subscription: z.string(), period: z.number().int() }),
  'subscription.closed': z.object({ subscription: z.string(), period: z.number().int() }),
} as const;

export const envelopeOf = (kind: keyof typeof EVENT_DATA) =>
  z.object({
    id: z.string().openapi({ description: 'Stable event id (evt_ + ULID); equals x-service-event-id; the idempotency key' }),
    type: z.literal(kind),
    schemaVersion: z.enum(SCHEMA_VERSIONS),
    occurredAt: Time,
    externalRef: z.string().openapi({ description: 'stream:<id>, budget:<id> or subscription:<id>' }),
    data: EVENT_DATA[kind],
  });
export const Envelope = z
  .object({ id: z.string(), type: z.enum(EVENT_KIND_LIST as [string, ...string[]]), schemaVersion: z.enum(SCHEMA_VERSIONS), occurredAt: Time, externalRef: z.string(), data: z.record(z.string(), z.unknown()) })
  .openapi('EventEnvelope');

// ---- receipts ----
export const ReceiptJwk = z
  .object({ kty: z.literal('OKP'), crv: z.literal('Ed25519'), x: z.string(), kid: z.string(), alg: z.literal('EdDSA'), use: z.literal('sig') })
  .openapi('ReceiptJwk', { description: 'A public receipt key (never a private member)' });
export const ReceiptJwks = z.object({ keys: z.array(ReceiptJwk) }).openapi('ReceiptJwks', {
  description: 'The daemon receipt keys that are not retired: the active one and rotated ones (their receipts still verify)',
});
export const StreamReceipt = z
  .object({
    stream: z.string(),
    amountMicro: Micro.openapi({ description: 'The cumulative amount the receipt says is final (the highest final settlement)' }),
    finalAt: Time,
    kid: z.string().openapi({ description: 'The receipt key that signed it' }),
    receipt: z.string().openapi({
      description: 'Compact JWS, header {alg: EdDSA, typ: node-svc-receipt+jwt, kid}; claims iss, iat, jti (the settlement id), node, stream, asset, ' +
        'amountMicro, finalAt, rail (escrow | card) and escrow {chainId, contract, txHash, blockNumber, channel?} or card {processor, captureId, paymentIntent?, account?}',
    }),
  })
  .openapi('StreamReceipt');

// ---- x402 facilitator (issue #24): x402 v2's shapes, field for field (@x402/core 2.27.0 types) ----
const X402Requirements = z.object({
  scheme: z.string().openapi({ example: 'exact' }),
  network: z.string().openapi({ description: 'CAIP-2, e.g. eip155:1337', example: 'eip155:1337' }),
  amount: z.string().openapi({ description: 'Atomic units of the asset (the token has 6 decimals: micro units)', example: '1000' }),
  asset: z.string().openapi({ description: 'The token contract (must be --asset-token)' }),
  payTo: z.string().openapi({ description: "The daemon's wallet" }),
  maxTimeoutSeconds: z.number(),
  extra: z.record(z.string(), z.unknown()).optional().openapi({ description: 'EIP-712 domain of the token: name, version' }),
}).openapi('X402PaymentRequirements');
/** A version number in a request: an integer the document bounds (JSON numbers past 2^53 are not exact). */
const X402Version = z.number().int().min(0).max(Number.MAX_SAFE_INTEGER).openapi({ description: 'x402 protocol version (this facilitator serves 2)', example: 2 });
const X402Payload = z.object({
  x402Version: X402Version,
  resource: z.object({ url: z.string(), description: z.string().optional(), mimeType: z.string().optional() }).optional(),
  accepted: X402Requirements,
  payload: z.record(z.string(), z.unknown()).openapi({ description: 'exact on EVM: {signature, authorization {from, to, value, validAfter, validBefore, nonce}} (EIP-3009)' }),
  extensions: z.record(z.string(), z.unknown()).optional(),
}).openapi('X402PaymentPayload');
export const X402Request = z.object({ x402Version: X402Version, paymentPayload: X402Payload, paymentRequirements: X402Requirements }).openapi('X402Request');
export const X402VerifyResponse = z.object({
  isValid: z.boolean(),
  invalidReason: z.string().optional().openapi({ description: "x402's named reason (e.g. invalid_exact_evm_recipient_mismatch, invalid_network, invalid_exact_evm_nonce_already_used)" }),
  invalidMessage: z.string().optional(),
  payer: z.string().optional(),
}).openapi('X402VerifyResponse');
export const X402SettleResponse = z.object({
  success: z.boolean().openapi({ description: 'true only once the transaction is mined (settlement.checkpointed); final is the settlement.final event' }),
  errorReason: z.string().optional().openapi({ description: "x402's named reason; settlement_pending: sent and not mined yet (transaction names it)" }),
  errorMessage: z.string().optional(),
  payer: z.string().optional(),
  transaction: z.string().openapi({ description: 'Transaction hash; empty when nothing was sent' }),
  network: z.string(),
  amount: z.string().optional(),
}).openapi('X402SettleResponse');
export const X402SupportedResponse = z.object({
  kinds: z.array(z.object({ x402Version: z.number().int(), scheme: z.string(), network: z.string(), extra: z.record(z.string(), z.unknown()).optional() })),
  extensions: z.array(z.string()),
  signers: z.record(z.string(), z.array(z.string())),
}).openapi('X402SupportedResponse');

/** Every name a credential verify may refuse with (DESIGN §4). The first ten are offline; the rest need live state. */
export const OFFLINE_REFUSALS = [
  'malformed',
  'unsupported_algorithm',
  'unknown_key',
  'bad_signature',
  'wrong_type',
  'untrusted_issuer',
  'wrong_audience',
  'expired',
  'not_yet_valid',
  'missing_claim',
] as const;
// unfunded: the credential's funding source (escrow channel, card authorization) cannot pay this node (DESIGN §14).
export const LIVE_REFUSALS = ['revoked', 'exhausted', 'budget_halted', 'unfunded'] as const;
export const REFUSALS = [...OFFLINE_REFUSALS, ...LIVE_REFUSALS] as const;
export type Refusal = (typeof REFUSALS)[number];

/** Voucher refusals (POST /v1/streams/{id}/vouchers). */
export const VOUCHER_REFUSALS = ['malformed', 'bad_signature', 'wrong_stream', 'over_cap', 'not_monotone', 'not_payable'] as const;
export type VoucherRefusal = (typeof VOUCHER_REFUSALS)[number];

/** Control message refusals (POST /v1/control). */
export const CONTROL_REFUSALS = [
  'malformed',
  'unsupported_algorithm',
  'unknown_key',
  'bad_signature',
  'wrong_type',
  'untrusted_issuer',
  'wrong_audience',
  'expired',
  'not_yet_valid',
  'unknown_kind',
  'missing_claim',
  'replayed',
] as const;
export type ControlRefusal = (typeof CONTROL_REFUSALS)[number];

/**
 * Request refusals (422 `request_refused`): the request matches the OpenAPI document, and a rule the document names
 * refuses it. cursor_unknown: a `cursor` this API never gave out (or one of another `sort`); cursor_with_since: both
 * `cursor` and `since` on GET /v1/events; since_invalid: a `since` of the documented shape that is not a real time;
 * kind_not_in_schema_version: an `events` filter naming a kind the subscription's `schemaVersion` does not have;
 * url_invalid: a webhook `url` that is not an absolute http(s) URL without userinfo or fragment (or too long once
 * normalised); url_target_refused: a webhook `url` whose IP the daemon's target policy refuses.
 */
export const REQUEST_REFUSALS = ['cursor_unknown', 'cursor_with_since', 'since_invalid', 'kind_not_in_schema_version', 'url_invalid', 'url_target_refused'] as const;
export type RequestRefusal = (typeof REQUEST_REFUSALS)[number];

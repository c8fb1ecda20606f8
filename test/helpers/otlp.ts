// A local OTLP/HTTP traces receiver (POST /v1/traces) for the tracing tests: node:http on 127.0.0.1, answering 200,
// decoding what the daemon's exporter sends, in JSON (http/json) or protobuf (http/protobuf, the default: a minimal
// wire-format reader for the fields the tests look at), into one plain shape.
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';

export type AttrMap = Record<string, string | number | boolean>;

export interface ReceivedSpan {
  name: string;
  /** OTLP SpanKind: 1 internal, 2 server, 3 client. */
  kind: number;
  traceId: string;
  spanId: string;
  /** '' for a root span. */
  parentSpanId: string;
  attributes: AttrMap;
  links: Array<{ traceId: string; spanId: string }>;
  /** OTLP StatusCode: 0 unset, 1 ok, 2 error. */
  status: { code: number; message: string };
  resource: AttrMap;
}

export interface OtlpReceiver {
  url: string;
  spans: ReceivedSpan[];
  /** Every request body as received (to look for secrets in the raw bytes too). */
  bodies: Buffer[];
  contentTypes: string[];
  close(): Promise<void>;
}

export const SPAN_KIND = { internal: 1, server: 2, client: 3 } as const;

export async function startOtlpReceiver(): Promise<OtlpReceiver> {
  const spans: ReceivedSpan[] = [];
  const bodies: Buffer[] = [];
  const contentTypes: string[] = [];
  const server: Server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const body = Buffer.concat(chunks);
      const type = String(req.headers['content-type'] ?? '');
      bodies.push(body);
      contentTypes.push(type);
      if (req.method !== 'POST' || req.url !== '/v1/traces') return void res.writeHead(404).end();
      try {
        spans.push(...(type.includes('json') ? fromJson(JSON.parse(body.toString('utf8'))) : fromProtobuf(body)));
      } catch (err) {
        res.writeHead(400, { 'content-type': 'text/plain' }).end(String(err));
        return;
      }
      res.writeHead(200, { 'content-type': type.includes('json') ? 'application/json' : 'application/x-protobuf' }).end(type.includes('json') ? '{}' : '');
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const port = (server.address() as AddressInfo).port;
  return {
    url: `http://127.0.0.1:${port}`,
    spans,
    bodies,
    contentTypes,
    close: () => new Promise<void>((r) => { server.closeAllConnections(); server.close(() => r()); }),
  };
}

// ---- http/json ----

type JsonAny = { stringValue?: string; boolValue?: boolean; intValue?: number | string; doubleValue?: number };
type JsonKv = { key: string; value: JsonAny };

const jsonAttrs = (kvs: JsonKv[] | undefined): AttrMap => {
  const out: AttrMap = {};
  for (const { key, value } of kvs ?? []) {
    if (value.stringValue !== undefined) out[key] = value.stringValue;
    else if (value.boolValue !== undefined) out[key] = value.boolValue;
    else if (value.intValue !== undefined) out[key] = Number(value.intValue);
    else if (value.doubleValue !== undefined) out[key] = value.doubleValue;
  }
  return out;
};

function fromJson(req: any): ReceivedSpan[] {
  const out: ReceivedSpan[] = [];
  for (const rs of req.resourceSpans ?? []) {
    const resource = jsonAttrs(rs.resource?.attributes);
    for (const ss of rs.scopeSpans ?? [])
      for (const s of ss.spans ?? [])
        out.push({
          name: s.name, kind: s.kind, traceId: s.traceId, spanId: s.spanId, parentSpanId: s.parentSpanId ?? '',
          attributes: jsonAttrs(s.attributes), links: (s.links ?? []).map((l: any) => ({ traceId: l.traceId, spanId: l.spanId })),
          status: { code: s.status?.code ?? 0, message: s.status?.message ?? '' }, resource,
        });
  }
  return out;
}

// ---- http/protobuf: ExportTraceServiceRequest, the fields used here ----

type Field = { no: number; wire: number; varint?: bigint; bytes?: Buffer };

function fields(buf: Buffer): Field[] {
  const out: Field[] = [];
  let i = 0;
  const varint = (): bigint => {
    let v = 0n;
    let shift = 0n;
    for (;;) {
      if (i >= buf.length) throw new Error('truncated varint');
      const b = buf[i++]!;
      v |= BigInt(b & 0x7f) << shift;
      if (!(b & 0x80)) return v;
      shift += 7n;
    }
  };
  while (i < buf.length) {
    const key = Number(varint());
    const no = key >> 3;
    const wire = key & 7;
    if (wire === 0) out.push({ no, wire, varint: varint() });
    else if (wire === 1) { out.push({ no, wire, bytes: buf.subarray(i, i + 8) }); i += 8; }
    else if (wire === 5) { out.push({ no, wire, bytes: buf.subarray(i, i + 4) }); i += 4; }
    else if (wire === 2) {
      const len = Number(varint());
      out.push({ no, wire, bytes: buf.subarray(i, i + len) });
      i += len;
    } else throw new Error(`unsupported wire type ${wire}`);
  }
  return out;
}

const all = (fs: Field[], no: number) => fs.filter((f) => f.no === no);
const one = (fs: Field[], no: number) => fs.find((f) => f.no === no);
const str = (f: Field | undefined) => f?.bytes?.toString('utf8') ?? '';
const hex = (f: Field | undefined) => f?.bytes?.toString('hex') ?? '';

function pbAttrs(kvs: Field[]): AttrMap {
  const out: AttrMap = {};
  for (const kv of kvs) {
    const f = fields(kv.bytes!);
    const v = fields(one(f, 2)?.bytes ?? Buffer.alloc(0));
    const key = str(one(f, 1));
    const s = one(v, 1);
    const b = one(v, 2);
    const n = one(v, 3);
    const d = one(v, 4);
    if (s) out[key] = str(s);
    else if (b) out[key] = b.varint === 1n;
    else if (n) out[key] = Number(BigInt.asIntN(64, n.varint!));
    else if (d) out[key] = d.bytes!.readDoubleLE(0);
  }
  return out;
}

function fromProtobuf(body: Buffer): ReceivedSpan[] {
  const out: ReceivedSpan[] = [];
  for (const rs of all(fields(body), 1)) {
    const r = fields(rs.bytes!);
    const resource = pbAttrs(all(fields(one(r, 1)?.bytes ?? Buffer.alloc(0)), 1));
    for (const ss of all(r, 2))
      for (const sp of all(fields(ss.bytes!), 2)) {
        const s = fields(sp.bytes!);
        const st = fields(one(s, 15)?.bytes ?? Buffer.alloc(0));
        out.push({
          name: str(one(s, 5)), kind: Number(one(s, 6)?.varint ?? 0n), traceId: hex(one(s, 1)), spanId: hex(one(s, 2)), parentSpanId: hex(one(s, 4)),
          attributes: pbAttrs(all(s, 9)),
          links: all(s, 13).map((l) => { const lf = fields(l.bytes!); return { traceId: hex(one(lf, 1)), spanId: hex(one(lf, 2)) }; }),
          status: { code: Number(one(st, 3)?.varint ?? 0n), message: str(one(st, 2)) }, resource,
        });
      }
  }
  return out;
}

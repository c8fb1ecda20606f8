// Hono POST (our body middleware + a zod-validated route via OpenAPIHono) vs raw node:http POST; CPU per request of the server.
import { spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import autocannon from 'autocannon';
const mode = process.argv[2];
if (mode === 'hono' || mode === 'raw') {
  const body = JSON.stringify({ ok: true, billedMicro: '12345', stream: 's-1' });
  if (mode === 'hono') {
    const { OpenAPIHono, createRoute, z } = await import('@hono/zod-openapi');
    const { serve } = await import('@hono/node-server');
    const { jsonBody } = await import('../dist/api/middleware/body.js');
    const app = new OpenAPIHono();
    app.use('/v1/*', async (c, next) => { await next(); });
    app.use('/v1/*', async (c, next) => { await next(); });
    app.use('/v1/*', jsonBody());
    app.openapi(createRoute({ method: 'post', path: '/v1/streams/{id}/vouchers', request: { params: z.object({ id: z.string() }), body: { required: true, content: { 'application/json': { schema: z.object({ voucher: z.string(), credential: z.string().optional() }).strict() } } } }, responses: { 200: { description: 'ok' } } }),
      (c) => { const b = c.req.valid('json'); return c.json({ ok: true, billedMicro: '12345', stream: c.req.valid('param').id, n: b.voucher.length }, 200); });
    serve({ fetch: app.fetch, hostname: '127.0.0.1', port: 0 }, (info) => process.stdout.write(`listening ${info.port}\n`));
  } else {
    const http = await import('node:http');
    const s = http.createServer((req, res) => {
      const chunks = []; req.on('data', (c) => chunks.push(c)); req.on('end', () => {
        const b = JSON.parse(Buffer.concat(chunks).toString('utf8'));
        const out = JSON.stringify({ ok: true, billedMicro: '12345', stream: req.url.split('/')[3], n: b.voucher.length });
        res.writeHead(200, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(out) }); res.end(out);
      });
    });
    s.listen(0, '127.0.0.1', () => process.stdout.write(`listening ${s.address().port}\n`));
  }
} else {
  const start = (m) => new Promise((r) => { const c = spawn(process.execPath, [new URL(import.meta.url).pathname, m]); c.stdout.on('data', (d) => r({ c, port: /listening (\d+)/.exec(String(d))[1] })); });
  const cpu = (pid) => { const s = readFileSync(`/proc/${pid}/stat`, 'utf8'); const f = s.slice(s.lastIndexOf(')') + 2).split(' '); return (Number(f[11]) + Number(f[12])) / 100; };
  const voucher = 'eyJ' + 'a'.repeat(300);
  for (let r = 0; r < 3; r++) for (const m of ['raw', 'hono']) {
    const { c, port } = await start(m);
    const opts = { url: `http://127.0.0.1:${port}/v1/streams/s-1/vouchers`, method: 'POST', connections: 32, headers: { 'content-type': 'application/json', authorization: 'Bearer x' }, body: JSON.stringify({ voucher }) };
    await autocannon({ ...opts, duration: 1 });
    const c0 = cpu(c.pid); const res = await autocannon({ ...opts, duration: 3 }); const used = cpu(c.pid) - c0;
    console.log(m.padEnd(5), Math.round(res.requests.total / 3), '/s', (used * 1e6 / res.requests.total).toFixed(1), 'µs CPU per request');
    c.kill();
  }
}

/**
 * A fake external media store over node:http, for the tests and for trying
 * the example: objects by key, and faults the tests drive.
 *
 *   PUT    /objects/:key  body = the object; 201 created, 200 when the key
 *                         already holds an object (idempotent by key: the
 *                         existing object is kept and returned)
 *   GET    /objects/:key  200 with the object, 404
 *   DELETE /objects/:key  204, 404 when absent (a client counts that as gone)
 *   GET    /objects       200 with every key
 *
 * Faults (`store.fault(method, mode, times)`), each for the next `times`
 * requests of that method (Infinity: until cleared), then normal service:
 *   'fail'       answer 500, change nothing
 *   'hang'       change nothing, never answer (the client times out)
 *   'lose'       apply, then destroy the connection before any reply
 *   'hold'       keep the request unapplied and unanswered until
 *                `release()`: then apply it and answer (a late PUT landing)
 *   'holdReply'  apply at once, answer only at `release()` (a crash of the
 *                caller between the effect and its commit)
 *
 * With `admin: true` (the store run as a process, src/store-main.js, for
 * the Rust tests) the same controls are HTTP routes:
 *   POST   /admin/faults?method=PUT&mode=fail[&times=N]  (no times: until cleared)
 *   DELETE /admin/faults                                 clear every fault
 *   POST   /admin/release                                {"released": n}
 *   GET    /admin/state   {"objects": [{key, body, created_at}], "counts",
 *                          "created": {key: times created}, "injected":
 *                          {mode: n}, "held": [{method, key, client_gone_at}]}
 * `client_gone_at` (ms since the epoch, or null) is when the caller of a
 * held request closed its connection: null while it still waits.
 */
import http from 'node:http';

const MODES = ['fail', 'hang', 'lose', 'hold', 'holdReply'];

export async function startMediaStore({ port = 0, host = '127.0.0.1', admin = false } = {}) {
  const objects = new Map();
  const faults = { PUT: [], DELETE: [], GET: [] };
  const held = [];
  const counts = { PUT: 0, DELETE: 0, GET: 0, created: 0, deleted: 0 };
  /** How often each key was created (more than once: deleted, then uploaded again). */
  const created = new Map();
  /** Requests that got each injected fault. */
  const injected = Object.fromEntries(MODES.map((m) => [m, 0]));
  const sockets = new Set();
  let heldWaiters = [];

  function takeFault(method) {
    const queue = faults[method] ?? [];
    while (queue.length > 0) {
      const f = queue[0];
      if (f.times <= 0) {
        queue.shift();
        continue;
      }
      f.times -= 1;
      return f.mode;
    }
    return null;
  }

  function apply(method, key, body) {
    if (method === 'PUT') {
      if (objects.has(key)) return { status: 200, body: objects.get(key) };
      const object = { key, body, created_at: new Date().toISOString() };
      objects.set(key, object);
      counts.created += 1;
      created.set(key, (created.get(key) ?? 0) + 1);
      return { status: 201, body: object };
    }
    if (method === 'DELETE') {
      if (!objects.delete(key)) return { status: 404, body: { error: 'no such object', key } };
      counts.deleted += 1;
      return { status: 204, body: null };
    }
    if (key === null) return { status: 200, body: { keys: [...objects.keys()] } };
    if (!objects.has(key)) return { status: 404, body: { error: 'no such object', key } };
    return { status: 200, body: objects.get(key) };
  }

  function reply(res, { status, body }) {
    if (res.destroyed || res.socket?.destroyed) return;
    if (body === null) {
      res.writeHead(status).end();
      return;
    }
    const text = JSON.stringify(body);
    res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(text) }).end(text);
  }

  /** Holds a request until `release()`, noting when its caller hangs up (if it does). */
  function hold(req, method, key, release) {
    const entry = { release, method, key, clientGoneAt: null };
    req.socket.once('close', () => {
      entry.clientGoneAt = Date.now();
    });
    held.push(entry);
    notifyHeld();
  }

  /** The admin routes (`admin: true`); false when `url` is not one. */
  function adminRoute(req, res, url) {
    const route = `${req.method} ${url.pathname}`;
    if (route === 'POST /admin/faults') {
      const method = url.searchParams.get('method');
      const mode = url.searchParams.get('mode');
      const times = url.searchParams.has('times') ? Number(url.searchParams.get('times')) : Infinity;
      if (!Object.hasOwn(faults, method ?? '') || !MODES.includes(mode) || !(times === Infinity || (Number.isSafeInteger(times) && times > 0))) {
        reply(res, { status: 400, body: { error: 'method=PUT|DELETE|GET, mode=' + MODES.join('|') + ', times a positive integer' } });
      } else {
        faults[method].push({ mode, times });
        reply(res, { status: 204, body: null });
      }
    } else if (route === 'DELETE /admin/faults') {
      store.clearFaults();
      reply(res, { status: 204, body: null });
    } else if (route === 'POST /admin/release') {
      reply(res, { status: 200, body: { released: store.release() } });
    } else if (route === 'GET /admin/state') {
      reply(res, {
        status: 200,
        body: {
          objects: [...objects.values()],
          counts,
          created: Object.fromEntries(created),
          injected,
          held: held.map((h) => ({ method: h.method, key: h.key, client_gone_at: h.clientGoneAt })),
        },
      });
    } else {
      return false;
    }
    return true;
  }

  const server = http.createServer((req, res) => {
    const chunks = [];
    req.on('data', (c) => chunks.push(c));
    req.on('end', () => {
      const url = new URL(req.url, 'http://store');
      if (admin && url.pathname.startsWith('/admin/') && adminRoute(req, res, url)) return;
      const match = /^\/objects(?:\/([^/]+))?$/.exec(url.pathname);
      const method = req.method;
      if (!match || !(method in faults) || (method !== 'GET' && !match[1])) {
        reply(res, { status: 404, body: { error: 'no such route' } });
        return;
      }
      const key = match[1] ? decodeURIComponent(match[1]) : null;
      const body = chunks.length ? Buffer.concat(chunks).toString('utf8') : '';
      counts[method] += 1;
      const mode = takeFault(method);
      if (mode) injected[mode] += 1;
      switch (mode) {
        case 'fail':
          reply(res, { status: 500, body: { error: 'injected failure' } });
          return;
        case 'hang':
          hold(req, method, key, () => req.socket.destroy());
          return;
        case 'lose':
          apply(method, key, body);
          req.socket.destroy();
          return;
        case 'hold':
          hold(req, method, key, () => reply(res, apply(method, key, body)));
          return;
        case 'holdReply': {
          const result = apply(method, key, body);
          hold(req, method, key, () => reply(res, result));
          return;
        }
        default:
          reply(res, apply(method, key, body));
      }
    });
  });
  server.on('connection', (s) => {
    sockets.add(s);
    s.on('close', () => sockets.delete(s));
  });

  function notifyHeld() {
    const waiters = heldWaiters;
    heldWaiters = [];
    for (const w of waiters) w();
  }

  await new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, resolve);
  });
  const address = server.address();

  const store = {
    url: `http://${host}:${address.port}`,
    port: address.port,
    objects,
    counts,
    /** The next `times` requests of `method` get `mode`. */
    fault(method, mode, times = 1) {
      faults[method].push({ mode, times });
    },
    clearFaults() {
      for (const m of Object.keys(faults)) faults[m] = [];
    },
    /** How many requests are held now. */
    get heldCount() {
      return held.length;
    },
    /** Resolves once at least `n` requests are held. */
    async waitHeld(n = 1, timeoutMs = 10_000) {
      const until = Date.now() + timeoutMs;
      while (held.length < n) {
        if (Date.now() > until) throw new Error(`no ${n} held requests within ${timeoutMs} ms (${held.length})`);
        await new Promise((resolve) => {
          heldWaiters.push(resolve);
          setTimeout(resolve, 50);
        });
      }
    },
    /** Releases every held request (applies 'hold', answers 'holdReply', drops 'hang'). */
    release() {
      const all = held.splice(0);
      for (const h of all) h.release();
      return all.length;
    },
    async close() {
      this.clearFaults();
      this.release();
      for (const s of sockets) s.destroy();
      await new Promise((resolve) => server.close(() => resolve()));
    },
  };
  return store;
}

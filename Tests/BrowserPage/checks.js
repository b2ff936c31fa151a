// Browser checks for blip.js, run by the Swift WebDriver test against `blip serve --static`.
// window.runBLIPChecks() returns { userAgent, subprotocol, checks, roundTrips, bulk, fixtures }.
// Every check runs even if an earlier one failed; each reports what it expected and what came.

import {
  BLIPConnection, BLIPError, BLIPConnectionClosedError, BLIPProtocolError, crc32, RawInflater, decodeCapturedFrames,
} from '/_blip/blip.js';

const MiB = 1024 * 1024;
const BULK_BYTES = 64 * MiB;
const ROUND_TRIPS = 10000;
const encoder = new TextEncoder();
const decoder = new TextDecoder();

// ---------------------------------------------------------------------------------------------
// Small helpers

function expect(condition, message) {
  if (!condition) throw new Error(message);
}

function expectEqual(actual, expected, what) {
  const a = JSON.stringify(actual);
  const e = JSON.stringify(expected);
  if (a !== e) throw new Error(`${what}: expected ${e}, got ${a}`);
}

function bytesEqual(a, b) {
  if (a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return false;
  return true;
}

function firstDifference(a, b) {
  const n = Math.min(a.length, b.length);
  for (let i = 0; i < n; i++) if (a[i] !== b[i]) return i;
  return a.length === b.length ? -1 : n;
}

/** Deterministic pseudo-random bytes (xorshift32): fast to make in bulk, different per seed. */
function pseudoRandomBytes(length, seed = 1) {
  const out = new Uint8Array(length);
  const words = new Uint32Array(out.buffer, 0, length >>> 2);
  let x = seed >>> 0 || 1;
  for (let i = 0; i < words.length; i++) {
    x ^= x << 13; x >>>= 0;
    x ^= x >>> 17;
    x ^= x << 5; x >>>= 0;
    words[i] = x;
  }
  for (let i = words.length * 4; i < length; i++) out[i] = i & 0xff;
  return out;
}

function sleep(ms) {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

function withTimeout(promise, ms, what) {
  let timer;
  return Promise.race([
    promise.finally(() => clearTimeout(timer)),
    new Promise((_, reject) => {
      timer = setTimeout(() => reject(new Error(`${what}: no answer after ${ms} ms`)), ms);
    }),
  ]);
}

/** Awaits `promise` and returns how it ended, without throwing. */
async function outcome(promise) {
  try {
    return { value: await promise };
  } catch (error) {
    return { error };
  }
}

function describeError(e) {
  if (!e) return String(e);
  const parts = [e.name || 'Error', e.message];
  if (e instanceof BLIPError) parts.push(`domain=${e.domain} code=${e.code}`);
  if (e instanceof BLIPConnectionClosedError) parts.push(`code=${e.code} reason=${JSON.stringify(e.reason)}`);
  return parts.join(' ');
}

function percentile(sorted, p) {
  if (sorted.length === 0) return 0;
  const index = Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1));
  return sorted[index];
}

const round = (x, digits = 3) => Number(x.toFixed(digits));

/** A plain WebSocket with the `blip-raw` subprotocol, read one message at a time. */
class RawSocket {
  static open(url) {
    return new Promise((resolve, reject) => {
      const socket = new WebSocket(url, 'blip-raw');
      socket.binaryType = 'arraybuffer';
      socket.onopen = () => resolve(new RawSocket(socket));
      socket.onerror = () => reject(new Error('the blip-raw WebSocket did not open'));
    });
  }

  constructor(socket) {
    this.socket = socket;
    this.queue = [];
    this.waiting = null; // { resolve, reject } of the pending next()
    this.closedError = null; // set once the socket closed: every later next() rejects with it
    socket.onmessage = (event) => {
      if (this.waiting) {
        const { resolve } = this.waiting;
        this.waiting = null;
        resolve(event.data);
      } else {
        this.queue.push(event.data);
      }
    };
    socket.onclose = (event) => {
      this.closedError = new Error(`the blip-raw WebSocket closed (${event.code} ${event.reason})`);
      if (this.waiting) {
        const { reject } = this.waiting;
        this.waiting = null;
        reject(this.closedError);
      }
    };
  }

  send(data) {
    this.socket.send(data);
  }

  /** The next message: a string for text, an ArrayBuffer for binary. */
  next() {
    if (this.queue.length > 0) return Promise.resolve(this.queue.shift());
    if (this.closedError) return Promise.reject(this.closedError);
    return new Promise((resolve, reject) => {
      this.waiting = { resolve, reject };
    });
  }
}

// ---------------------------------------------------------------------------------------------
// The run

/**
 * Runs every check. Options exist for running the page elsewhere (e.g. from Node):
 * `wsURL` (default ws://<host>/browser-checks), `baseURL` for fixtures (default the page's origin).
 */
async function runBLIPChecks(options = {}) {
  const host = options.host || globalThis.location?.host;
  const wsURL = options.wsURL || `ws://${host}/browser-checks`;
  const baseURL = options.baseURL || `${globalThis.location?.origin ?? `http://${host}`}/`;
  const checks = [];
  const result = {
    userAgent: globalThis.navigator ? navigator.userAgent : 'unknown',
    subprotocol: null,
    checks,
    roundTrips: null,
    bulk: null,
    rawBaseline: null,
    fixtures: {},
  };
  // What has run so far, for a harness whose wait ran out to report which check was stuck.
  globalThis.blipChecksSoFar = result;

  /** Runs one named check, catching anything it throws; `fn` returns a detail string. */
  async function check(name, fn, timeoutMs = 60000) {
    const start = performance.now();
    let ok = false;
    let detail;
    try {
      detail = await withTimeout(Promise.resolve().then(fn), timeoutMs, name);
      ok = true;
    } catch (e) {
      detail = describeError(e);
    }
    checks.push({ name, ok, detail: detail === undefined ? '' : String(detail), ms: round(performance.now() - start, 1) });
  }

  // The main connection; if a check kills it, the next check reconnects so the rest still run.
  let connection = null;
  async function conn() {
    if (!connection || connection.state !== 'open') {
      connection = await BLIPConnection.connect(wsURL, { frameSize: 16384, sendBufferLimit: MiB });
      registerHandlers(connection);
    }
    return connection;
  }
  const echo = (c, props, body, extra = {}) => c.sendRequest({ profile: 'echo', properties: props, body, ...extra });
  const serverStats = async (c) => (await c.sendRequest({ profile: 'stats' })).json();

  // --- pure functions, no server ---

  await check('crc32 of "123456789" is 0xCBF43926 (and continues like zlib)', () => {
    const all = encoder.encode('123456789');
    const value = crc32(all);
    expect(value === 0xcbf43926, `expected cbf43926, got ${value.toString(16)}`);
    const continued = crc32(all.subarray(4), crc32(all.subarray(0, 4)));
    expect(continued === value, `crc32 in two parts gave ${continued.toString(16)}`);
    expect(crc32(new Uint8Array([0])) === 0xd202ef8d, 'CRC of one 00 byte should be d202ef8d');
    return 'cbf43926; two-part CRC equal; CRC(00) = d202ef8d';
  });

  await check('RawInflater reads CompressionStream("deflate-raw") output', async () => {
    const text = Array.from({ length: 4000 }, (_, i) => `line ${i}: the quick brown fox ${i % 7} jumps over ${i * 31 % 97}\n`).join('');
    const input = encoder.encode(text);
    const stream = new Blob([input]).stream().pipeThrough(new CompressionStream('deflate-raw'));
    const compressed = new Uint8Array(await new Response(stream).arrayBuffer());
    const output = new RawInflater().inflate(compressed);
    expect(bytesEqual(output, input), `inflated ${output.length} bytes, expected ${input.length}; first difference at ${firstDifference(output, input)}`);
    // Also a binary (stored-block-heavy) stream.
    const random = pseudoRandomBytes(200000, 7);
    const stream2 = new Blob([random]).stream().pipeThrough(new CompressionStream('deflate-raw'));
    const compressed2 = new Uint8Array(await new Response(stream2).arrayBuffer());
    const output2 = new RawInflater().inflate(compressed2);
    expect(bytesEqual(output2, random), `random data: inflated ${output2.length} bytes, expected ${random.length}`);
    return `${input.length} text bytes from ${compressed.length} compressed; ${random.length} random bytes from ${compressed2.length}`;
  });

  await check('RawInflater refuses invalid data and output over its limit', async () => {
    let threw = null;
    try {
      new RawInflater().inflate(new Uint8Array([0xff, 0xff, 0xff, 0xff]));
    } catch (e) {
      threw = e;
    }
    expect(threw instanceof BLIPProtocolError, `invalid block: expected BLIPProtocolError, got ${describeError(threw)}`);
    const zeros = new Blob([new Uint8Array(1000000)]).stream().pipeThrough(new CompressionStream('deflate-raw'));
    const bomb = new Uint8Array(await new Response(zeros).arrayBuffer());
    let limited = null;
    try {
      new RawInflater().inflate(bomb, 100000);
    } catch (e) {
      limited = e;
    }
    expect(limited instanceof BLIPProtocolError, `1 MB of zeros with a 100 kB limit: expected BLIPProtocolError, got ${describeError(limited)}`);
    return `invalid: "${threw.message}"; limit: "${limited.message}"`;
  });

  // --- the main connection ---

  await check('connect and negotiate a BLIP 3 subprotocol', async () => {
    const c = await conn();
    result.subprotocol = c.subprotocol;
    expect(['BLIP_3+CBMobile_3', 'BLIP_3+CBMobile_2'].includes(c.subprotocol), `subprotocol ${JSON.stringify(c.subprotocol)}`);
    return `subprotocol ${c.subprotocol}`;
  });

  await check('properties round trip (UTF-8, empty values, many)', async () => {
    const c = await conn();
    const props = {
      'X-Plain': 'hello',
      'X-Empty': '',
      'X-UTF8': 'héllo wörld ✓ 日本語 🎉',
      'Ключ-Ümlaut': 'значение',
      'X-Spaces': '  leading and trailing  ',
      'X-Long': 'x'.repeat(5000),
    };
    for (let i = 0; i < 50; i++) props[`X-N${i}`] = String(i * i);
    const reply = await echo(c, props, 'body');
    expect(reply.type === 'RPY', `type ${reply.type}`);
    for (const [k, v] of Object.entries(props)) {
      expect(reply.properties[k] === v, `property ${k}: expected ${JSON.stringify(v).slice(0, 80)}, got ${JSON.stringify(reply.properties[k])?.slice(0, 80)}`);
    }
    expect(reply.propertyList.length === Object.keys(reply.properties).length, 'propertyList and properties disagree');
    expect(reply.text() === 'body', `body ${JSON.stringify(reply.text())}`);
    return `${Object.keys(props).length} properties came back equal (reply has ${reply.propertyList.length})`;
  });

  await check('bodies: string, Uint8Array, ArrayBuffer, Blob', async () => {
    const c = await conn();
    const bytes = pseudoRandomBytes(3000, 3);
    const cases = [
      ['string', 'Grüße aus dem Browser ✓', encoder.encode('Grüße aus dem Browser ✓')],
      ['Uint8Array', bytes, bytes],
      ['Uint8Array view', bytes.subarray(100, 200), bytes.slice(100, 200)],
      ['ArrayBuffer', bytes.slice().buffer, bytes],
      ['Blob', new Blob([bytes, encoder.encode('tail')]), new Uint8Array([...bytes, ...encoder.encode('tail')])],
    ];
    const details = [];
    for (const [kind, body, expected] of cases) {
      const reply = await echo(c, { 'X-Kind': kind }, body);
      expect(bytesEqual(reply.body, expected), `${kind}: ${reply.body.length} bytes back, expected ${expected.length}; first difference at ${firstDifference(reply.body, expected)}`);
      details.push(`${kind} ${expected.length}`);
    }
    const text = await echo(c, {}, 'ünïcödé');
    expect(text.text() === 'ünïcödé', `text() gave ${JSON.stringify(text.text())}`);
    const json = await echo(c, {}, JSON.stringify({ a: [1, 2, { b: 'c' }] }));
    expectEqual(json.json(), { a: [1, 2, { b: 'c' }] }, 'json()');
    return `byte-exact: ${details.join(', ')}; text() and json() decode`;
  });

  await check('empty body (and no properties besides Profile)', async () => {
    const c = await conn();
    const reply = await echo(c, {}, undefined);
    expect(reply.body.length === 0, `body of ${reply.body.length} bytes`);
    const reply2 = await echo(c, {}, new Uint8Array(0));
    expect(reply2.body.length === 0, `body of ${reply2.body.length} bytes (Uint8Array(0))`);
    const reply3 = await echo(c, {}, '');
    expect(reply3.body.length === 0, `body of ${reply3.body.length} bytes ('')`);
    return 'undefined, Uint8Array(0) and "" all came back empty';
  });

  await check('300 KB multi-frame echo is byte-exact (ACKs both ways)', async () => {
    const c = await conn();
    const before = c.statistics;
    const body = pseudoRandomBytes(300000, 300);
    const reply = await echo(c, { 'X-Size': '300000' }, body);
    const after = c.statistics;
    expect(bytesEqual(reply.body, body), `got ${reply.body.length} bytes, expected 300000; first difference at ${firstDifference(reply.body, body)}`);
    const framesOut = after.framesSent - before.framesSent;
    const framesIn = after.framesReceived - before.framesReceived;
    expect(framesOut >= 19, `sent only ${framesOut} frames for 300 KB`);
    expect(after.acksReceived > before.acksReceived, `no ACK received for our 300 KB request (acksReceived ${after.acksReceived})`);
    expect(after.acksSent > before.acksSent, `we sent no ACK for the 300 KB reply (acksSent ${after.acksSent})`);
    return `frames out ${framesOut}, in ${framesIn}; ACKs received ${after.acksReceived - before.acksReceived}, sent ${after.acksSent - before.acksSent}`;
  });

  await check('ERR reply: domain, code, message (error profile)', async () => {
    const c = await conn();
    const defaults = await outcome(c.sendRequest({ profile: 'error' }));
    const e1 = defaults.error;
    expect(e1 instanceof BLIPError, `expected BLIPError, got ${defaults.error ? describeError(e1) : 'a reply'}`);
    expect(e1.domain === 'HTTP' && e1.code === 409 && e1.message === 'conflict', `default: expected HTTP 409 "conflict", got ${e1.domain} ${e1.code} "${e1.message}"`);
    const custom = await outcome(c.sendRequest({
      profile: 'error',
      properties: { 'Want-Error-Domain': 'Custom', 'Want-Error-Code': '451', 'Want-Error-Message': 'nicht verfügbar ✗' },
    }));
    const e2 = custom.error;
    expect(e2 instanceof BLIPError, `expected BLIPError, got ${describeError(e2)}`);
    expect(e2.domain === 'Custom' && e2.code === 451 && e2.message === 'nicht verfügbar ✗', `custom: got ${e2.domain} ${e2.code} "${e2.message}"`);
    expect(e2.properties['Error-Code'] === '451', `properties ${JSON.stringify(e2.properties)}`);
    return `HTTP 409 "conflict"; Custom 451 "${e2.message}"`;
  });

  await check('unknown profile → ERR BLIP 404', async () => {
    const c = await conn();
    const r = await outcome(c.sendRequest({ profile: 'no-such-profile-here', body: 'x' }));
    expect(r.error instanceof BLIPError, `expected BLIPError, got ${r.error ? describeError(r.error) : 'a reply'}`);
    expect(r.error.domain === 'BLIP' && r.error.code === 404, `got ${r.error.domain} ${r.error.code}`);
    const ok = await echo(c, {}, 'still alive');
    expect(ok.text() === 'still alive', 'connection unusable after ERR');
    return `BLIP 404 "${r.error.message}"; connection still works`;
  });

  await check('noReply request: server counts it, nothing comes back', async () => {
    const c = await conn();
    const before = (await serverStats(c)).noReply;
    const received = c.statistics.messagesReceived;
    const value = await c.sendRequest({ profile: 'echo', properties: { 'X-Test': 'noreply' }, body: 'fire and forget', noReply: true });
    expect(value === undefined, `noReply resolved with ${JSON.stringify(value)}`);
    let after = before;
    let statsCalls = 0;
    for (let i = 0; i < 50 && after <= before; i++) {
      await sleep(20);
      after = (await serverStats(c)).noReply;
      statsCalls++;
    }
    expect(after === before + 1, `server noReply counter ${before} → ${after}`);
    await sleep(50);
    // Each stats call brought one reply; anything more would answer the no-reply request.
    const extra = c.statistics.messagesReceived - received - statsCalls;
    expect(extra === 0, `${extra} unexpected messages arrived`);
    return `server noReply counter ${before} → ${after}; no reply arrived`;
  });

  await check('urgent small echo overtakes an 8 MiB normal sink', async () => {
    const c = await conn();
    const order = [];
    const big = pseudoRandomBytes(8 * MiB, 8);
    const start = performance.now();
    const sink = c.sendRequest({ profile: 'sink', body: big }).then((r) => {
      order.push('sink');
      return { r, ms: performance.now() - start };
    });
    const urgent = c.sendRequest({ profile: 'echo', body: 'urgent!', urgent: true }).then((r) => {
      order.push('urgent');
      return { r, ms: performance.now() - start };
    });
    const [s, u] = await Promise.all([sink, urgent]);
    expect(s.r.properties.Count === String(8 * MiB), `sink Count ${s.r.properties.Count}`);
    expect(u.r.text() === 'urgent!' && u.r.urgent, `urgent reply body ${JSON.stringify(u.r.text())}, urgent flag ${u.r.urgent}`);
    expectEqual(order, ['urgent', 'sink'], 'completion order');
    return `urgent echo after ${round(u.ms, 1)} ms, 8 MiB sink after ${round(s.ms, 1)} ms`;
  }, 120000);

  await check('200 concurrent requests: replies matched to requests', async () => {
    const c = await conn();
    const requests = [];
    for (let i = 0; i < 200; i++) {
      const size = (i * 997) % 40000; // some single-frame, some multi-frame
      const body = pseudoRandomBytes(size, i + 1000);
      requests.push(echo(c, { 'X-Index': String(i) }, body, { urgent: i % 10 === 0 }).then((r) => ({ i, r, body })));
    }
    const replies = await Promise.all(requests);
    for (const { i, r, body } of replies) {
      expect(r.properties['X-Index'] === String(i), `request ${i} got the reply for ${r.properties['X-Index']}`);
      expect(bytesEqual(r.body, body), `request ${i}: body of ${r.body.length} bytes, expected ${body.length}`);
    }
    return '200 replies, each with its own index and body (every 10th urgent)';
  }, 120000);

  await check('compressed reply inflates to the same bytes as the uncompressed one', async () => {
    const c = await conn();
    const compressedBefore = c.statistics.compressedFramesReceived;
    const plain = await c.sendRequest({ profile: 'source', properties: { Count: '300000', Data: 'text' } });
    const packed = await c.sendRequest({ profile: 'source', properties: { Count: '300000', Data: 'text', Compress: 'yes' } });
    const compressedAfter = c.statistics.compressedFramesReceived;
    expect(plain.body.length === 300000, `uncompressed body ${plain.body.length} bytes`);
    expect(bytesEqual(packed.body, plain.body), `compressed reply: ${packed.body.length} bytes, first difference at ${firstDifference(packed.body, plain.body)}`);
    expect(packed.compressed, 'the Compress: yes reply had no compressed frame');
    expect(compressedAfter > compressedBefore, `compressedFramesReceived ${compressedBefore} → ${compressedAfter}`);
    // A second compressed reply continues the same inflate stream.
    const again = await c.sendRequest({ profile: 'source', properties: { Count: '100000', Data: 'text', Compress: 'yes' } });
    expect(bytesEqual(again.body, plain.body.subarray(0, 100000)), 'second compressed reply (prefix) differs');
    return `300000 bytes equal; compressed frames received ${compressedBefore} → ${compressedAfter}; a second compressed reply decodes too`;
  });

  await check('server calls the page (call-peer): handler reply forwarded', async () => {
    const c = await conn();
    const reply = await c.sendRequest({
      profile: 'call-peer',
      properties: { 'Call-Profile': 'page-echo', 'Call-Property-X-Greeting': 'hallo ✓', 'Call-Property-X-Empty': '' },
      body: 'from swift',
    });
    expect(reply.properties['X-Page'] === 'yes', `reply properties ${JSON.stringify(reply.properties)}`);
    expect(reply.properties['X-Seen-Greeting'] === 'hallo ✓', `the page saw X-Greeting = ${JSON.stringify(reply.properties['X-Seen-Greeting'])}`);
    expect(reply.properties['X-Seen-Empty'] === '', `the page saw X-Empty = ${JSON.stringify(reply.properties['X-Seen-Empty'])}`);
    expect(reply.text() === 'page got: from swift', `reply body ${JSON.stringify(reply.text())}`);
    const big = pseudoRandomBytes(200000, 42);
    const bigReply = await c.sendRequest({ profile: 'call-peer', properties: { 'Call-Profile': 'page-reverse' }, body: big });
    const reversed = big.slice().reverse();
    expect(bytesEqual(bigReply.body, reversed), `200 KB call: got ${bigReply.body.length} bytes, first difference at ${firstDifference(bigReply.body, reversed)}`);
    return 'page handler properties and body came back through the server, also for a 200 KB body';
  });

  await check('call-peer: a handler throwing BLIPError → the server forwards the ERR', async () => {
    const c = await conn();
    const r = await outcome(c.sendRequest({ profile: 'call-peer', properties: { 'Call-Profile': 'page-fail' } }));
    expect(r.error instanceof BLIPError, `expected BLIPError, got ${r.error ? describeError(r.error) : 'a reply'}`);
    expect(r.error.domain === 'PageDomain' && r.error.code === 418 && r.error.message === 'I am a teapot ☕',
      `got ${r.error.domain} ${r.error.code} "${r.error.message}"`);
    const r2 = await outcome(c.sendRequest({ profile: 'call-peer', properties: { 'Call-Profile': 'page-crash' } }));
    expect(r2.error instanceof BLIPError && r2.error.domain === 'BLIP' && r2.error.code === 500 && r2.error.message === 'plain Error thrown',
      `plain throw: got ${describeError(r2.error)}`);
    return 'PageDomain 418 forwarded; a plain Error became BLIP 500';
  });

  await check('call-peer: unregistered profile → BLIP 404 forwarded', async () => {
    const c = await conn();
    const r = await outcome(c.sendRequest({ profile: 'call-peer', properties: { 'Call-Profile': 'page-nobody-home' } }));
    expect(r.error instanceof BLIPError, `expected BLIPError, got ${r.error ? describeError(r.error) : 'a reply'}`);
    expect(r.error.domain === 'BLIP' && r.error.code === 404, `got ${r.error.domain} ${r.error.code}`);
    // The page's own 404 names the profile; a 404 for call-peer itself would not.
    expect(r.error.message.includes('page-nobody-home'), `the 404 came from elsewhere: "${r.error.message}"`);
    return `BLIP 404 "${r.error.message}"`;
  });

  await check('call-peer: urgent call arrives urgent', async () => {
    const c = await conn();
    const reply = await c.sendRequest({ profile: 'call-peer', properties: { 'Call-Profile': 'page-urgency', 'Call-Urgent': 'yes' } });
    expect(reply.properties['X-Urgent'] === 'true', `the page saw urgent = ${reply.properties['X-Urgent']}`);
    const normal = await c.sendRequest({ profile: 'call-peer', properties: { 'Call-Profile': 'page-urgency' } });
    expect(normal.properties['X-Urgent'] === 'false', `a normal call was seen as urgent = ${normal.properties['X-Urgent']}`);
    return 'urgent call seen as urgent, normal call as normal';
  });

  await check('call-peer: a BLIPError that cannot be encoded still gets an ERR (BLIP 500)', async () => {
    const c = await conn();
    const nul = await outcome(c.sendRequest({ profile: 'call-peer', properties: { 'Call-Profile': 'page-nul-domain' } }));
    expect(nul.error instanceof BLIPError, `NUL in domain: expected BLIPError, got ${nul.error ? describeError(nul.error) : 'a reply'}`);
    expect(nul.error.domain === 'BLIP' && nul.error.code === 500 && nul.error.message === 'domain with a NUL',
      `NUL in domain: got ${describeError(nul.error)}`);
    const huge = await outcome(c.sendRequest({ profile: 'call-peer', properties: { 'Call-Profile': 'page-huge-error' } }));
    expect(huge.error instanceof BLIPError && huge.error.domain === 'BLIP' && huge.error.code === 500,
      `200 KB of ERR properties: got ${huge.error ? describeError(huge.error) : 'a reply'}`);
    const ok = await echo(c, {}, 'still alive');
    expect(ok.text() === 'still alive', 'connection unusable afterwards');
    return `NUL in domain → BLIP 500 "${nul.error.message}"; oversized properties → BLIP 500; connection still works`;
  });

  await check('a body changed and detached after sendRequest is sent as it was', async () => {
    const c = await conn();
    const body = pseudoRandomBytes(300000, 77);
    const expected = body.slice();
    const pending = echo(c, {}, body);
    body.fill(0); // the caller reuses its buffer...
    structuredClone(body.buffer, { transfer: [body.buffer] }); // ...or gives it away (detached)
    expect(body.byteLength === 0, 'the buffer did not detach');
    const reply = await pending;
    expect(bytesEqual(reply.body, expected), `${reply.body.length} bytes back; first difference at ${firstDifference(reply.body, expected)}`);
    return '300 KB came back as it was when sendRequest was called';
  });

  await check('frameSize 200000 is clamped: a 600 KB echo completes', async () => {
    const c = await BLIPConnection.connect(wsURL, { frameSize: 200000 });
    try {
      const before = c.statistics;
      const body = pseudoRandomBytes(600000, 600);
      const reply = await withTimeout(echo(c, {}, body), 20000, '600 KB echo');
      const frames = c.statistics.framesSent - before.framesSent;
      expect(bytesEqual(reply.body, body), `${reply.body.length} bytes back; first difference at ${firstDifference(reply.body, body)}`);
      // 600 000 bytes in frames of at most 65 536: at least 10 (unclamped it would be 3).
      expect(frames >= 10, `${frames} frames for 600 KB`);
      expect(c.statistics.maxUnacknowledgedBytes <= c.statistics.flowControlWindow, `max unacknowledged ${c.statistics.maxUnacknowledgedBytes}`);
      return `${frames} frames; max unacknowledged ${c.statistics.maxUnacknowledgedBytes}`;
    } finally {
      c.close(1000);
    }
  });

  await check('maxConcurrentHandlers 2: 10 concurrent calls into a slow handler, all answered, ≤ 2 at once', async () => {
    const c = await BLIPConnection.connect(wsURL, { maxConcurrentHandlers: 2 });
    try {
      const slow = slowHandler(c, 50);
      const calls = [];
      for (let i = 0; i < 10; i++) {
        calls.push(c.sendRequest({ profile: 'call-peer', properties: { 'Call-Profile': 'page-slow' }, body: String(i) }));
      }
      const replies = await Promise.all(calls);
      replies.forEach((r, i) => expect(r.text() === `slow ${i}`, `call ${i} got ${JSON.stringify(r.text())}`));
      expect(slow.calls === 10, `the handler ran ${slow.calls} times`);
      expect(slow.maxRunning <= 2, `${slow.maxRunning} handlers ran at once`);
      // The server makes its calls concurrently, so the limit must have been reached (and queued the rest).
      expect(slow.maxRunning === 2, `only ${slow.maxRunning} handler ran at a time: the limit was never tested`);
      return `10 replies; at most ${slow.maxRunning} handlers at once`;
    } finally {
      c.close(1000);
    }
  });

  await check('too many requests waiting for a handler close with 1008 (maxIncomingMessagesInProgress)', async () => {
    const c = await BLIPConnection.connect(wsURL, { maxConcurrentHandlers: 1, maxIncomingMessagesInProgress: 3 });
    slowHandler(c, 2000);
    const calls = [];
    for (let i = 0; i < 6; i++) {
      calls.push(outcome(c.sendRequest({ profile: 'call-peer', properties: { 'Call-Profile': 'page-slow' }, body: String(i) })));
    }
    const closed = await withTimeout(c.closed, 10000, '`closed`');
    const results = await Promise.all(calls);
    expect(closed.code === 1008, `closed ${JSON.stringify(closed)}`);
    const failed = results.filter((r) => r.error instanceof BLIPConnectionClosedError && r.error.code === 1008);
    expect(failed.length === 6, `${failed.length} of 6 calls failed with 1008: ${results.map((r) => r.error ? describeError(r.error) : 'reply').join('; ')}`);
    expect(failed[0].error.cause instanceof BLIPProtocolError, `cause ${failed[0].error.cause}`);
    return `closed ${closed.code} "${closed.reason}"`;
  });

  await check('maxIncomingMessagesInProgress 1: two interleaved multi-frame replies close with 1008', async () => {
    const c = await BLIPConnection.connect(wsURL, { maxIncomingMessagesInProgress: 1 });
    const one = outcome(c.sendRequest({ profile: 'source', properties: { Count: '300000', Data: 'random' } }));
    const two = outcome(c.sendRequest({ profile: 'source', properties: { Count: '300000', Data: 'random' } }));
    const [a, b] = await Promise.all([one, two]);
    const closed = await withTimeout(c.closed, 10000, '`closed`');
    expect(closed.code === 1008, `closed ${JSON.stringify(closed)}; replies: ${describeError(a.error)} / ${describeError(b.error)}`);
    expect(b.error instanceof BLIPConnectionClosedError && b.error.code === 1008, `second request: ${b.error ? describeError(b.error) : 'a reply'}`);
    return `closed ${closed.code} "${closed.reason}"`;
  });

  await check('incomingBufferBudget: a reply over the budget closes with 1009', async () => {
    const c = await BLIPConnection.connect(wsURL, { incomingBufferBudget: 100000 });
    const fits = await c.sendRequest({ profile: 'source', properties: { Count: '50000', Data: 'random' } });
    expect(fits.body.length === 50000, `50 000 bytes: got ${fits.body.length}`);
    const over = await outcome(c.sendRequest({ profile: 'source', properties: { Count: '300000', Data: 'random' } }));
    const closed = await withTimeout(c.closed, 10000, '`closed`');
    expect(over.error instanceof BLIPConnectionClosedError && over.error.code === 1009, `300 000 bytes: ${over.error ? describeError(over.error) : 'a reply'}`);
    expect(over.error.cause instanceof BLIPProtocolError, `cause ${over.error.cause}`);
    expect(closed.code === 1009, `closed ${JSON.stringify(closed)}`);
    return `50 000 bytes fit; 300 000 → ${describeError(over.error)}`;
  });

  await check('a 50 000-character close reason is cut to 123 bytes at once', async () => {
    const c = await BLIPConnection.connect(wsURL);
    const reason = 'é'.repeat(50000);
    const t = performance.now();
    const closing = c.close(4000, reason);
    const ms = performance.now() - t;
    const closed = await withTimeout(closing, 10000, '`closed`');
    expect(ms < 50, `close() took ${round(ms, 1)} ms`);
    // The socket refuses reasons over 123 bytes, so reaching 4000 means the cut one was sent.
    expect(closed.code === 4000, `closed ${JSON.stringify(closed)}`);
    return `close() returned in ${round(ms, 2)} ms; closed with ${closed.code}`;
  });

  await check('out of request numbers: the request rejects and the connection closes', async () => {
    const c = await BLIPConnection.connect(wsURL);
    await echo(c, {}, 'first');
    c._lastRequestNumber = 0xffffffff; // internal: pretend 2^32 - 1 requests were sent
    const r = await withTimeout(outcome(echo(c, {}, 'one too many')), 10000, 'the request');
    const closed = await withTimeout(c.closed, 10000, '`closed`');
    expect(r.error instanceof BLIPConnectionClosedError, `expected BLIPConnectionClosedError, got ${r.error ? describeError(r.error) : 'a reply'}`);
    expect(closed.code === 1002, `closed ${JSON.stringify(closed)}`);
    return `${describeError(r.error)}`;
  });

  await check(`${ROUND_TRIPS} sequential 100-byte echo round trips`, async () => {
    const c = await conn();
    const body = pseudoRandomBytes(100, 100);
    const times = new Float64Array(ROUND_TRIPS);
    const start = performance.now();
    for (let i = 0; i < ROUND_TRIPS; i++) {
      const t = performance.now();
      const reply = await c.sendRequest({ profile: 'echo', body });
      times[i] = performance.now() - t;
      if (reply.body.length !== 100) throw new Error(`round trip ${i}: ${reply.body.length} bytes back`);
    }
    const totalMs = performance.now() - start;
    const sorted = Array.from(times).sort((a, b) => a - b);
    result.roundTrips = {
      count: ROUND_TRIPS, bodyBytes: 100, totalMs: round(totalMs, 1), meanMs: round(totalMs / ROUND_TRIPS),
      p50Ms: round(percentile(sorted, 50)), p99Ms: round(percentile(sorted, 99)), maxMs: round(sorted[sorted.length - 1]),
    };
    return `${round(ROUND_TRIPS / (totalMs / 1000), 0)} round trips/s, mean ${result.roundTrips.meanMs} ms, p99 ${result.roundTrips.p99Ms} ms`;
  }, 300000);

  result.bulk = { bytes: BULK_BYTES, upMs: null, downMs: null, upMiBps: null, downMiBps: null, maxUnacknowledgedBytes: null };

  await check('64 MiB up (sink) within the flow-control window', async () => {
    const c = await conn();
    const body = pseudoRandomBytes(BULK_BYTES, 64);
    const start = performance.now();
    const reply = await c.sendRequest({ profile: 'sink', body });
    const ms = performance.now() - start;
    result.bulk.upMs = round(ms, 1);
    result.bulk.upMiBps = round(BULK_BYTES / MiB / (ms / 1000), 1);
    const stats = c.statistics;
    result.bulk.maxUnacknowledgedBytes = stats.maxUnacknowledgedBytes;
    expect(reply.properties.Count === String(BULK_BYTES), `Count ${reply.properties.Count}, expected ${BULK_BYTES}`);
    expect(stats.maxUnacknowledgedBytes <= stats.flowControlWindow,
      `maxUnacknowledgedBytes ${stats.maxUnacknowledgedBytes} > window ${stats.flowControlWindow}`);
    return `${result.bulk.upMiBps} MiB/s; max unacknowledged ${stats.maxUnacknowledgedBytes} ≤ ${stats.flowControlWindow}`;
  }, 300000);

  await check('64 MiB down (source, random)', async () => {
    const c = await conn();
    const acksBefore = c.statistics.acksSent;
    const start = performance.now();
    const reply = await c.sendRequest({ profile: 'source', properties: { Count: String(BULK_BYTES), Data: 'random' } });
    const ms = performance.now() - start;
    result.bulk.downMs = round(ms, 1);
    result.bulk.downMiBps = round(BULK_BYTES / MiB / (ms / 1000), 1);
    expect(reply.body.length === BULK_BYTES, `${reply.body.length} bytes, expected ${BULK_BYTES}`);
    const acks = c.statistics.acksSent - acksBefore;
    // One ACK per 50 000 bytes received, counted in whole frames: at least one per 100 000 bytes.
    expect(acks >= BULK_BYTES / 100000, `only ${acks} ACKs sent for 64 MiB`);
    // A smaller Count of the same kind is a prefix of the larger one.
    const small = await c.sendRequest({ profile: 'source', properties: { Count: '1000', Data: 'random' } });
    expect(bytesEqual(small.body, reply.body.subarray(0, 1000)), 'source Count=1000 is not a prefix of Count=64 MiB');
    result.bulk.maxUnacknowledgedBytes = c.statistics.maxUnacknowledgedBytes;
    return `${result.bulk.downMiBps} MiB/s; ${acks} ACKs sent`;
  }, 300000);

  // The same work over a plain WebSocket to the same server (its `blip-raw` endpoint: binary echo,
  // `sink:N`, `source:N`), in the same run: what the browser and the socket cost without BLIP.
  await check('raw WebSocket baseline (blip-raw): echoes and 64 MiB each way', async () => {
    const raw = await RawSocket.open(wsURL.replace(/\/browser-checks$/, '/raw'));
    try {
      const body = pseudoRandomBytes(100, 100);
      let start = performance.now();
      for (let i = 0; i < ROUND_TRIPS; i++) {
        raw.send(body);
        const echo = await raw.next();
        if (!(echo instanceof ArrayBuffer) || echo.byteLength !== 100) throw new Error(`raw echo ${i} came back wrong`);
      }
      const roundTripMs = performance.now() - start;
      const chunk = pseudoRandomBytes(16384, 7);
      start = performance.now();
      raw.send(`sink:${BULK_BYTES}`);
      for (let sent = 0; sent < BULK_BYTES; sent += chunk.length) {
        raw.send(chunk);
        // As the BLIP client does: hand the socket no more while a MiB waits in its buffer.
        while (raw.socket.bufferedAmount > MiB) await sleep(1);
      }
      const count = await raw.next();
      const upMs = performance.now() - start;
      expect(count === String(BULK_BYTES), `sink answered ${count}`);
      start = performance.now();
      raw.send(`source:${BULK_BYTES}`);
      let received = 0;
      for (;;) {
        const message = await raw.next();
        if (typeof message === 'string') {
          expect(message === 'done', `source ended with ${message}`);
          break;
        }
        received += message.byteLength;
      }
      const downMs = performance.now() - start;
      expect(received === BULK_BYTES, `${received} bytes from source`);
      result.rawBaseline = {
        roundTripMeanMs: round(roundTripMs / ROUND_TRIPS), upMs: round(upMs, 1), downMs: round(downMs, 1),
        upMiBps: round(BULK_BYTES / MiB / (upMs / 1000), 1), downMiBps: round(BULK_BYTES / MiB / (downMs / 1000), 1),
      };
      return `mean round trip ${result.rawBaseline.roundTripMeanMs} ms, up ${result.rawBaseline.upMiBps} MiB/s, down ${result.rawBaseline.downMiBps} MiB/s`;
    } finally {
      raw.socket.close(1000);
    }
  }, 300000);

  await check('statistics add up', async () => {
    // Its own traffic only: deltas over requests made here, on a connection of its own.
    const c = await BLIPConnection.connect(wsURL);
    try {
      const before = c.statistics;
      const small = pseudoRandomBytes(1000, 11);
      for (let i = 0; i < 20; i++) await echo(c, {}, small);
      const big = pseudoRandomBytes(300000, 12);
      await echo(c, {}, big);
      const after = c.statistics;
      const d = Object.fromEntries(Object.keys(after).map((k) => [k, after[k] - (before[k] ?? 0)]));
      expect(d.requestsSent === 21 && d.messagesSent === 21, `requests sent ${d.requestsSent}, messages sent ${d.messagesSent}`);
      expect(d.repliesReceived === 21 && d.messagesReceived === 21, `replies ${d.repliesReceived}, messages received ${d.messagesReceived}`);
      expect(d.requestsReceived === 0, `requests received ${d.requestsReceived}`);
      const payload = 20 * 1000 + 300000;
      expect(d.bytesSent > payload && d.bytesReceived > payload, `bytes sent ${d.bytesSent}, received ${d.bytesReceived}, payload ${payload}`);
      // 300 KB in frames of ≤ 16 384 bytes: at least 19 frames each way, plus one per small message.
      expect(d.framesSent >= 39 && d.framesReceived >= 39, `frames sent ${d.framesSent}, received ${d.framesReceived}`);
      expect(d.acksSent >= 1 && d.acksReceived >= 1, `ACKs sent ${d.acksSent}, received ${d.acksReceived}`);
      expect(after.maxUnacknowledgedBytes <= after.flowControlWindow, `max unacknowledged ${after.maxUnacknowledgedBytes}`);
      return `deltas ${JSON.stringify(d)}`;
    } finally {
      c.close(1000);
    }
  });

  if (connection) {
    const closing = await outcome(connection.close(1000, 'main checks done'));
    checks.push({ name: 'main connection closes', ok: !closing.error, detail: JSON.stringify(closing.value ?? describeError(closing.error)), ms: 0 });
  }

  // --- the peer closes: a second connection ---

  await check('server closes with 4001: pending requests fail once, closed resolves', async () => {
    const c = await BLIPConnection.connect(wsURL);
    let delayFailures = 0;
    let closeFailures = 0;
    const delay = c.sendRequest({ profile: 'delay', properties: { Milliseconds: '30000' } });
    delay.catch(() => delayFailures++);
    await sleep(50); // let the delay request reach the server first
    const closer = c.sendRequest({ profile: 'close-connection', properties: { 'Close-Code': '4001', 'Close-Reason': 'bye from swift' } });
    closer.catch(() => closeFailures++);
    const [d, x] = await Promise.all([outcome(delay), outcome(closer)]);
    const closed = await withTimeout(c.closed, 10000, '`closed`');
    for (const [what, r] of [['delay', d], ['close-connection', x]]) {
      expect(r.error instanceof BLIPConnectionClosedError, `${what}: expected BLIPConnectionClosedError, got ${r.error ? describeError(r.error) : 'a reply'}`);
      expect(r.error.code === 4001 && r.error.reason === 'bye from swift', `${what}: code ${r.error.code} reason ${JSON.stringify(r.error.reason)}`);
    }
    expect(closed.code === 4001 && closed.reason === 'bye from swift', `closed resolved with ${JSON.stringify(closed)}`);
    await sleep(50);
    expect(delayFailures === 1 && closeFailures === 1, `rejections: delay ${delayFailures}, close-connection ${closeFailures}`);
    const later = await outcome(c.sendRequest({ profile: 'echo' }));
    expect(later.error instanceof BLIPConnectionClosedError && later.error.code === 4001, `send after close: ${describeError(later.error)}`);
    return `both rejected once with 4001 "bye from swift"; closed ${JSON.stringify(closed)}`;
  });

  // --- we close: a third connection ---

  await check('local close(1000, "done") with a request pending', async () => {
    const c = await BLIPConnection.connect(wsURL);
    let failures = 0;
    const delay = c.sendRequest({ profile: 'delay', properties: { Milliseconds: '30000' } });
    delay.catch(() => failures++);
    await sleep(50);
    const closedInfo = await c.close(1000, 'done');
    const d = await outcome(delay);
    expect(d.error instanceof BLIPConnectionClosedError, `delay: expected BLIPConnectionClosedError, got ${d.error ? describeError(d.error) : 'a reply'}`);
    expect(closedInfo.code === 1000, `close() resolved with ${JSON.stringify(closedInfo)}`);
    expect((await c.closed) === closedInfo, '`closed` and close() resolved differently');
    const t = performance.now();
    const after = await outcome(c.sendRequest({ profile: 'echo', body: 'too late' }));
    const afterMs = performance.now() - t;
    expect(after.error instanceof BLIPConnectionClosedError, `send after close: ${after.error ? describeError(after.error) : 'it succeeded'}`);
    expect(afterMs < 100, `send after close took ${afterMs} ms to fail`);
    await sleep(50);
    expect(failures === 1, `the pending request rejected ${failures} times`);
    return `pending request: ${describeError(d.error)}; close → ${JSON.stringify(closedInfo)}; later send rejected in ${round(afterMs, 2)} ms`;
  });

  // --- the incoming size limit: a fourth connection ---

  await check('maxIncomingMessageSize: equal is accepted, one byte over closes with 1009', async () => {
    const c = await BLIPConnection.connect(wsURL, { maxIncomingMessageSize: 100000 });
    const fits = await c.sendRequest({ profile: 'source', properties: { Count: '100000', Data: 'random' } });
    expect(fits.body.length === 100000, `Count=limit: ${fits.body.length} bytes`);
    const other = outcome(c.sendRequest({ profile: 'delay', properties: { Milliseconds: '30000' } }));
    const over = await outcome(c.sendRequest({ profile: 'source', properties: { Count: '100001', Data: 'random' } }));
    const pending = await other;
    const closed = await withTimeout(c.closed, 10000, '`closed`');
    expect(over.error instanceof BLIPConnectionClosedError && over.error.code === 1009, `Count=limit+1: ${over.error ? describeError(over.error) : 'a reply'}`);
    expect(over.error.cause instanceof BLIPProtocolError, `cause ${over.error.cause}`);
    expect(pending.error instanceof BLIPConnectionClosedError && pending.error.code === 1009, `other pending request: ${describeError(pending.error)}`);
    expect(closed.code === 1009, `closed ${JSON.stringify(closed)}`);
    return `limit accepted; over → ${describeError(over.error)}`;
  });

  // --- captured fixtures, decoded with the connection's decoder ---

  await check('captured fixtures decode', async () => {
    const response = await fetch(new URL('fixtures/index.json', baseURL));
    expect(response.ok, `fixtures/index.json: HTTP ${response.status}`);
    const index = await response.json();
    let messages = 0;
    let failures = 0;
    for (const [scenario, directions] of Object.entries(index)) {
      result.fixtures[scenario] = {};
      for (const direction of ['c2s', 's2c']) {
        try {
          const frames = await Promise.all((directions[direction] || []).map(async (file) => {
            const r = await fetch(new URL(`fixtures/${file}`, baseURL));
            if (!r.ok) throw new Error(`${file}: HTTP ${r.status}`);
            return new Uint8Array(await r.arrayBuffer());
          }));
          const decoded = await decodeCapturedFrames(frames);
          result.fixtures[scenario][direction] = decoded;
          messages += decoded.messages.length;
        } catch (e) {
          result.fixtures[scenario][direction] = { error: e.message };
          failures++;
        }
      }
    }
    expect(failures === 0, `${failures} directions failed to decode`);
    return `${Object.keys(index).length} scenarios, ${messages} messages`;
  }, 120000);

  return result;
}

/** Handlers the server reaches through `call-peer`. */
function registerHandlers(c) {
  c.handle('page-echo', async (request) => ({
    properties: {
      'X-Page': 'yes',
      'X-Seen-Greeting': request.properties['X-Greeting'],
      'X-Seen-Empty': request.properties['X-Empty'],
    },
    body: `page got: ${request.text()}`,
  }));
  c.handle('page-reverse', (request) => ({ body: request.body.slice().reverse() }));
  c.handle('page-fail', () => {
    throw new BLIPError('PageDomain', 418, 'I am a teapot ☕');
  });
  c.handle('page-crash', async () => {
    throw new Error('plain Error thrown');
  });
  c.handle('page-urgency', (request) => ({ properties: { 'X-Urgent': String(request.urgent) } }));
  // ERRs that cannot be encoded as given: the client must fall back to BLIP 500.
  c.handle('page-nul-domain', () => {
    throw new BLIPError('Page\0Domain', 499, 'domain with a NUL');
  });
  c.handle('page-huge-error', () => {
    throw new BLIPError('PageDomain', 499, 'huge properties', { 'X-Huge': 'y'.repeat(200000) });
  });
}

/** Registers `page-slow`: waits `ms`, replies "slow <body>", and counts how many ran at once. */
function slowHandler(c, ms) {
  const state = { running: 0, maxRunning: 0, calls: 0 };
  c.handle('page-slow', async (request) => {
    state.calls++;
    state.running++;
    state.maxRunning = Math.max(state.maxRunning, state.running);
    try {
      await sleep(ms);
    } finally {
      state.running--;
    }
    return { body: `slow ${request.text()}` };
  });
  return state;
}

globalThis.runBLIPChecks = runBLIPChecks;
export { runBLIPChecks };

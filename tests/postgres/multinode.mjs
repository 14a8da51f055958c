// Several `runnel serve --store postgres://...` processes over one database, driven over HTTP.
// Run under scripts/pg-test-cluster --run (it exports RUNNEL_TEST_PG_URL and, for the database
// restart, RUNNEL_TEST_PG_CTL and RUNNEL_TEST_PG_SERVER_OPTS). No dependencies beyond Node 20.
//
//   node multinode.mjs RUNNEL_BINARY nodes      three nodes; plain, idempotent-producer and
//                                               conditional appends through different nodes; a
//                                               long-poll reader on the third node; one node is
//                                               kill -9ed and restarted mid-run; then one
//                                               pull-wake subscription used through all three
//   node multinode.mjs RUNNEL_BINARY db-restart PostgreSQL stopped and started mid-run: 503 +
//                                               Retry-After while it is down, nothing
//                                               acknowledged lost, service resumes by itself
//   node multinode.mjs RUNNEL_BINARY faults     under appends and a live reader: every runnel
//                                               session killed mid-transaction (three times),
//                                               then the whole database frozen (SIGSTOP) for
//                                               longer than the nodes' reply timeout: requests
//                                               answer 503/504 within a bound, never hang,
//                                               nothing acknowledged is lost or doubled, and
//                                               service resumes by itself
//   node multinode.mjs RUNNEL_BINARY failover   under scripts/pg-test-cluster --standby: two
//                                               nodes on the URL naming primary and standby
//                                               (target_session_attrs=read-write), writers and
//                                               waiting long-poll and SSE readers through both;
//                                               every process of the primary SIGKILLed, the
//                                               standby promoted; prints the time from the kill
//                                               to the first acknowledged append on each node;
//                                               no reader is ever told 404
//
// Checks (SEMANTICS A1/A8/S3 across nodes, N1 across nodes): every acknowledged append is
// present exactly once (at the position its acknowledgement named, for plain and conditional
// appends); an append whose outcome the client never learned is present at most once; every
// node returns the same sequence; the long-poll reader saw exactly that sequence. Every wait is
// bounded; the whole run takes well under 60 s.
import { execFile, execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import {
  OK, check, checks, log, position, readAll as readStream, request, sleep, startServe, stopServe,
  keyOf, verifyAcknowledged,
} from "../support/e2e.mjs";

const [binary, mode] = process.argv.slice(2);
// The failover run names both servers, so the nodes follow the promotion.
const pgUrl = mode === "failover" ? process.env.RUNNEL_TEST_PG_FAILOVER_URL : process.env.RUNNEL_TEST_PG_URL;
if (!binary || !["nodes", "db-restart", "faults", "failover"].includes(mode) || !pgUrl) {
  console.error("usage (under scripts/pg-test-cluster [--standby] --run): multinode.mjs RUNNEL_BINARY nodes|db-restart|faults|failover");
  console.error("(failover needs --standby)");
  process.exit(2);
}
const REQUEST_TIMEOUT_MS = 10000;
// The failover run holds its long-polls open longer, so readers are waiting when the primary dies.
const LONG_POLL_MS = mode === "failover" ? 8000 : 1500;
const work = mkdtempSync(join(tmpdir(), "runnel-multinode-"));
const nodes = [];

// ---- nodes --------------------------------------------------------------------------------

async function startNode(i, extra = []) {
  nodes[i] = await startServe(binary, ["--store", pgUrl, "--data", join(work, `data-${i}`),
                                       "--long-poll-timeout-ms", String(LONG_POLL_MS), ...extra],
                              { what: `node ${i}` });
  return nodes[i];
}

async function stopAll() {
  for (const n of nodes) await stopServe(n);
}

// ---- HTTP -----------------------------------------------------------------------------------

// One request through `node`; network failures and timeouts come back as { status: 0, error }.
const http = (node, method, path, { headers = {}, body, timeout = REQUEST_TIMEOUT_MS, signal } = {}) =>
  request(nodes[node].url, method, path, { headers, body, timeout, signal });

async function createStream(name) {
  const r = await http(0, "PUT", `/v1/stream/${name}`, { headers: { "Content-Type": "application/json" } });
  if (r.status !== 201 && r.status !== 200) throw new Error(`create ${name}: ${r.status} ${r.text}`);
}

// Catch-up reads from the beginning through `node`: every message, in order.
const readAll = (node, name) =>
  readStream((path) => http(node, "GET", path), name, `${name} via node ${node}`);

// A long-poll reader through `node` that collects every message until stopped.
function tail(node, name) {
  const state = { seen: [], stop: false, errors: 0, statuses: new Map(), done: null };
  const aborter = new AbortController();
  state.done = (async () => {
    let at = "-1";
    while (!state.stop) {
      const live = at === "-1" ? "" : "&live=long-poll";
      const r = await http(node, "GET", `/v1/stream/${name}?offset=${at}${live}`, {
        timeout: LONG_POLL_MS + REQUEST_TIMEOUT_MS, signal: aborter.signal,
      });
      if (aborter.signal.aborted) break;
      state.statuses.set(r.status, (state.statuses.get(r.status) ?? 0) + 1);
      if (r.status === 200) {
        state.seen.push(...JSON.parse(r.text));
        at = r.headers.get("stream-next-offset");
      } else if (r.status === 204) {
        at = r.headers.get("stream-next-offset") ?? at;
      } else {
        // 503 while the database is away: wait as Retry-After says, then go on.
        state.errors++;
        await sleep(r.status === 503 ? 1000 * Number(r.headers.get("retry-after") ?? 1) : 200);
      }
    }
  })();
  // Stops the reader at once (a long-poll still waiting is abandoned).
  state.end = async () => {
    state.stop = true;
    aborter.abort();
    await state.done;
  };
  return state;
}

// An SSE reader through `node` that collects every message until stopped. A data event counts
// once the control event after it names the next offset (a connection lost between the two is
// read again from the last offset); an error event or a lost connection is followed by a new
// request from that offset.
function sseTail(node, name) {
  const state = { seen: [], stop: false, statuses: new Map(), errorEvents: [], aborter: null, done: null };
  const count = (k) => state.statuses.set(k, (state.statuses.get(k) ?? 0) + 1);
  state.done = (async () => {
    let at = "-1";
    while (!state.stop) {
      state.aborter = new AbortController();
      let res;
      try {
        res = await fetch(`${nodes[node].url}/v1/stream/${name}?offset=${at}&live=sse`,
                          { signal: state.aborter.signal });
      } catch {
        count(0);
        if (!state.stop) await sleep(200);
        continue;
      }
      count(res.status);
      if (res.status !== 200) {
        await res.text().catch(() => "");
        await sleep(res.status === 503 ? 1000 * Number(res.headers.get("retry-after") ?? 1) : 200);
        continue;
      }
      const decoder = new TextDecoder();
      let buffered = "";
      let pending = null;
      try {
        for await (const bytes of res.body) {
          buffered += decoder.decode(bytes, { stream: true });
          for (let end; (end = buffered.indexOf("\n\n")) >= 0;) {
            const lines = buffered.slice(0, end).split("\n");
            buffered = buffered.slice(end + 2);
            const event = lines.find((l) => l.startsWith("event:"))?.slice(6).trim();
            const data = lines.filter((l) => l.startsWith("data:")).map((l) => l.slice(5).replace(/^ /, "")).join("\n");
            if (event === "data") {
              pending = JSON.parse(data);
            } else if (event === "control") {
              if (pending) state.seen.push(...pending);
              pending = null;
              at = JSON.parse(data).streamNextOffset;
            } else if (event === "error") {
              state.errorEvents.push(data);
            }
          }
        }
      } catch {
        // The connection broke (a node gone, or stopped by us): read again from `at`.
      }
      if (!state.stop) await sleep(100);
    }
  })();
  state.end = async () => {
    state.stop = true;
    state.aborter?.abort();
    await state.done;
  };
  return state;
}

// ---- verification ----------------------------------------------------------------------------

async function verify(name, acked, unknown, reader, nodeCount) {
  const views = [];
  for (let i = 0; i < nodeCount; i++) views.push(await readAll(i, name));
  const canon = JSON.stringify(views[0]);
  for (let i = 1; i < nodeCount; i++) {
    check(JSON.stringify(views[i]) === canon, `${name}: node ${i} returns a different sequence than node 0`);
  }
  const msgs = views[0];
  const { where, checkedPositions } = verifyAcknowledged(name, msgs, acked, unknown);
  if (reader) {
    check(JSON.stringify(reader.seen) === canon,
          `${name}: the long-poll reader saw ${reader.seen.length} messages, the stream has ${msgs.length} (or another order)`);
  }
  log(`${name}: ${msgs.length} messages, ${acked.length} acknowledged (${checkedPositions} at a checked position),`,
      `${unknown.size} with unknown outcome (${[...unknown].filter((k) => where.has(k)).length} present); identical on ${nodeCount} nodes`);
  return msgs;
}

// ---- writers ---------------------------------------------------------------------------------

// Plain appends, each through the next node in turn; never retried (a lost reply is "unknown").
async function plainWriter(w, index, name, nodeCount, until, acked, unknown, pauseMs) {
  for (let n = 0; performance.now() < until; n++) {
    const key = `${w}#${n}`;
    const node = (n + index) % nodeCount;
    if (!nodes[node]) { await sleep(20); continue; }
    const r = await http(node, "POST", `/v1/stream/${name}`, {
      headers: { "Content-Type": "application/json" }, body: JSON.stringify({ w, n }),
    });
    if (OK(r.status)) acked.push({ key, pos: position(r.headers.get("stream-next-offset")) });
    else if (r.status === 0 || r.status === 504 || r.status === 500) unknown.add(key);
    else if (r.status !== 503) check(false, `plain append ${key}: unexpected ${r.status} ${r.text}`);
    await sleep(pauseMs);
  }
}

// An idempotent producer: one request at a time; a request without a definite answer is resent
// at once with the same (epoch, seq) through the next node until it is acknowledged. The resend
// may race a transaction its dead node had already sent to the database: the store re-checks
// (epoch, seq) under the stream's row lock, so exactly one of them commits.
async function producer(p, index, name, nodeCount, until, acked, pauseMs) {
  let node = index % nodeCount;
  for (let seq = 0; performance.now() < until; seq++) {
    const key = `${p}#${seq}`;
    for (let attempt = 0; ; attempt++) {
      if (!check(attempt < 100, `producer ${key}: not acknowledged after 100 attempts`)) return;
      if (!nodes[node]) { node = (node + 1) % nodeCount; continue; }
      const r = await http(node, "POST", `/v1/stream/${name}`, {
        headers: { "Content-Type": "application/json", "Producer-Id": p, "Producer-Epoch": "0",
                   "Producer-Seq": String(seq) },
        body: JSON.stringify({ p, seq }),
      });
      if (OK(r.status)) { acked.push({ key }); break; }
      if (r.status !== 0 && r.status < 500) {
        check(false, `producer ${key}: unexpected ${r.status} ${r.text}`);
        return;
      }
      node = (node + 1) % nodeCount;
      if (r.status === 503) await sleep(200);
    }
    node = (node + 1) % nodeCount;
    await sleep(pauseMs);
  }
}

// Conditional appends (Stream-Expected-Offset): each attempt names the tail it expects; 409
// hands back the current tail, a lost reply is settled by asking any node for the tail again.
async function conditionalWriter(w, name, nodeCount, until, acked, unknown) {
  let expected = null;
  let conflicts = 0;
  for (let n = 0; performance.now() < until; n++) {
    const node = n % nodeCount;
    if (!nodes[node]) { await sleep(20); continue; }
    if (expected === null) {
      const h = await http(node, "HEAD", `/v1/stream/${name}`);
      if (h.status !== 200) { await sleep(100); continue; }
      expected = h.headers.get("stream-next-offset");
    }
    const key = `${w}#${n}`;
    const r = await http(node, "POST", `/v1/stream/${name}`, {
      headers: { "Content-Type": "application/json", "Stream-Expected-Offset": expected },
      body: JSON.stringify({ w, n }),
    });
    if (OK(r.status)) {
      const pos = position(r.headers.get("stream-next-offset"));
      check(pos === position(expected) + 1, `conditional ${key}: expected ${expected}, acknowledged at ${pos}`);
      acked.push({ key, pos });
      expected = r.headers.get("stream-next-offset");
    } else if (r.status === 409) {
      conflicts++;
      expected = r.headers.get("stream-next-offset");
      check(expected !== null, `conditional ${key}: 409 without Stream-Next-Offset`);
    } else {
      if (r.status !== 503) unknown.add(key);
      expected = null;
      await sleep(100);
    }
  }
  return conflicts;
}

// ---- scenarios -------------------------------------------------------------------------------

async function multiNode() {
  for (let i = 0; i < 3; i++) await startNode(i);
  log("nodes:", nodes.map((n) => n.url).join(" "));
  const streams = ["mn-a", "mn-b"];
  for (const s of streams) await createStream(s);
  const reader = tail(2, "mn-a");
  const runMs = 14000;
  const until = performance.now() + runMs;
  const per = Object.fromEntries(streams.map((s) => [s, { acked: [], unknown: new Set() }]));
  const jobs = [];
  let conflicts = 0;
  for (const s of streams) {
    const { acked, unknown } = per[s];
    for (let i = 0; i < 3; i++) jobs.push(plainWriter(`${s}-w${i}`, i, s, 3, until, acked, unknown, 25));
    for (let i = 0; i < 2; i++) jobs.push(producer(`${s}-p${i}`, i, s, 3, until, acked, 25));
    jobs.push(conditionalWriter(`${s}-c`, s, 3, until, acked, unknown).then((c) => (conflicts += c)));
  }
  // Mid-run: kill -9 node 1, leave it dead a while, start it again (on a new port).
  await sleep(runMs * 0.35);
  log("kill -9 node 1");
  const victim = nodes[1];
  nodes[1] = null;
  victim.proc.kill("SIGKILL");
  await victim.exited;
  await sleep(runMs * 0.2);
  await startNode(1);
  log("node 1 restarted at", nodes[1].url);
  await Promise.all(jobs);
  log(`writers done (${conflicts} conditional conflicts)`);
  // Let the reader catch up (bounded), then compare.
  const expectCount = async () => (await readAll(0, "mn-a")).length;
  const total = await expectCount();
  for (let t = 0; t < 100 && reader.seen.length < total; t++) await sleep(100);
  reader.stop = true;
  await reader.done;
  for (const s of streams) {
    const { acked, unknown } = per[s];
    await verify(s, acked, unknown, s === "mn-a" ? reader : null, 3);
    check(acked.filter((a) => a.key.includes("-c#")).length > 0, `${s}: no conditional append was acknowledged`);
    check(acked.filter((a) => a.key.includes("-p")).length > 0, `${s}: no producer append was acknowledged`);
  }
  await subscriptions();
  log("subscriptions shared across nodes");
}

// PROTOCOL.md 6-7 across nodes: a subscription made through one node is used through the
// others; links added at once through every node are all kept; pending work gets one wake
// event although three engines see it; claims racing through three nodes give one lease (the
// others 409 ALREADY_CLAIMED); the winner's token heartbeats and finishes through other nodes.
async function subscriptions() {
  const json = { "Content-Type": "application/json" };
  const call = (node, method, path, body, token) =>
    http(node, method, `/v1/stream/${path}`, {
      headers: token ? { ...json, Authorization: `Bearer ${token}` } : json,
      body: body === undefined ? undefined : JSON.stringify(body),
    });
  // Every node's key set lists every node's signing key (each node recorded its own).
  const keySets = [];
  for (let n = 0; n < 3; n++) {
    const k = await http(n, "GET", "/v1/stream/__ds/jwks.json", {});
    check(k.status === 200, `jwks through node ${n}: ${k.status}`);
    keySets.push(JSON.parse(k.text).keys.map((key) => key.kid));
  }
  const own = new Set(keySets.map((kids) => kids[0]));
  check(own.size === 3, `each node leads its key set with its own key: ${JSON.stringify(keySets)}`);
  for (const kids of keySets) {
    for (const kid of own) check(kids.includes(kid), `a key set misses ${kid}: ${JSON.stringify(keySets)}`);
  }
  await createStream("mn-wake");
  const config = { type: "pull-wake", pattern: "mn-sub/*", wake_stream: "mn-wake", lease_ttl_ms: 60000 };
  let r = await call(0, "PUT", "__ds/subscriptions/mn", config);
  check(r.status === 201, `subscription create: ${r.status} ${r.text}`);
  for (const n of [1, 2]) {
    r = await call(n, "PUT", "__ds/subscriptions/mn", config);
    check(r.status === 200, `re-confirm through node ${n}: ${r.status} ${r.text}`);
  }
  // Links added at once through all three nodes: every one is kept.
  const adds = [];
  for (let n = 0; n < 3; n++) {
    for (let i = 0; i < 4; i++) adds.push(call(n, "POST", "__ds/subscriptions/mn/streams", { streams: [`mn-x/${n}-${i}`] }));
  }
  for (const a of await Promise.all(adds)) check(a.status === 204, `add link: ${a.status} ${a.text}`);
  // A stream created through node 1 and appended to through node 2.
  r = await http(1, "PUT", "/v1/stream/mn-sub/one", { headers: json });
  check(r.status === 201, `create mn-sub/one: ${r.status}`);
  r = await http(2, "POST", "/v1/stream/mn-sub/one", { headers: json, body: '{"n":1}' });
  check(OK(r.status), `append mn-sub/one: ${r.status}`);
  let wakes = [];
  for (let t = 0; t < 100 && wakes.length === 0; t++) {
    await sleep(100);
    wakes = await readAll(0, "mn-wake");
  }
  check(wakes.length === 1, `one wake event expected, got ${JSON.stringify(wakes)}`);
  const got = JSON.parse((await call(2, "GET", "__ds/subscriptions/mn")).text);
  const linked = got.streams.map((l) => l.path).sort();
  check(linked.length === 13 && linked.includes("mn-sub/one"), `links: ${linked.join(" ")}`);
  // Claims racing through the three nodes.
  const claims = await Promise.all([0, 1, 2].map((n) => call(n, "POST", "__ds/subscriptions/mn/claim", { worker: `w${n}` })));
  const winners = claims.map((c, n) => ({ c, n })).filter(({ c }) => c.status === 200);
  check(winners.length === 1, `one claim must win: ${claims.map((c) => c.status).join(" ")}`);
  for (const c of claims) {
    if (c.status !== 200) check(c.status === 409 && c.text.includes("ALREADY_CLAIMED"), `losing claim: ${c.status} ${c.text}`);
  }
  if (winners.length !== 1) return;
  const won = JSON.parse(winners[0].c.text);
  check(won.generation === wakes[0]?.generation, `claimed generation ${won.generation}, woken ${wakes[0]?.generation}`);
  const other = (winners[0].n + 1) % 3;
  const third = (winners[0].n + 2) % 3;
  const wake = { wake_id: won.wake_id, generation: won.generation };
  r = await call(other, "POST", "__ds/subscriptions/mn/ack", wake, won.token);
  check(r.status === 200, `heartbeat through node ${other}: ${r.status} ${r.text}`);
  const tail = won.streams.find((s) => s.path === "mn-sub/one")?.tail_offset;
  const done = { ...wake, acks: [{ stream: "mn-sub/one", offset: tail }], done: true };
  r = await call(third, "POST", "__ds/subscriptions/mn/ack", done, won.token);
  check(r.status === 200 && JSON.parse(r.text).next_wake === false, `done through node ${third}: ${r.status} ${r.text}`);
  r = await call(other, "POST", "__ds/subscriptions/mn/ack", done, won.token);
  check(r.status === 409, `a finished wake is fenced on every node: ${r.status}`);
  const after = JSON.parse((await call(winners[0].n, "GET", "__ds/subscriptions/mn")).text);
  check(after.streams.find((l) => l.path === "mn-sub/one")?.acked_offset === tail, "acked offset not shared");
  await sleep(1500);
  wakes = await readAll(1, "mn-wake");
  check(wakes.length === 1, `no further wake expected, got ${wakes.length}`);
  r = await call(1, "DELETE", "__ds/subscriptions/mn");
  check(r.status === 204, `delete: ${r.status}`);
  r = await call(0, "GET", "__ds/subscriptions/mn");
  check(r.status === 404, `deleted through node 1, node 0 answers ${r.status}`);
}

function pgCtl(...args) {
  const cmd = process.env.RUNNEL_TEST_PG_CTL;
  if (!cmd) throw new Error("RUNNEL_TEST_PG_CTL is not set: run under scripts/pg-test-cluster --run");
  const words = cmd.split(" ").filter(Boolean);
  execFileSync(words[0], [...words.slice(1), ...args], { stdio: ["ignore", "ignore", "inherit"] });
}

async function dbRestart() {
  for (let i = 0; i < 2; i++) await startNode(i);
  log("nodes:", nodes.map((n) => n.url).join(" "));
  await createStream("rs");
  const reader = tail(1, "rs");
  const acked = [];
  const unknown = new Set();
  let n = 0;
  const append = async (node) => {
    const key = `w#${n}`;
    const r = await http(node, "POST", "/v1/stream/rs", {
      headers: { "Content-Type": "application/json" }, body: JSON.stringify({ w: "w", n: n++ }),
    });
    if (OK(r.status)) acked.push({ key, pos: position(r.headers.get("stream-next-offset")) });
    else if (r.status !== 503) unknown.add(key);
    return r;
  };
  for (let i = 0; i < 50; i++) check(OK((await append(i % 2)).status), "append before the restart");
  await sleep(300);
  log("stopping PostgreSQL");
  pgCtl("stop", "-m", "fast");
  // While it is down: every request fails fast with 503, Retry-After and a stable error code.
  const FAST_MS = 3000;
  for (let i = 0; i < 6; i++) {
    const r = i % 3 === 2 ? await http(i % 2, "GET", "/v1/stream/rs?offset=-1") : await append(i % 2);
    check(r.status === 503, `request ${i} while the database is down: status ${r.status} ${r.text ?? r.error}`);
    check(r.status !== 503 || r.headers.get("retry-after") === "1", `request ${i}: Retry-After missing`);
    if (r.status === 503) {
      const code = JSON.parse(r.text).error?.code;
      check(code === "unavailable", `request ${i}: error code ${code}, want 'unavailable'`);
    }
    check(r.ms < FAST_MS, `request ${i} took ${r.ms.toFixed(0)} ms while the database was down (bound ${FAST_MS})`);
  }
  log("starting PostgreSQL");
  const opts = process.env.RUNNEL_TEST_PG_SERVER_OPTS;
  pgCtl("start", ...(opts ? ["-o", opts] : []));
  // Service resumes by itself: the first append after the restart that succeeds, within a bound.
  const back = performance.now();
  let resumed = false;
  for (let t = 0; t < 100 && !resumed; t++) {
    const r = await append(t % 2);
    resumed = OK(r.status);
    if (!resumed) await sleep(100);
  }
  check(resumed, "appends did not resume within 100 attempts after the database came back");
  log(`appends resumed ${(performance.now() - back).toFixed(0)} ms after the restart`);
  for (let i = 0; i < 50; i++) check(OK((await append(i % 2)).status), "append after the restart");
  const total = acked.length + [...unknown].length;
  for (let t = 0; t < 100 && reader.seen.length < acked.length; t++) await sleep(100);
  reader.stop = true;
  await reader.done;
  const msgs = await verify("rs", acked, unknown, reader, 2);
  // One writer, one request at a time: the acknowledged appends are in acknowledgement order.
  const order = msgs.map(keyOf).filter((k) => acked.some((a) => a.key === k));
  check(JSON.stringify(order) === JSON.stringify(acked.map((a) => a.key)), "acknowledged appends out of order");
  check(total >= 100, "too few appends");
}

// The PostgreSQL server's processes (postmaster and children), for SIGSTOP/SIGCONT.
function pgProcesses() {
  const ctl = process.env.RUNNEL_TEST_PG_CTL ?? "";
  const dir = ctl.match(/-D (\S+)/)?.[1];
  if (!dir) throw new Error("cannot find the data directory in RUNNEL_TEST_PG_CTL");
  const postmaster = Number(readFileSync(join(dir, "postmaster.pid"), "utf8").split("\n")[0]);
  const children = execFileSync("pgrep", ["-P", String(postmaster)], { encoding: "utf8" })
    .split("\n").filter(Boolean).map(Number);
  return [postmaster, ...children];
}

// Kills every session of the runnel nodes (application_name 'runnel') mid-whatever-it-does.
function terminateSessions() {
  const psql = join(process.env.RUNNEL_TEST_PG_BINDIR, "psql");
  const out = execFileSync(psql, [pgUrl, "-Atc",
    "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = 'runnel'"],
    { encoding: "utf8" });
  return Number(out.trim());
}

async function faults() {
  const REPLY_MS = 2000;
  for (let i = 0; i < 2; i++) await startNode(i, ["--postgres-reply-timeout-ms", String(REPLY_MS)]);
  log("nodes:", nodes.map((n) => n.url).join(" "));
  await createStream("fx");
  const reader = tail(1, "fx");
  const acked = [];
  const unknown = new Set();
  const statuses = new Map();
  let slowest = 0;
  let stop = false;
  // Four writers, one request at a time each, through both nodes; never retried.
  const writer = async (w) => {
    for (let n = 0; !stop; n++) {
      const key = `${w}#${n}`;
      const r = await http(n % 2, "POST", "/v1/stream/fx", {
        headers: { "Content-Type": "application/json" }, body: JSON.stringify({ w, n }),
      });
      statuses.set(r.status, (statuses.get(r.status) ?? 0) + 1);
      slowest = Math.max(slowest, r.ms ?? 0);
      if (OK(r.status)) acked.push({ key, pos: position(r.headers.get("stream-next-offset")) });
      else if (r.status === 503) check(r.headers.get("retry-after") === "1", `${key}: 503 without Retry-After`);
      else if (r.status === 504 || r.status === 0) unknown.add(key);
      else check(false, `append ${key}: unexpected ${r.status} ${r.text}`);
      await sleep(r.status === 503 ? 200 : 5);
    }
  };
  const writers = [0, 1, 2, 3].map((w) => writer(`w${w}`));
  await sleep(500);
  for (let round = 0; round < 3; round++) {
    const killed = terminateSessions();
    log(`terminated ${killed} runnel sessions`);
    await sleep(700);
  }
  // Frozen: connections stay open and nothing answers.
  const frozen = pgProcesses();
  log(`freezing PostgreSQL (${frozen.length} processes) for ${6 * REPLY_MS + 1500} ms`);
  const froze = performance.now();
  for (const pid of frozen) process.kill(pid, "SIGSTOP");
  try {
    // A request while frozen answers within the reply timeout and a margin, never hangs.
    const r = await http(0, "GET", "/v1/stream/fx?offset=-1", { timeout: 4 * REPLY_MS + 5000 });
    check(r.status === 503, `a read while the database is frozen: ${r.status} ${r.text ?? r.error}`);
    check(r.ms < 3 * REPLY_MS + 2000, `a read while frozen took ${r.ms?.toFixed(0)} ms (reply timeout ${REPLY_MS})`);
    const left = froze + 6 * REPLY_MS + 1500 - performance.now();
    if (left > 0) await sleep(left);
  } finally {
    for (const pid of frozen) process.kill(pid, "SIGCONT");
  }
  log("PostgreSQL thawed");
  const back = performance.now();
  let resumed = false;
  for (let t = 0; t < 200 && !resumed; t++) {
    const r = await http(t % 2, "HEAD", "/v1/stream/fx");
    resumed = r.status === 200;
    if (!resumed) await sleep(100);
  }
  check(resumed, "the nodes did not serve again within 20 s of the thaw");
  log(`served again ${(performance.now() - back).toFixed(0)} ms after the thaw`);
  await sleep(1500);
  stop = true;
  await Promise.all(writers);
  check(slowest < 3 * REPLY_MS + 2000, `the slowest append took ${slowest.toFixed(0)} ms (reply timeout ${REPLY_MS})`);
  // The freeze outlasted the reply timeout several times over: appends in it were answered
  // 503 (nothing written) or 504 (outcome unknown), not held until the thaw.
  check((statuses.get(503) ?? 0) + (statuses.get(504) ?? 0) > 0,
        "no append was answered 503 or 504 while the database was frozen");
  log("append answers:", JSON.stringify(Object.fromEntries(statuses)));
  for (let t = 0; t < 100 && reader.seen.length < acked.length; t++) await sleep(100);
  reader.stop = true;
  await reader.done;
  check(acked.length >= 100, `too few acknowledged appends (${acked.length})`);
  await verify("fx", acked, unknown, reader, 2);
}

// Every process of the primary (postmaster and children), from its data directory's pid file.
function primaryProcesses() {
  const dir = process.env.RUNNEL_TEST_PG_PRIMARY_DATA;
  if (!dir) throw new Error("RUNNEL_TEST_PG_PRIMARY_DATA is not set: run under scripts/pg-test-cluster --standby");
  const postmaster = Number(readFileSync(join(dir, "postmaster.pid"), "utf8").split("\n")[0]);
  const children = execFileSync("pgrep", ["-P", String(postmaster)], { encoding: "utf8" })
    .split("\n").filter(Boolean).map(Number);
  return [postmaster, ...children];
}

// `$RUNNEL_TEST_PG_STANDBY_CTL promote`, without blocking the event loop (readers and writers
// keep running and timing while it waits).
function promoteStandby() {
  const words = (process.env.RUNNEL_TEST_PG_STANDBY_CTL ?? "").split(" ").filter(Boolean);
  if (words.length === 0) throw new Error("RUNNEL_TEST_PG_STANDBY_CTL is not set");
  return new Promise((resolve, reject) => {
    execFile(words[0], [...words.slice(1), "promote"], (err, stdout, stderr) =>
      err ? reject(new Error(`promote: ${err.message} ${stderr}`)) : resolve());
  });
}

// A synchronous standby takes over: nothing acknowledged before the kill may be missing, and
// no reader may be told that a stream is gone. Two streams: `fo` is appended to throughout
// (readers are answered all the time), `fo-quiet` gets nothing between its first records and
// the end of the failover, so its readers are certainly waiting when the primary dies.
async function failover() {
  const REPLY_MS = 5000;
  for (let i = 0; i < 2; i++) await startNode(i, ["--postgres-reply-timeout-ms", String(REPLY_MS)]);
  log("nodes:", nodes.map((n) => n.url).join(" "), "store:", pgUrl);
  await createStream("fo");
  await createStream("fo-quiet");
  const quietAcked = [];
  const quietUnknown = new Set();
  const quietAppend = async (n) => {
    for (let attempt = 0; attempt < 100; attempt++) {
      const r = await http(n % 2, "POST", "/v1/stream/fo-quiet", {
        headers: { "Content-Type": "application/json" }, body: JSON.stringify({ w: "q", n }),
      });
      if (OK(r.status)) return quietAcked.push({ key: `q#${n}`, pos: position(r.headers.get("stream-next-offset")) });
      if (r.status !== 503) return quietUnknown.add(`q#${n}`);
      await sleep(100);
    }
    check(false, `quiet append ${n}: 503 for 100 attempts`);
  };
  for (let n = 0; n < 5; n++) await quietAppend(n);
  const readers = [];
  for (const name of ["fo", "fo-quiet"]) {
    for (let node = 0; node < 2; node++) {
      readers.push({ what: `long-poll ${name} via node ${node}`, name, r: tail(node, name) });
      readers.push({ what: `SSE ${name} via node ${node}`, name, r: sseTail(node, name) });
    }
  }
  const acked = [];
  const unknown = new Set();
  const statuses = new Map();
  let killedAt = null;
  const firstAfterKill = [null, null];
  let stop = false;
  // Four writers, one request at a time each, alternating nodes; never retried.
  const writer = async (w) => {
    for (let n = 0; !stop; n++) {
      const key = `${w}#${n}`;
      const node = n % 2;
      const sent = performance.now();
      const r = await http(node, "POST", "/v1/stream/fo", {
        headers: { "Content-Type": "application/json" }, body: JSON.stringify({ w, n }),
      });
      statuses.set(r.status, (statuses.get(r.status) ?? 0) + 1);
      if (OK(r.status)) {
        acked.push({ key, pos: position(r.headers.get("stream-next-offset")) });
        if (killedAt !== null && sent > killedAt && firstAfterKill[node] === null) {
          firstAfterKill[node] = performance.now() - killedAt;
        }
      } else if (r.status === 503) {
        check(r.headers.get("retry-after") === "1", `${key}: 503 without Retry-After`);
      } else if (r.status === 504 || r.status === 0) {
        unknown.add(key);
      } else {
        check(false, `append ${key}: unexpected ${r.status} ${r.text}`);
      }
      await sleep(r.status === 503 ? 50 : 5);
    }
  };
  const writers = [0, 1, 2, 3].map((w) => writer(`w${w}`));
  await sleep(3000);
  const before = acked.length;
  const victims = primaryProcesses();
  for (const pid of victims) process.kill(pid, "SIGKILL");
  killedAt = performance.now();
  log(`SIGKILL to every process of the primary (${victims.length}) after ${before} acknowledged appends`);
  await promoteStandby();
  const promotedMs = performance.now() - killedAt;
  log(`standby promoted ${promotedMs.toFixed(0)} ms after the kill`);
  for (let t = 0; t < 300 && firstAfterKill.includes(null); t++) await sleep(100);
  check(!firstAfterKill.includes(null), `appends did not resume on every node within 30 s: ${JSON.stringify(firstAfterKill)}`);
  // The promotion is PostgreSQL's part; what follows it (noticing the new primary) is the nodes'.
  log(`time to service (kill -> first acknowledged append): node 0 ${firstAfterKill[0]?.toFixed(0)} ms,`,
      `node 1 ${firstAfterKill[1]?.toFixed(0)} ms; the promotion took ${promotedMs.toFixed(0)} ms`);
  await sleep(2000);
  stop = true;
  await Promise.all(writers);
  log("append answers:", JSON.stringify(Object.fromEntries(statuses)));
  check(acked.length > before, "no append acknowledged after the failover");
  for (let n = 5; n < 10; n++) await quietAppend(n);
  // Readers catch up (bounded), then end.
  const lengths = {
    fo: (await readAll(0, "fo")).length,
    "fo-quiet": (await readAll(0, "fo-quiet")).length,
  };
  for (let t = 0; t < 150 && readers.some(({ name, r }) => r.seen.length < lengths[name]); t++) await sleep(100);
  log("readers caught up:", readers.map(({ r }) => r.seen.length).join(" "), JSON.stringify(lengths));
  await Promise.all(readers.map(({ r }) => r.end()));
  const contents = {
    fo: await verify("fo", acked, unknown, null, 2),
    "fo-quiet": await verify("fo-quiet", quietAcked, quietUnknown, null, 2),
  };
  check(quietAcked.length === 10, `fo-quiet: ${quietAcked.length} of 10 appends acknowledged`);
  for (const { what, name, r } of readers) {
    const answers = JSON.stringify(Object.fromEntries(r.statuses));
    check(JSON.stringify(r.seen) === JSON.stringify(contents[name]),
          `${what}: saw ${r.seen.length} messages, the stream has ${contents[name].length} (or another order)`);
    check(!r.statuses.has(404) && !r.statuses.has(410), `${what}: told the stream is gone: ${answers}`);
    for (const e of r.errorEvents ?? []) {
      check(JSON.parse(e).error?.code === "unavailable", `${what}: error event ${e}`);
    }
    log(`${what}: ${r.seen.length} messages, answers ${answers}` +
        (r.errorEvents ? `, ${r.errorEvents.length} error events` : ""));
  }
}

let status = 0;
try {
  if (mode === "nodes") await multiNode();
  else if (mode === "failover") await failover();
  else if (mode === "faults") await faults();
  else await dbRestart();
} catch (e) {
  console.error("FAIL:", e.stack ?? e);
  checks.failures++;
} finally {
  await stopAll();
  rmSync(work, { recursive: true, force: true });
}
if (checks.failures > 0) {
  console.error(`${checks.failures} check(s) failed`);
  status = 1;
} else {
  log(`${mode}: all checks passed`);
}
process.exit(status);

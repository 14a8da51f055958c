// runnel behind the caching front of deploy/nginx/runnel.conf, on loopback: the fan-out the file
// promises, and that a read which needed a token is never shared.
//
//   node cache_front_e2e.mjs RUNNEL_BINARY NGINX_BINARY
//
// The nginx configuration under test is deploy/nginx/runnel.conf itself, with only its four
// values marked CHANGE replaced (upstream, listen address, cache directory, access log); the
// run fails if one of them is not found. Upstream requests are counted on runnel's side
// (/metrics: GET requests on the stream route), so a request nginx answered from its cache does
// not count, and one it let through does, whatever the reason.
//
// 1. Catch-up: 200 readers read a 2,000-record stream from the beginning at once through nginx.
//    Upstream cost: about one request per chunk (the chunks a single reader needs).
// 2. Live: 300 long-poll readers wait at the tail while 50 records are appended one by one.
//    Upstream cost: at most a quarter of readers × appends (one per record per reader
//    without the cache).
// 3. SSE through the front: three readers on the same URL each get an appended record.
// 4. Tokens: a second server with tokens; the same read with two tokens, twice each, reaches
//    runnel every time (private, Vary: Authorization, never a cache hit), and the same read
//    without a token is refused, not served from the cache. A third server with the same tokens
//    and `--public-cache-scope global` answers public: there the four reads cost one.
//
// Every reader must get every record once, in order. Every wait is bounded; the run takes well
// under a minute. Node 20, no dependencies.
import { execFileSync, spawn } from "node:child_process";
import { chmodSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { OK, check, checks, log, request, sleep, startServe, stopServe } from "../support/e2e.mjs";

const [binary, nginx] = process.argv.slice(2);
if (!binary || !nginx) {
  console.error("usage: cache_front_e2e.mjs RUNNEL_BINARY NGINX_BINARY");
  process.exit(2);
}
const CONF = join(dirname(fileURLToPath(import.meta.url)), "../../deploy/nginx/runnel.conf");
const CATCHUP_READERS = 200;
const CATCHUP_RECORDS = 2000;
const LIVE_READERS = 300;
const LIVE_APPENDS = 50;
const SSE_READERS = 3;
const LONG_POLL_MS = 20000;
// How long the readers of one case may take at most (a shared, loaded 2-core machine needs
// about a quarter of it).
const READ_BOUND_MS = 60000;
const work = mkdtempSync(join(tmpdir(), "runnel-cache-front-"));
chmodSync(work, 0o755);
const started = [];
const fronts = [];

// A free loopback port (bound and released; nginx binds it right after).
function freePort() {
  return new Promise((resolve, reject) => {
    const srv = createServer();
    srv.on("error", reject);
    srv.listen(0, "127.0.0.1", () => {
      const { port } = srv.address();
      srv.close(() => resolve(port));
    });
  });
}

// Starts nginx with deploy/nginx/runnel.conf in front of `upstream` (host:port). Returns
// { url, proc, exited, accessLog }.
async function startFront(name, upstream) {
  const dir = join(work, name);
  for (const d of ["", "cache", "tmp"]) mkdirSync(join(dir, d), { recursive: true });
  // nginx's workers drop to an unprivileged user when it runs as root: let them write.
  chmodSync(dir, 0o755);
  chmodSync(join(dir, "cache"), 0o777);
  chmodSync(join(dir, "tmp"), 0o777);
  const port = await freePort();
  const accessLog = join(dir, "access.log");
  let conf = readFileSync(CONF, "utf8");
  const replace = (from, to) => {
    if (!check(conf.includes(from), `deploy/nginx/runnel.conf no longer contains "${from}"`)) return;
    conf = conf.replace(from, to);
  };
  replace("server 127.0.0.1:4437;", `server ${upstream};`);
  replace("listen 127.0.0.1:8080;", `listen 127.0.0.1:${port};`);
  replace("proxy_cache_path /var/cache/nginx/runnel ", `proxy_cache_path ${join(dir, "cache")} `);
  replace("access_log /var/log/nginx/runnel.access.log ", `access_log ${accessLog} `);
  writeFileSync(join(dir, "runnel.conf"), conf);
  const tmp = join(dir, "tmp");
  writeFileSync(join(dir, "nginx.conf"), `
daemon off;
worker_processes 1;
worker_rlimit_nofile 8192;
pid ${join(dir, "nginx.pid")};
error_log ${join(dir, "error.log")} warn;
events { worker_connections 4096; }
http {
  client_body_temp_path ${tmp}/body;
  proxy_temp_path ${tmp}/proxy;
  fastcgi_temp_path ${tmp}/fastcgi;
  uwsgi_temp_path ${tmp}/uwsgi;
  scgi_temp_path ${tmp}/scgi;
  include ${join(dir, "runnel.conf")};
}
`);
  const proc = spawn(nginx, ["-p", dir, "-c", join(dir, "nginx.conf"), "-e", join(dir, "error.log")],
                     { stdio: ["ignore", "pipe", "pipe"] });
  let out = "";
  proc.stdout.on("data", (d) => (out += d));
  proc.stderr.on("data", (d) => (out += d));
  // A binary that cannot be started (not installed: run scripts/install-deps) says so here.
  proc.on("error", (e) => (out += `${e}\n`));
  const exited = new Promise((r) => {
    proc.on("exit", r);
    proc.on("error", r);
  });
  const front = { url: `http://127.0.0.1:${port}`, proc, exited, accessLog };
  fronts.push(front);
  for (let t = 0; t < 100; t++) {
    const r = await request(front.url, "GET", "/healthz", { timeout: 1000 });
    if (r.status === 200) return front;
    if (proc.exitCode !== null || out.includes("ENOENT")) break;
    await sleep(50);
  }
  let errors = "";
  try { errors = readFileSync(join(dir, "error.log"), "utf8"); } catch {}
  throw new Error(`nginx did not start:\n${out}\n${errors}`);
}

async function stopFront(front) {
  if (front.proc.exitCode !== null || front.proc.signalCode !== null) return;
  front.proc.kill("SIGQUIT"); // graceful: the master ends its workers, then itself
  await Promise.race([front.exited, sleep(5000)]);
  if (front.proc.exitCode === null && front.proc.signalCode === null) front.proc.kill("SIGKILL");
}

// GET requests on the stream route that reached `server` so far (its /metrics).
async function upstreamReads(server) {
  const r = await request(server.url, "GET", "/metrics", { headers: server.auth ?? {} });
  if (r.status !== 200) throw new Error(`metrics: ${r.status} ${r.text}`);
  let total = 0;
  for (const line of r.text.split("\n")) {
    if (line.startsWith('runnel_http_requests_total{route="stream",method="GET"')) {
      total += Number(line.slice(line.lastIndexOf(" ") + 1));
    }
  }
  return total;
}

const json = { "Content-Type": "application/json" };

// A reader that follows `name` through `base` from the beginning: catch-up pages, then
// (`live`) long-polls, until it holds `want` records or is stopped. Collects the records'
// `i` fields and the answers.
function reader(base, name, { live, want, headers = {} }) {
  const state = { seen: [], statuses: new Map(), hits: 0, aborter: new AbortController(), done: null };
  state.done = (async () => {
    let at = "-1";
    let cursor = null;
    for (let n = 0; n < 10000 && state.seen.length < want; n++) {
      let path = `/v1/stream/${name}?offset=${at}`;
      if (live && at !== "-1") path += `&live=long-poll${cursor ? `&cursor=${cursor}` : ""}`;
      const r = await request(base, "GET", path, { headers, timeout: LONG_POLL_MS + 10000, signal: state.aborter.signal });
      if (state.aborter.signal.aborted) return;
      state.statuses.set(r.status, (state.statuses.get(r.status) ?? 0) + 1);
      if (r.headers?.get("x-cache-status") === "HIT") state.hits++;
      if (r.status === 200) {
        state.seen.push(...JSON.parse(r.text).map((m) => m.i));
        at = r.headers.get("stream-next-offset");
        cursor = r.headers.get("stream-cursor");
        if (!live && r.headers.get("stream-up-to-date") === "true") return;
      } else if (r.status === 204) {
        at = r.headers.get("stream-next-offset") ?? at;
        cursor = r.headers.get("stream-cursor") ?? cursor;
      } else {
        await sleep(200);
      }
    }
  })();
  return state;
}

function checkReaders(what, readers, count) {
  const expect = JSON.stringify(Array.from({ length: count }, (_, i) => i));
  let exact = 0;
  for (const [k, r] of readers.entries()) {
    if (JSON.stringify(r.seen) === expect) {
      exact++;
    } else if (exact + 5 > k) {
      // The first few that differ, named; the count says how many in all.
      console.error(`${what}: reader ${k} got ${r.seen.length} records (want ${count} in order):`,
                    JSON.stringify(Object.fromEntries(r.statuses)));
    }
  }
  check(exact === readers.length, `${what}: ${readers.length - exact} of ${readers.length} readers did not get every record once, in order`);
  return exact;
}

async function catchUp(server, front) {
  await request(server.url, "PUT", "/v1/stream/big", { headers: json });
  // About 1.4 KB a record: the 2,000 records span a few of runnel's 1 MiB read chunks.
  const pad = "x".repeat(1400);
  for (let i = 0; i < CATCHUP_RECORDS; i += 100) {
    const batch = Array.from({ length: 100 }, (_, k) => ({ i: i + k, pad }));
    const r = await request(server.url, "POST", "/v1/stream/big", { headers: json, body: JSON.stringify(batch) });
    if (!OK(r.status)) throw new Error(`append to big: ${r.status} ${r.text}`);
  }
  // The chunks one reader needs, read straight from runnel.
  const one = reader(server.url, "big", { live: false, want: CATCHUP_RECORDS });
  await one.done;
  const chunks = one.statuses.get(200) ?? 0;
  check(chunks >= 2, `the ${CATCHUP_RECORDS}-record stream fits in ${chunks} chunk(s): the test needs several`);
  const before = await upstreamReads(server);
  const t0 = performance.now();
  const readers = Array.from({ length: CATCHUP_READERS }, () => reader(front.url, "big", { live: false, want: CATCHUP_RECORDS }));
  await Promise.race([Promise.all(readers.map((r) => r.done)), sleep(READ_BOUND_MS)]);
  const ms = performance.now() - t0;
  const upstream = (await upstreamReads(server)) - before;
  for (const r of readers) r.aborter.abort();
  const exact = checkReaders("catch-up", readers, CATCHUP_RECORDS);
  const hits = readers.reduce((a, r) => a + r.hits, 0);
  log(`catch-up fan-out: ${CATCHUP_READERS} readers x ${CATCHUP_RECORDS} records (${chunks} chunks):`,
      `${upstream} upstream requests for ${CATCHUP_READERS * chunks} reader requests (${hits} cache hits),`,
      `${exact}/${CATCHUP_READERS} readers exact, ${ms.toFixed(0)} ms`);
  // About one upstream request per chunk: a chunk's first request fills the cache and the lock
  // holds every other reader of it until then. Slack for a reader that asks just as an entry
  // is refreshed.
  check(upstream >= chunks, `catch-up: ${upstream} upstream requests for ${chunks} chunks: the readers cannot have read through nginx`);
  check(upstream <= 2 * chunks, `catch-up: ${upstream} upstream requests for ${chunks} chunks (bound ${2 * chunks})`);
}

async function liveFanOut(server, front) {
  await request(server.url, "PUT", "/v1/stream/live", { headers: json });
  const before = await upstreamReads(server);
  const readers = Array.from({ length: LIVE_READERS }, () => reader(front.url, "live", { live: true, want: LIVE_APPENDS }));
  await sleep(500);
  const t0 = performance.now();
  for (let i = 0; i < LIVE_APPENDS; i++) {
    const r = await request(server.url, "POST", "/v1/stream/live", { headers: json, body: JSON.stringify({ i }) });
    if (!OK(r.status)) throw new Error(`append to live: ${r.status} ${r.text}`);
    await sleep(100);
  }
  await Promise.race([Promise.all(readers.map((r) => r.done)), sleep(READ_BOUND_MS)]);
  const ms = performance.now() - t0;
  const upstream = (await upstreamReads(server)) - before;
  for (const r of readers) r.aborter.abort();
  const exact = checkReaders("live", readers, LIVE_APPENDS);
  const requests = readers.reduce((a, r) => a + [...r.statuses.values()].reduce((x, y) => x + y, 0), 0);
  const bound = (LIVE_READERS * LIVE_APPENDS) / 4;
  log(`live fan-out: ${LIVE_READERS} long-poll readers x ${LIVE_APPENDS} appends (100 ms apart):`,
      `${upstream} upstream requests for ${requests} reader requests (bound ${bound}),`,
      `${exact}/${LIVE_READERS} readers exact, last record seen by all ${ms.toFixed(0)} ms after the first append`);
  check(upstream <= bound, `live: ${upstream} upstream requests (bound readers x appends / 4 = ${bound})`);
}

// SSE readers through the front, several on the same URL, each receive a record appended while
// they wait, within a bound (SSE goes to the front's location without cache and buffering).
async function sseThrough(server, front) {
  await request(server.url, "PUT", "/v1/stream/sse", { headers: json });
  const aborter = new AbortController();
  const readers = [];
  for (let k = 0; k < SSE_READERS; k++) {
    const got = [];
    const reading = (async () => {
      const res = await fetch(`${front.url}/v1/stream/sse?offset=-1&live=sse`, { signal: aborter.signal });
      check(res.status === 200 && res.headers.get("content-type") === "text/event-stream",
            `SSE through the front: ${res.status} ${res.headers.get("content-type")}`);
      const decoder = new TextDecoder();
      let buffered = "";
      for await (const bytes of res.body) {
        buffered += decoder.decode(bytes, { stream: true });
        for (let end; (end = buffered.indexOf("\n\n")) >= 0;) {
          const lines = buffered.slice(0, end).split("\n");
          buffered = buffered.slice(end + 2);
          if (lines.includes("event: data")) {
            got.push(...JSON.parse(lines.filter((l) => l.startsWith("data:")).map((l) => l.slice(5)).join("\n")));
          }
        }
      }
    })().catch(() => {}); // ends when aborted below
    readers.push({ got, reading });
  }
  await sleep(500);
  const sent = performance.now();
  await request(server.url, "POST", "/v1/stream/sse", { headers: json, body: JSON.stringify({ i: 7 }) });
  for (let t = 0; t < 60 && readers.some((r) => r.got.length === 0); t++) await sleep(50);
  const ms = performance.now() - sent;
  aborter.abort();
  await Promise.all(readers.map((r) => r.reading));
  const exact = readers.filter((r) => JSON.stringify(r.got) === JSON.stringify([{ i: 7 }])).length;
  check(exact === SSE_READERS, `SSE through the front: ${exact} of ${SSE_READERS} readers got the record within 3 s`);
  log(`SSE through the front: ${exact} of ${SSE_READERS} readers on one URL got the appended record within ${ms.toFixed(0)} ms`);
}

// A server with tokens: reads that needed a token are private and never answered from the
// cache, for the same or another token, and a read without a token is refused.
async function tokens() {
  const data = join(work, "tokens-data");
  mkdirSync(data);
  const mint = () => execFileSync(binary, ["token", "--data", data, "create", "--platform"],
                                  { encoding: "utf8", stdio: ["ignore", "pipe", "ignore"] }).trim();
  const a = mint();
  const b = mint();
  const server = await startServe(binary, ["--store", "memory", "--data", data], { what: "runnel with tokens" });
  started.push(server);
  server.auth = { Authorization: `Bearer ${a}` };
  const front = await startFront("tokens", server.url.replace("http://", ""));
  const asA = { ...json, Authorization: `Bearer ${a}` };
  let r = await request(server.url, "PUT", "/v1/stream/secret", { headers: asA });
  check(r.status === 201, `create with a token: ${r.status} ${r.text}`);
  r = await request(server.url, "POST", "/v1/stream/secret", { headers: asA, body: JSON.stringify([{ i: 0 }, { i: 1 }]) });
  check(OK(r.status), `append with a token: ${r.status} ${r.text}`);
  const before = await upstreamReads(server);
  const seen = [];
  for (const token of [a, b, a, b]) {
    r = await request(front.url, "GET", "/v1/stream/secret?offset=-1", { headers: { Authorization: `Bearer ${token}` } });
    check(r.status === 200 && r.text === '[{"i":0},{"i":1}]', `token read through the front: ${r.status} ${r.text}`);
    check(r.headers.get("cache-control")?.startsWith("private"), `token read: Cache-Control ${r.headers.get("cache-control")}`);
    const vary = (r.headers.get("vary") ?? "").split(",").map((v) => v.trim().toLowerCase());
    check(vary.includes("authorization"), `token read: Vary ${r.headers.get("vary")}`);
    seen.push(r.headers.get("x-cache-status"));
  }
  const anonymous = await request(front.url, "GET", "/v1/stream/secret?offset=-1");
  check(anonymous.status === 401, `the same read without a token through the front: ${anonymous.status} ${anonymous.text}`);
  // Counted after the read without a token, which runnel may count on the stream route too.
  const upstream = (await upstreamReads(server)) - before;
  check(!seen.includes("HIT"), `a token read was answered from the cache: ${seen.join(" ")}`);
  check(upstream >= 4, `token reads: ${upstream} reads reached runnel, want all 4 token reads`);
  log(`token reads: 4 reads with two tokens (each twice) and 1 without; ${upstream} reached runnel;`,
      `cache status ${seen.join(" ")}; without a token ${anonymous.status}`);

  // The same tokens on a server that declares the global scope public: now the front shares
  // the read (the response headers are what decide).
  const open = await startServe(binary, ["--store", "memory", "--data", join(work, "public-data"),
                                         "--tokens", join(data, "tokens"), "--public-cache-scope", "global"],
                                { what: "runnel with tokens and a public scope" });
  started.push(open);
  open.auth = { Authorization: `Bearer ${a}` };
  const openFront = await startFront("public", open.url.replace("http://", ""));
  await request(open.url, "PUT", "/v1/stream/shared", { headers: asA });
  await request(open.url, "POST", "/v1/stream/shared", { headers: asA, body: JSON.stringify([{ i: 0 }]) });
  const publicBefore = await upstreamReads(open);
  const shared = [];
  for (const token of [a, b, a, b]) {
    r = await request(openFront.url, "GET", "/v1/stream/shared?offset=-1", { headers: { Authorization: `Bearer ${token}` } });
    check(r.status === 200 && r.text === '[{"i":0}]', `public-scope read through the front: ${r.status} ${r.text}`);
    check(r.headers.get("cache-control")?.startsWith("public"), `public-scope read: Cache-Control ${r.headers.get("cache-control")}`);
    shared.push(r.headers.get("x-cache-status"));
  }
  const publicUpstream = (await upstreamReads(open)) - publicBefore;
  check(publicUpstream === 1, `public-scope reads: ${publicUpstream} of 4 reached runnel (want 1: the others from the cache)`);
  log(`public-scope token reads (--public-cache-scope global): 4 reads with two tokens, ${publicUpstream} reached runnel;`,
      `cache status ${shared.join(" ")}`);
}

let status = 0;
try {
  const server = await startServe(binary, ["--store", "memory", "--data", join(work, "open-data"),
                                           "--long-poll-timeout-ms", String(LONG_POLL_MS)],
                                  { what: "runnel" });
  started.push(server);
  const front = await startFront("open", server.url.replace("http://", ""));
  log("runnel", server.url, "behind nginx", front.url);
  await catchUp(server, front);
  await liveFanOut(server, front);
  await sseThrough(server, front);
  await tokens();
} catch (e) {
  console.error("FAIL:", e.stack ?? e);
  checks.failures++;
} finally {
  for (const f of fronts) await stopFront(f);
  for (const s of started) await stopServe(s);
  if (checks.failures > 0) {
    for (const f of fronts) {
      try { console.error(readFileSync(join(dirname(f.accessLog), "error.log"), "utf8").slice(-4000)); } catch {}
    }
  }
  rmSync(work, { recursive: true, force: true });
}
if (checks.failures > 0) {
  console.error(`${checks.failures} check(s) failed`);
  status = 1;
} else {
  log("cache front: all checks passed");
}
process.exit(status);

// Shared by the Node end-to-end drivers that run real `runnel serve` processes
// (tests/server/serve_crash_e2e.mjs, tests/postgres/multinode.mjs): counted checks, starting a
// server on a free loopback port, one HTTP request that never throws, catch-up reads, and the
// verification of acknowledged appends against what a stream holds. Node 20, no dependencies.
import { spawn } from "node:child_process";

// Failed checks are counted, not thrown, so one run reports all of them.
export const checks = { failures: 0 };
export function check(cond, what) {
  if (!cond) {
    checks.failures++;
    console.error(`FAIL: ${what}`);
  }
  return cond;
}
export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
export const log = (...a) => console.log(`[${(performance.now() / 1000).toFixed(1)}s]`, ...a);

// Starts `binary serve --listen 127.0.0.1:0 ...args` and waits (attempts × stepMs at most) for
// the URL it prints. Returns { proc, url, exited }; throws with the server's output if it does
// not come up.
export async function startServe(binary, args, { attempts = 300, stepMs = 50, what = "the server" } = {}) {
  const proc = spawn(binary, ["serve", "--listen", "127.0.0.1:0", ...args], { stdio: ["ignore", "pipe", "pipe"] });
  let out = "";
  proc.stdout.on("data", (d) => (out += d));
  proc.stderr.on("data", (d) => (out += d));
  const exited = new Promise((r) => proc.on("exit", r));
  for (let t = 0; t < attempts; t++) {
    const m = out.match(/http:\/\/127\.0\.0\.1:\d+/);
    if (m) return { proc, url: m[0], exited };
    if (proc.exitCode !== null) break;
    await sleep(stepMs);
  }
  proc.kill("SIGKILL");
  throw new Error(`${what} did not start:\n${out}`);
}

// Ends a server politely (SIGTERM), then for good after 5 s.
export async function stopServe(s) {
  if (!s || s.proc.exitCode !== null || s.proc.signalCode !== null) return;
  s.proc.kill("SIGTERM");
  await Promise.race([s.exited, sleep(5000)]);
  if (s.proc.exitCode === null && s.proc.signalCode === null) s.proc.kill("SIGKILL");
}

// One request. Never throws: a network failure or timeout comes back as { status: 0, error },
// where error is the system code (ECONNREFUSED, ECONNRESET, ...) or the abort's name. `signal`
// (an AbortSignal) ends the request early too.
export async function request(url, method, path, { headers = {}, body, timeout = 10000, signal } = {}) {
  const started = performance.now();
  try {
    const bound = AbortSignal.timeout(timeout);
    const res = await fetch(url + path, {
      method, headers, body, signal: signal ? AbortSignal.any([bound, signal]) : bound,
    });
    const text = await res.text();
    return { status: res.status, headers: res.headers, text, ms: performance.now() - started };
  } catch (e) {
    return { status: 0, error: String(e.cause?.code ?? e.name ?? e), ms: performance.now() - started };
  }
}

export const OK = (s) => s === 200 || s === 204;

// The position an offset token names (its two fields, high * 10^16 + low); NaN for none.
export const position = (token) => {
  const [high, low] = (token ?? "").split("_");
  return low === undefined ? NaN : Number(high) * 1e16 + Number(low);
};

// Every message of the JSON stream `name`, read from the beginning with `get(path)` (a
// request() bound to one server) until Stream-Up-To-Date.
export async function readAll(get, name, what = name) {
  const out = [];
  let at = "-1";
  for (let page = 0; page < 100000; page++) {
    const r = await get(`/v1/stream/${name}?offset=${at}`);
    if (r.status !== 200) throw new Error(`read ${what}: ${r.status} ${r.text ?? r.error}`);
    out.push(...JSON.parse(r.text));
    at = r.headers.get("stream-next-offset");
    if (r.headers.get("stream-up-to-date") === "true") return out;
  }
  throw new Error(`read ${what} did not reach the tail`);
}

// The key of a message the drivers write: producer p's seq, or writer w's n-th append.
export const keyOf = (m) => (m.p !== undefined ? `${m.p}#${m.seq}` : `${m.w}#${m.n}`);

// Checks the messages of stream `name` against what the clients were told:
// - no message is present twice;
// - every acknowledged append ({ key, pos? }) is present, at pos when it was named;
// - every message present was acknowledged or has an unknown outcome (`unknown`, a Set of keys).
// Returns { where: Map key -> index, checkedPositions }.
export function verifyAcknowledged(name, msgs, acked, unknown) {
  const where = new Map();
  msgs.forEach((m, idx) => {
    const k = keyOf(m);
    check(!where.has(k), `${name}: ${k} is present twice (positions ${where.get(k) + 1} and ${idx + 1})`);
    where.set(k, idx);
  });
  let checkedPositions = 0;
  for (const a of acked) {
    const idx = where.get(a.key);
    if (!check(idx !== undefined, `${name}: acknowledged ${a.key} is missing`)) continue;
    if (a.pos !== undefined) {
      checkedPositions++;
      check(idx + 1 === a.pos, `${name}: ${a.key} acknowledged at ${a.pos} but found at ${idx + 1}`);
    }
  }
  const sent = new Set([...acked.map((a) => a.key), ...unknown]);
  for (const k of where.keys()) {
    check(sent.has(k), `${name}: ${k} is present but was never sent or was settled as absent`);
  }
  return { where, checkedPositions };
}

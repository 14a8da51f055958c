// The answer budget of an HTTP/2 connection (--http2-connection-buffer) end to end, against a
// real `runnel serve` with Node's own http2 client (no packages). A client that grants no
// flow-control window (SETTINGS_INITIAL_WINDOW_SIZE 0) and asks for many large reads at once
// must not make the server hold an answer per stream:
//   A. back-pressure: 20 reads of about 1 MiB each with window 0 get at most a budget's worth
//      of answers started (the rest wait unread), the server's RSS stays bounded; once the
//      client opens its window every read completes whole;
//   B. refusal: 10 SSE readers and 90 such reads with window 0: the server's RSS stays within
//      the budget plus a margin, the reads that found no room within --request-timeout-ms are
//      refused with RST_STREAM REFUSED_STREAM, /metrics counts the waits and refusals, and once
//      the client goes away the connection and the live readers are released.
// Usage: node h2_budget_e2e.mjs RUNNEL_BINARY
import http2 from "node:http2";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

import { binaryArg, makeChecks, startServer as startRunnel } from "./h2_e2e_lib.mjs";

const binary = binaryArg("h2_budget_e2e.mjs");
const MIB = 1 << 20;
const BUDGET = 4 * MIB;
// What one read reserves: the largest answer of a read (1 MiB) plus 64 KiB for its head.
const READ_RESERVE = MIB + 64 * 1024;
const REQUEST_TIMEOUT_MS = 4000;
const dir = mkdtempSync(join(tmpdir(), "runnel-h2-budget-"));
let server;
const { check, tally } = makeChecks();

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

function rssMb() {
  const status = readFileSync(`/proc/${server.pid}/status`, "utf8");
  return Number(status.match(/VmRSS:\s+(\d+)/)[1]) / 1024;
}

async function startServer() {
  const started = startRunnel(binary, [
    "--store", "memory", "--data", join(dir, "data"), "--http2-connection-buffer", String(BUDGET),
    "--request-timeout-ms", String(REQUEST_TIMEOUT_MS),
  ]);
  server = started.child;
  return started.url;
}

async function metric(url, name) {
  const text = await (await fetch(`${url}/metrics`)).text();
  const m = text.match(new RegExp(`^${name} (\\d+)$`, "m"));
  return m ? Number(m[1]) : NaN;
}

// A read on `session` that records when its answer's head came, and resolves with its status
// and body length, or with the error code of a reset.
function read(session, path) {
  const s = session.request({ ":path": path });
  const r = { head: false, status: 0, bytes: 0, error: "" };
  r.done = new Promise((resolve) => {
    s.on("response", (h) => {
      r.head = true;
      r.status = h[":status"];
    });
    s.on("data", (c) => (r.bytes += c.length));
    s.on("end", resolve);
    s.on("error", (e) => {
      r.error = e.code === "ERR_HTTP2_STREAM_ERROR" ? e.message : String(e.code);
      resolve();
    });
    s.on("close", resolve);
  });
  s.end();
  return r;
}

function connectWithoutWindow(url) {
  const session = http2.connect(url, { settings: { initialWindowSize: 0 } });
  session.on("error", () => {});
  return session;
}

async function main() {
  const url = await startServer();
  // A stream of 3 MiB in 64 KiB records: a read from the start answers about 1 MiB.
  await fetch(`${url}/v1/stream/big`, { method: "PUT", headers: { "content-type": "text/plain" } });
  const record = "x".repeat(64 * 1024);
  for (let i = 0; i < 48; i++) {
    const r = await fetch(`${url}/v1/stream/big`, {
      method: "POST",
      headers: { "content-type": "text/plain" },
      body: record,
    });
    if (r.status !== 204 && r.status !== 200) throw new Error(`append answered ${r.status}`);
  }
  const one = await fetch(`${url}/v1/stream/big?offset=-1`);
  const oneBytes = (await one.arrayBuffer()).byteLength;
  check("a read from the start answers about 1 MiB", oneBytes > MIB / 2 && oneBytes <= MIB,
    `(${oneBytes} bytes)`);
  const baseline = rssMb();
  const admittedAtMost = Math.floor(BUDGET / READ_RESERVE) + 1;

  // A. Back-pressure, then the window opens and every read completes.
  {
    const session = connectWithoutWindow(url);
    const reads = [];
    for (let i = 0; i < 20; i++) reads.push(read(session, `/v1/stream/big?offset=-1&a=${i}`));
    await sleep(1000);
    const started = reads.filter((r) => r.head).length;
    check(`A: at most ${admittedAtMost} answers started while the window is 0`,
      started >= 1 && started <= admittedAtMost, `(${started})`);
    const grown = rssMb() - baseline;
    check("A: the server's RSS grew by less than the budget plus 24 MiB", grown < BUDGET / MIB + 24,
      `(${grown.toFixed(1)} MiB)`);
    session.settings({ initialWindowSize: 1 << 20 });
    session.setLocalWindowSize(32 << 20);
    await Promise.race([Promise.all(reads.map((r) => r.done)), sleep(REQUEST_TIMEOUT_MS * 2)]);
    const whole = reads.filter((r) => r.status === 200 && r.bytes === oneBytes).length;
    check("A: once the window opens every read completes whole", whole === reads.length,
      `(${whole} of ${reads.length}; ${JSON.stringify(reads.filter((r) => r.bytes !== oneBytes)[0])})`);
    session.close();
  }

  // B. Refusal: 10 SSE readers and 90 large reads that never get a window.
  {
    const waitsBefore = await metric(url, "runnel_http2_budget_waits_total");
    const refusalsBefore = await metric(url, "runnel_http2_budget_refusals_total");
    const session = connectWithoutWindow(url);
    const sse = [];
    for (let i = 0; i < 10; i++) {
      sse.push(read(session, `/v1/stream/big?offset=now&live=sse&s=${i}`));
    }
    await sleep(300);
    const reads = [];
    for (let i = 0; i < 90; i++) reads.push(read(session, `/v1/stream/big?offset=-1&b=${i}`));
    await sleep(1500);
    const peak = rssMb() - baseline;
    check("B: with 100 streams and no window the server's RSS grew by less than the budget " +
      "plus 24 MiB", peak < BUDGET / MIB + 24, `(${peak.toFixed(1)} MiB)`);
    check("B: the SSE readers are live", (await metric(url, "runnel_live_readers")) === 10);
    await Promise.race([Promise.all(reads.map((r) => r.done)), sleep(REQUEST_TIMEOUT_MS * 2)]);
    const refused = reads.filter((r) => /REFUSED_STREAM/.test(r.error)).length;
    const started = reads.filter((r) => r.head).length;
    check(`B: the reads without room were refused with REFUSED_STREAM`,
      refused >= reads.length - admittedAtMost && refused + started === reads.length,
      `(${refused} refused, ${started} started)`);
    const waits = (await metric(url, "runnel_http2_budget_waits_total")) - waitsBefore;
    const refusals = (await metric(url, "runnel_http2_budget_refusals_total")) - refusalsBefore;
    check("B: /metrics counts the waits and the refusals", waits >= refused && refusals === refused,
      `(waits ${waits}, refusals ${refusals}, refused ${refused})`);
    const afterRefusals = rssMb() - baseline;
    session.destroy();
    let connections = NaN;
    let live = NaN;
    for (let i = 0; i < 50; i++) {
      await sleep(100);
      connections = await metric(url, "runnel_http2_connections");
      live = await metric(url, "runnel_live_readers");
      if (connections === 0 && live === 0) break;
    }
    check("B: once the client is gone its connection and live readers are released",
      connections === 0 && live === 0, `(connections ${connections}, live readers ${live})`);
    const after = rssMb() - baseline;
    check("B: and the server's RSS does not grow after it", after <= Math.max(peak, afterRefusals) + 4,
      `(${after.toFixed(1)} MiB)`);
    console.log(`h2_budget_e2e: budget ${BUDGET / MIB} MiB, RSS over the baseline of ` +
      `${baseline.toFixed(1)} MiB: ${peak.toFixed(1)} MiB with 100 streams, ` +
      `${after.toFixed(1)} MiB once the client left`);
  }
}

try {
  await main();
} catch (e) {
  tally.failed++;
  console.log(`not ok - ${e.stack || e}`);
} finally {
  if (server) server.kill("SIGTERM");
  rmSync(dir, { recursive: true, force: true });
}
console.log(`h2_budget_e2e: ${tally.passed} passed, ${tally.failed} failed`);
process.exit(tally.failed === 0 ? 0 : 1);

// HTTP/2 (h2c with prior knowledge) end to end against a real `runnel serve`, with Node's own
// http2 client (no packages): 50 streams followed with SSE over one connection, long-poll, a
// reset stream releasing its reader at once, flow control holding back a reader that takes
// nothing while the others go on, gzip, the request limits, HTTP/1.1 beside it on the same
// port, and (with a curl that speaks HTTP/2) `Upgrade: h2c`. Usage: node h2_e2e.mjs RUNNEL_BINARY
import { execFileSync, spawnSync } from "node:child_process";
import http2 from "node:http2";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { gunzipSync } from "node:zlib";

import { binaryArg, makeChecks, startServer as startRunnel } from "./h2_e2e_lib.mjs";

const binary = binaryArg("h2_e2e.mjs");
const STREAMS = 50;
const dir = mkdtempSync(join(tmpdir(), "runnel-h2-"));
let server;
const { check, tally } = makeChecks();

async function startServer() {
  const started = startRunnel(binary, [
    "--store", "memory", "--data", join(dir, "data"), "--max-body-bytes", "65536",
    "--max-header-bytes", "8192", "--long-poll-timeout-ms", "5000", "--request-timeout-ms", "2000",
  ]);
  server = started.child;
  return started.url;
}

// One request on `session`; resolves with status, headers and the body as a Buffer.
function request(session, headers, body) {
  return new Promise((resolve, reject) => {
    const s = session.request(headers);
    const chunks = [];
    let head;
    s.on("response", (h) => (head = h));
    s.on("data", (c) => chunks.push(c));
    s.on("end", () => resolve({ status: head[":status"], headers: head, body: Buffer.concat(chunks) }));
    s.on("error", reject);
    s.end(body);
  });
}

// An SSE reader: collects the data events' payloads until `want` arrived.
function follow(session, path, want) {
  const s = session.request({ ":path": path, accept: "text/event-stream" });
  const reader = { stream: s, status: 0, payloads: [], buffer: "" };
  reader.done = new Promise((resolve, reject) => {
    s.on("response", (h) => (reader.status = h[":status"]));
    s.setEncoding("utf8");
    s.on("data", (text) => {
      reader.buffer += text;
      let end;
      while ((end = reader.buffer.indexOf("\n\n")) >= 0) {
        const event = reader.buffer.slice(0, end);
        reader.buffer = reader.buffer.slice(end + 2);
        if (event.startsWith("event: data")) {
          const data = event.split("\n").filter((l) => l.startsWith("data:"))
            .map((l) => l.slice(5).trimStart()).join("\n");
          reader.payloads.push(data);
          if (reader.payloads.length >= want) resolve(reader);
        }
      }
    });
    s.on("error", reject);
    s.on("close", () => resolve(reader));
  });
  return reader;
}

async function metric(session, name) {
  const r = await request(session, { ":path": "/metrics" });
  const line = r.body.toString().split("\n").find((l) => l.startsWith(name + " ") || l.startsWith(name + "{"));
  return line ? Number(line.split(" ").pop()) : NaN;
}

const within = (ms, promise, what) =>
  Promise.race([promise, new Promise((_, reject) => setTimeout(() => reject(new Error(`timed out: ${what}`)), ms))]);

try {
  const url = await startServer();
  const session = http2.connect(url);
  await new Promise((resolve, reject) => {
    session.once("connect", resolve);
    session.once("error", reject);
  });

  // 50 streams created and followed with SSE, all on this one connection.
  for (let i = 0; i < STREAMS; i++) {
    const r = await request(session, { ":method": "PUT", ":path": `/v1/stream/s${i}`, "content-type": "text/plain" });
    if (r.status !== 201) throw new Error(`create s${i}: ${r.status}`);
  }
  const readers = [];
  for (let i = 0; i < STREAMS; i++) readers.push(follow(session, `/v1/stream/s${i}?offset=-1&live=sse`, 3));
  await new Promise((r) => setTimeout(r, 200));
  check("50 SSE readers are live at once", (await metric(session, "runnel_live_readers")) === STREAMS);
  for (let round = 0; round < 3; round++) {
    await Promise.all(readers.map((_, i) =>
      request(session, { ":method": "POST", ":path": `/v1/stream/s${i}`, "content-type": "text/plain" },
        `s${i}-event-${round}`)));
  }
  await within(10000, Promise.all(readers.map((r) => r.done)), "50 SSE readers");
  const allThere = readers.every((r, i) => r.status === 200 &&
    r.payloads.slice(0, 3).join("|") === [0, 1, 2].map((k) => `s${i}-event-${k}`).join("|"));
  check("every one of 50 SSE streams over one connection got its 3 events in order", allThere,
    JSON.stringify(readers.map((r) => r.payloads).slice(0, 2)));
  check("one HTTP/2 connection carried them", (await metric(session, "runnel_http2_connections")) === 1);

  // A reset stream frees its reader at once.
  readers[0].stream.close(http2.constants.NGHTTP2_CANCEL);
  const resetAt = Date.now();
  let live = NaN;
  while (Date.now() - resetAt < 2000) {
    live = await metric(session, "runnel_live_readers");
    if (live === STREAMS - 1) break;
    await new Promise((r) => setTimeout(r, 20));
  }
  check("RST_STREAM releases the SSE reader at once", live === STREAMS - 1, `live=${live}`);
  for (const r of readers.slice(1)) r.stream.close(http2.constants.NGHTTP2_CANCEL);

  // Long-poll over HTTP/2.
  const tail = (await request(session, { ":path": "/v1/stream/s1?offset=-1" })).headers["stream-next-offset"];
  const poll = request(session, { ":path": `/v1/stream/s1?offset=${tail}&live=long-poll` });
  await new Promise((r) => setTimeout(r, 100));
  await request(session, { ":method": "POST", ":path": "/v1/stream/s1", "content-type": "text/plain" }, "late");
  const polled = await within(5000, poll, "long-poll");
  check("a long-poll over HTTP/2 answers the record appended while it waits",
    polled.status === 200 && polled.body.toString() === "late", `${polled.status} ${polled.body}`);

  // Flow control: a reader that takes nothing holds back only its own stream.
  const small = http2.connect(url, { settings: { initialWindowSize: 16384 } });
  await new Promise((resolve) => small.once("connect", resolve));
  await request(small, { ":method": "PUT", ":path": "/v1/stream/big", "content-type": "text/plain" });
  const chunk = "x".repeat(60000);
  for (let i = 0; i < 8; i++) {
    await request(small, { ":method": "POST", ":path": "/v1/stream/big", "content-type": "text/plain" }, chunk);
  }
  const stalled = small.request({ ":path": "/v1/stream/big?offset=-1&live=sse" });
  stalled.pause();
  let stalledBytes = 0;
  stalled.on("data", (c) => (stalledBytes += c.length));
  await new Promise((r) => setTimeout(r, 300));
  const other = await within(5000, request(small, { ":path": "/v1/stream/s2?offset=-1" }), "a read beside a stalled stream");
  check("a stream whose reader takes nothing does not hold back the others", other.status === 200);
  check("the stalled stream got no more than its window", stalledBytes <= 65536, `got ${stalledBytes}`);
  stalled.resume();
  await within(5000, new Promise((resolve) => {
    const wait = () => (stalledBytes >= 8 * 60000 ? resolve() : setTimeout(wait, 20));
    wait();
  }), "the stalled stream after resume");
  check("once read, the stalled stream delivers everything", stalledBytes >= 8 * 60000);
  stalled.close(http2.constants.NGHTTP2_CANCEL);
  small.close();

  // gzip over HTTP/2.
  await request(session, { ":method": "PUT", ":path": "/v1/stream/j", "content-type": "application/json" });
  const messages = Array.from({ length: 300 }, (_, i) => ({ id: i, customer: "acme", total: i * 3 }));
  await request(session, { ":method": "POST", ":path": "/v1/stream/j", "content-type": "application/json" },
    JSON.stringify(messages));
  const gz = await request(session, { ":path": "/v1/stream/j?offset=-1", "accept-encoding": "gzip" });
  const decoded = gz.headers["content-encoding"] === "gzip" ? gunzipSync(gz.body).toString() : "";
  check("catch-up over HTTP/2 is gzip-compressed and decodes to the messages",
    JSON.stringify(JSON.parse(decoded || "null")) === JSON.stringify(messages));

  // The same limits as HTTP/1.1.
  const tooBig = await request(session, { ":method": "POST", ":path": "/v1/stream/s3", "content-type": "text/plain" },
    "y".repeat(70000));
  check("a body above --max-body-bytes gets 413", tooBig.status === 413, `${tooBig.status}`);
  const bigHeader = await request(session, { ":path": "/v1/stream/s3?offset=-1", "x-filler": "z".repeat(9000) })
    .catch((e) => ({ status: `error ${e.code}` }));
  check("header fields above --max-header-bytes get 431", bigHeader.status === 431, `${bigHeader.status}`);
  const missing = await request(session, { ":path": "/v1/stream/nope?offset=-1" });
  check("errors keep their JSON body", missing.status === 404 &&
    JSON.parse(missing.body.toString()).error?.code === "not_found", missing.body.toString());

  // A request that never arrives whole ends its connection after --request-timeout-ms.
  const slow = http2.connect(url);
  slow.on("error", () => {});
  const slowStart = Date.now();
  const unfinished = slow.request({ ":method": "POST", ":path": "/v1/stream/s5", "content-type": "text/plain" },
    { endStream: false });
  unfinished.on("error", () => {});
  unfinished.write("part of a body");
  await within(6000, new Promise((resolve) => slow.once("close", resolve)), "a slow request's connection to close");
  const slowMs = Date.now() - slowStart;
  check("a request slower than --request-timeout-ms closes its connection", slowMs >= 1900 && slowMs < 5000,
    `${slowMs} ms`);

  // HTTP/1.1 beside it, on the same port.
  const plain = await fetch(`${url}/v1/stream/s2?offset=-1`);
  check("HTTP/1.1 still answers on the same port", plain.status === 200 && (await plain.text()).startsWith("s2-event-0"));
  check("requests are counted by protocol version",
    (await metric(session, 'runnel_http_requests_by_version_total{version="2"}')) > 100 &&
    (await metric(session, 'runnel_http_requests_by_version_total{version="1.1"}')) >= 1);
  // `Upgrade: h2c` from HTTP/1.1 (curl --http2 on an http:// URL asks for it): the request is
  // answered on stream 1 after 101, its body included.
  let curl = "";
  try {
    curl = execFileSync("curl", ["-V"]).toString();
  } catch {}
  if (/\bHTTP2\b/.test(curl)) {
    const run = (...args) => execFileSync("curl", ["-sS", "--max-time", "10", "--http2", ...args]).toString();
    await request(session, { ":method": "PUT", ":path": "/v1/stream/up", "content-type": "text/plain" });
    const posted = run("-X", "POST", "-H", "Content-Type: text/plain", "--data-binary", "upgraded",
      "-o", "/dev/null", "-w", "%{http_version} %{http_code}", `${url}/v1/stream/up`);
    check("a POST with Upgrade: h2c is answered over HTTP/2", posted === "2 204", posted);
    const read = spawnSync("curl", ["-sS", "-v", "--max-time", "10", "--http2", "-w", " %{http_version}",
      `${url}/v1/stream/up?offset=-1`], { encoding: "utf8" });
    check("an upgraded read answers 101, then the record over HTTP/2",
      read.stdout === "upgraded 2" && read.stderr.includes("< HTTP/1.1 101 Switching Protocols"),
      read.stdout);
  } else {
    console.log("# this curl has no HTTP/2: the Upgrade: h2c checks did not run");
  }
  session.close();
} catch (e) {
  tally.failed++;
  console.log(`not ok - ${e.stack || e}`);
} finally {
  if (server && server.exitCode === null) server.kill("SIGTERM");
  rmSync(dir, { recursive: true, force: true });
}
console.log(`${tally.passed} passed, ${tally.failed} failed`);
process.exit(tally.failed === 0 ? 0 : 1);

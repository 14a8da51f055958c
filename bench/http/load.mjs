// Load driver for the HTTP benchmark workloads that wrk cannot express (bench/http/compare.sh).
// Speaks only the public Durable Streams protocol, so it drives any conforming server.
//
//   node load.mjs create BASE PREFIX COUNT              create COUNT text streams PREFIX-<i>
//   node load.mjs fill-text BASE PATH MEGABYTES         append MEGABYTES of text in 64 KiB bodies
//   node load.mjs fill-json BASE PATH MESSAGES          append MESSAGES JSON messages, 500 a POST
//   node load.mjs catchup BASE PATH ROUNDS              read the whole stream ROUNDS times, MB/s
//   node load.mjs tail-offset BASE PATH                 print the stream's next offset token
//   node load.mjs sse BASE PATH READERS APPENDS PID     READERS SSE readers, APPENDS timed appends;
//                                                       p50/p99 delivery latency, server RSS
//
// Prints one line "key=value ..." that compare.sh parses. Every phase is bounded in count and time.
import http from "node:http";
import fs from "node:fs";

const agent = new http.Agent({ keepAlive: true, maxSockets: 64 });

function request(base, method, path, { headers = {}, body } = {}) {
  const url = new URL(path, base);
  return new Promise((resolve, reject) => {
    const req = http.request(
      { agent, method, hostname: url.hostname, port: url.port, path: url.pathname + url.search, headers },
      (res) => {
        const chunks = [];
        res.on("data", (c) => chunks.push(c));
        res.on("end", () => resolve({ status: res.statusCode, headers: res.headers, body: Buffer.concat(chunks) }));
        res.on("error", reject);
      },
    );
    req.setTimeout(30000, () => req.destroy(new Error(`${method} ${path}: no answer in 30 s`)));
    req.on("error", reject);
    if (body !== undefined) req.write(body);
    req.end();
  });
}

function check(res, what, ok = [200, 201, 204]) {
  if (!ok.includes(res.status)) {
    throw new Error(`${what}: HTTP ${res.status} ${res.body.toString().slice(0, 200)}`);
  }
  return res;
}

async function pool(count, concurrency, fn) {
  let next = 0;
  const workers = Array.from({ length: Math.min(concurrency, count) }, async () => {
    while (next < count) await fn(next++);
  });
  await Promise.all(workers);
}

async function create(base, prefix, count) {
  const t0 = performance.now();
  await pool(count, 32, async (i) => {
    check(await request(base, "PUT", `${prefix}-${i}`, { headers: { "Content-Type": "text/plain" } }), "create");
  });
  console.log(`created=${count} seconds=${((performance.now() - t0) / 1000).toFixed(2)}`);
}

async function fillText(base, path, megabytes) {
  check(await request(base, "PUT", path, { headers: { "Content-Type": "text/plain" } }), "create");
  const body = Buffer.alloc(64 * 1024, "abcdefghijklmnopqrstuvwxyz0123456789\n");
  const posts = Math.ceil((megabytes * 1024 * 1024) / body.length);
  for (let i = 0; i < posts; i++) {
    check(await request(base, "POST", path, { headers: { "Content-Type": "text/plain" }, body }), "append");
  }
  console.log(`bytes=${posts * body.length}`);
}

async function fillJson(base, path, messages) {
  check(await request(base, "PUT", path, { headers: { "Content-Type": "application/json" } }), "create");
  const perPost = 500;
  let bytes = 0;
  for (let sent = 0; sent < messages; sent += perPost) {
    const batch = [];
    for (let i = sent; i < Math.min(messages, sent + perPost); i++) {
      batch.push({ id: i, user: `user-${i % 977}`, kind: "click", value: i * 7, note: "0123456789abcdef" });
    }
    const body = JSON.stringify(batch);
    bytes += body.length;
    check(await request(base, "POST", path, { headers: { "Content-Type": "application/json" }, body }), "append");
  }
  console.log(`messages=${messages} bytes=${bytes}`);
}

// Reads from the start until the server says the reader is up to date; returns body bytes.
async function readAll(base, path) {
  let offset = "-1";
  let bytes = 0;
  for (let page = 0; page < 100000; page++) {
    const res = check(await request(base, "GET", `${path}?offset=${encodeURIComponent(offset)}`), "read");
    bytes += res.body.length;
    offset = res.headers["stream-next-offset"];
    if (res.headers["stream-up-to-date"] === "true" || res.body.length === 0) return bytes;
  }
  throw new Error("catch-up read did not reach the tail in 100000 pages");
}

async function catchup(base, path, rounds) {
  await readAll(base, path); // warm-up
  const t0 = performance.now();
  let bytes = 0;
  for (let i = 0; i < rounds; i++) bytes += await readAll(base, path);
  const seconds = (performance.now() - t0) / 1000;
  console.log(`bytes=${bytes} seconds=${seconds.toFixed(3)} mb_per_s=${(bytes / 1e6 / seconds).toFixed(1)}`);
}

async function tailOffset(base, path) {
  const res = check(await request(base, "HEAD", path), "head");
  console.log(res.headers["stream-next-offset"]);
}

function rssMb(pid) {
  try {
    const m = fs.readFileSync(`/proc/${pid}/status`, "utf8").match(/VmRSS:\s+(\d+) kB/);
    return m ? Number(m[1]) / 1024 : NaN;
  } catch {
    return NaN;
  }
}

// Opens READERS SSE readers at the tail, then appends APPENDS messages carrying their send time,
// 100 ms apart, and measures when each reader sees each message.
async function sse(base, path, readers, appends, serverPid) {
  check(await request(base, "PUT", path, { headers: { "Content-Type": "text/plain" } }), "create");
  const tail = check(await request(base, "HEAD", path), "head").headers["stream-next-offset"];
  const sseAgent = new http.Agent({ keepAlive: false, maxSockets: Infinity });
  const latencies = [];
  const received = new Array(readers).fill(0);
  const sockets = [];
  let connected = 0;
  let failed = 0;
  const url = new URL(path, base);
  const opened = new Promise((resolveAll) => {
    for (let r = 0; r < readers; r++) {
      const req = http.request(
        {
          agent: sseAgent,
          hostname: url.hostname,
          port: url.port,
          path: `${url.pathname}?offset=${encodeURIComponent(tail)}&live=sse`,
          headers: { Accept: "text/event-stream" },
        },
        (res) => {
          if (res.statusCode !== 200) failed++;
          connected++;
          if (connected + failed >= readers) resolveAll();
          res.setEncoding("utf8");
          let buffer = "";
          res.on("data", (text) => {
            buffer += text;
            let cut;
            while ((cut = buffer.indexOf("\n\n")) >= 0) {
              const event = buffer.slice(0, cut);
              buffer = buffer.slice(cut + 2);
              if (!event.startsWith("event: data") && !event.startsWith("event:data")) continue;
              for (const line of event.split("\n")) {
                const m = line.match(/^data: ?t=(\d+(\.\d+)?)/);
                if (m) {
                  latencies.push(performance.timeOrigin + performance.now() - Number(m[1]));
                  received[r]++;
                }
              }
            }
          });
          res.on("error", () => {});
        },
      );
      req.on("error", () => {
        failed++;
        if (connected + failed >= readers) resolveAll();
      });
      req.end();
      sockets.push(req);
    }
  });
  const deadline = new Promise((r) => setTimeout(r, 60000));
  await Promise.race([opened, deadline]);
  await new Promise((r) => setTimeout(r, 500));
  const rssIdle = rssMb(serverPid);
  for (let i = 0; i < appends; i++) {
    const body = `t=${(performance.timeOrigin + performance.now()).toFixed(3)}`;
    check(await request(base, "POST", path, { headers: { "Content-Type": "text/plain" }, body }), "append");
    await new Promise((r) => setTimeout(r, 100));
  }
  const expected = (readers - failed) * appends;
  const waitUntil = Date.now() + 10000;
  while (latencies.length < expected && Date.now() < waitUntil) await new Promise((r) => setTimeout(r, 50));
  const rssLive = rssMb(serverPid);
  latencies.sort((a, b) => a - b);
  const pct = (p) => (latencies.length ? latencies[Math.min(latencies.length - 1, Math.floor(p * latencies.length))] : NaN);
  const complete = received.filter((n) => n === appends).length;
  console.log(
    `readers=${readers} failed=${failed} complete=${complete} delivered=${latencies.length} expected=${expected} ` +
      `p50_ms=${pct(0.5).toFixed(1)} p99_ms=${pct(0.99).toFixed(1)} max_ms=${pct(1).toFixed(1)} ` +
      `rss_idle_mb=${rssIdle.toFixed(0)} rss_mb=${rssLive.toFixed(0)}`,
  );
  for (const s of sockets) s.destroy();
}

const [cmd, base, ...args] = process.argv.slice(2);
const commands = {
  create: () => create(base, args[0], Number(args[1])),
  "fill-text": () => fillText(base, args[0], Number(args[1])),
  "fill-json": () => fillJson(base, args[0], Number(args[1])),
  catchup: () => catchup(base, args[0], Number(args[1])),
  "tail-offset": () => tailOffset(base, args[0]),
  sse: () => sse(base, args[0], Number(args[1]), Number(args[2]), Number(args[3])),
};
if (!commands[cmd] || !base) {
  console.error("usage: node load.mjs create|fill-text|fill-json|catchup|tail-offset|sse BASE ...");
  process.exit(2);
}
try {
  await commands[cmd]();
  process.exit(0);
} catch (e) {
  console.error(`load.mjs ${cmd}: ${e.message}`);
  process.exit(1);
}

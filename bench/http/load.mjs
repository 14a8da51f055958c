// Load driver for the HTTP benchmark set-up that wrk cannot express (bench/http/compare.sh);
// catch-up reads and SSE fan-out are measured by `runnel bench read|sse`, which costs far less
// per byte.
// Speaks only the public Durable Streams protocol, so it drives any conforming server.
//
//   node load.mjs create BASE PREFIX COUNT              create COUNT text streams PREFIX-<i>
//   node load.mjs fill-text BASE PATH MEGABYTES         append MEGABYTES of text in 64 KiB bodies
//   node load.mjs fill-json BASE PATH MESSAGES          append MESSAGES JSON messages, 500 a POST
//   node load.mjs tail-offset BASE PATH                 print the stream's next offset token
//   node load.mjs hold BASE PREFIX COUNT SECONDS        open COUNT connections, one 100-byte
//                                                       append to PREFIX-<i> on each, then hold
//                                                       them idle SECONDS (prints held=COUNT
//                                                       once all are open)
//
// Prints one line "key=value ..." that compare.sh parses. Every phase is bounded in count and time.
import http from "node:http";

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

async function tailOffset(base, path) {
  const res = check(await request(base, "HEAD", path), "head");
  console.log(res.headers["stream-next-offset"]);
}

async function hold(base, prefix, count, seconds) {
  // One socket per connection: an agent of its own for each, kept alive after its answer.
  const agents = [];
  const body = "x".repeat(100);
  await pool(count, 64, async (i) => {
    const own = new http.Agent({ keepAlive: true, maxSockets: 1 });
    agents.push(own);
    const url = new URL(`${prefix}-${i}`, base);
    const res = await new Promise((resolve, reject) => {
      const req = http.request(
        { agent: own, method: "POST", hostname: url.hostname, port: url.port, path: url.pathname,
          headers: { "Content-Type": "text/plain" } },
        (r) => { r.resume(); r.on("end", () => resolve(r)); r.on("error", reject); },
      );
      req.setTimeout(30000, () => req.destroy(new Error("append: no answer in 30 s")));
      req.on("error", reject);
      req.end(body);
    });
    check({ status: res.statusCode, body: Buffer.alloc(0) }, "append");
  });
  console.log(`held=${count}`);
  await new Promise((r) => setTimeout(r, Math.min(seconds, 60) * 1000));
  for (const a of agents) a.destroy();
}

const [cmd, base, ...args] = process.argv.slice(2);
const commands = {
  create: () => create(base, args[0], Number(args[1])),
  "fill-text": () => fillText(base, args[0], Number(args[1])),
  "fill-json": () => fillJson(base, args[0], Number(args[1])),
  "tail-offset": () => tailOffset(base, args[0]),
  hold: () => hold(base, args[0], Number(args[1]), Number(args[2])),
};
if (!commands[cmd] || !base) {
  console.error("usage: node load.mjs create|fill-text|fill-json|tail-offset|hold BASE ...");
  process.exit(2);
}
try {
  await commands[cmd]();
  process.exit(0);
} catch (e) {
  console.error(`load.mjs ${cmd}: ${e.message}`);
  process.exit(1);
}

// kill -9 of a real `runnel serve` on the embedded log (fsync durability, the default), again and
// again, while clients append, create, delete and ack over HTTP. No dependencies beyond Node 20.
//
//   node serve_crash_e2e.mjs RUNNEL_BINARY     RUNNEL_CRASH_KILLS=N sets the number of kills
//                                               (default 6: a few seconds; use 100+ for a soak)
//
// Between kills the server runs 150-700 ms (random) under writers that never pause, so every
// kill lands with requests in flight. Checks, once the last restart is up:
// - A1/N1 across a crash: every acknowledged append is present exactly once, at the position its
//   acknowledgement named (plain and conditional appends); an append whose answer was lost is
//   present at most once; nothing that was never sent is present; the next append continues
//   right after the last record (V4);
// - idempotent producers (A8): state commits with the data, so a request resent with the same
//   (epoch, seq) after a restart is answered as a duplicate, never appended twice or refused as
//   a gap; each producer's records are in seq order;
// - the catalog: an acknowledged create survives, an acknowledged delete stays deleted;
// - consumer groups (C2/C4): a group's stored offset is never below an acknowledged ack.
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import {
  OK, check, checks, log, position, readAll as readStream, request, sleep, startServe, stopServe,
  verifyAcknowledged,
} from "../support/e2e.mjs";

const [binary] = process.argv.slice(2);
if (!binary) {
  console.error("usage: serve_crash_e2e.mjs RUNNEL_BINARY");
  process.exit(2);
}
const KILLS = Number(process.env.RUNNEL_CRASH_KILLS ?? 6);
if (!Number.isInteger(KILLS) || KILLS < 1 || KILLS > 100000) {
  console.error(`RUNNEL_CRASH_KILLS must be a whole number from 1 to 100000, not '${process.env.RUNNEL_CRASH_KILLS}'`);
  process.exit(2);
}
const REQUEST_TIMEOUT_MS = 10000;
const work = mkdtempSync(join(tmpdir(), "runnel-serve-crash-"));
const dataDir = join(work, "data");
let server = null; // { proc, url, exited } while one is up
let stopping = false;

// ---- the server ------------------------------------------------------------------------------

async function startServer() {
  const started = performance.now();
  server = await startServe(binary, ["--store", "log", "--data", dataDir, "--durability", "fsync",
                                     "--long-poll-timeout-ms", "500"],
                            { attempts: 600, stepMs: 25, what: `the server on ${dataDir}` });
  return performance.now() - started;
}

async function killServer() {
  const victim = server;
  server = null;
  victim.proc.kill("SIGKILL");
  await victim.exited;
  check(victim.proc.signalCode === "SIGKILL", `the server ended by ${victim.proc.signalCode ?? victim.proc.exitCode}, not by the kill`);
}

// ---- HTTP ------------------------------------------------------------------------------------

// One request. A request that certainly never reached a server (none is up, or the connection
// was refused) comes back as { status: -1 }; one whose answer was lost (reset, timeout) as
// { status: 0, error }: its outcome is unknown.
async function http(method, path, { headers = {}, body } = {}) {
  const s = server;
  if (!s) return { status: -1, error: "down" };
  const r = await request(s.url, method, path, { headers, body, timeout: REQUEST_TIMEOUT_MS });
  if (r.error === "ECONNREFUSED") r.status = -1;
  return r;
}

const JSON_TYPE = { "Content-Type": "application/json" };
const readAll = (name) => readStream((path) => http("GET", path), name);

// ---- clients ---------------------------------------------------------------------------------

const busy = async () => { if (!server) await sleep(20); };

// Plain appends, never retried: a lost answer makes the outcome unknown.
async function plainWriter(w, name, acked, unknown) {
  for (let n = 0; !stopping; n++) {
    await busy();
    const key = `${w}#${n}`;
    const r = await http("POST", `/v1/stream/${name}`, { headers: JSON_TYPE, body: JSON.stringify({ w, n }) });
    if (OK(r.status)) acked.push({ key, pos: position(r.headers.get("stream-next-offset")) });
    else if (r.status === 0) unknown.add(key);
    else if (r.status !== -1) check(false, `plain append ${key}: unexpected ${r.status} ${r.text}`);
  }
}

// An idempotent producer: one request at a time, resent with the same (epoch, seq) until it is
// acknowledged, across as many restarts as it takes.
const resends = { sent: 0, acknowledged: 0 };

async function producer(p, name, acked) {
  for (let seq = 0; !stopping; seq++) {
    const key = `${p}#${seq}`;
    for (let attempt = 0; ; attempt++) {
      if (!check(attempt < 2000, `producer ${key}: not acknowledged after 2000 attempts`)) return;
      await busy();
      const r = await http("POST", `/v1/stream/${name}`, {
        headers: { ...JSON_TYPE, "Producer-Id": p, "Producer-Epoch": "0", "Producer-Seq": String(seq) },
        body: JSON.stringify({ p, seq }),
      });
      if (attempt > 0 && r.status !== -1) resends.sent++;
      if (OK(r.status)) {
        acked.push({ key });
        if (attempt > 0) resends.acknowledged++;
        break;
      }
      if (r.status > 0) {
        check(false, `producer ${key} (attempt ${attempt}): unexpected ${r.status} ${r.text}`);
        return;
      }
    }
  }
}

// Conditional appends: each names the tail it expects; a lost answer is settled by asking again.
async function conditionalWriter(w, name, acked, unknown) {
  let expected = null;
  for (let n = 0; !stopping; n++) {
    await busy();
    if (expected === null) {
      const h = await http("HEAD", `/v1/stream/${name}`);
      if (h.status !== 200) continue;
      expected = h.headers.get("stream-next-offset");
    }
    const key = `${w}#${n}`;
    const r = await http("POST", `/v1/stream/${name}`, {
      headers: { ...JSON_TYPE, "Stream-Expected-Offset": expected }, body: JSON.stringify({ w, n }),
    });
    if (OK(r.status)) {
      const pos = position(r.headers.get("stream-next-offset"));
      check(pos === position(expected) + 1, `conditional ${key}: expected ${expected}, acknowledged at ${pos}`);
      acked.push({ key, pos });
      expected = r.headers.get("stream-next-offset");
    } else if (r.status === 409) {
      expected = r.headers.get("stream-next-offset");
      check(expected !== null, `conditional ${key}: 409 without Stream-Next-Offset`);
    } else {
      if (r.status > 0) check(false, `conditional ${key}: unexpected ${r.status} ${r.text}`);
      if (r.status === 0) unknown.add(key);
      expected = null;
    }
  }
}

// Creates streams and deletes every third one; remembers what was acknowledged (a delete whose
// answer was lost may or may not have happened).
async function catalogWriter(catalog) {
  for (let i = 0; !stopping; i++) {
    await busy();
    const name = `crash-cat-${i}`;
    const c = await http("PUT", `/v1/stream/${name}`, { headers: { "Content-Type": "text/plain" }, body: `s${i}` });
    if (c.status === 201) catalog.created.add(name);
    else if (c.status > 0) check(false, `create ${name}: unexpected ${c.status} ${c.text}`);
    if (c.status !== 201 || i % 3 !== 0) continue;
    const d = await http("DELETE", `/v1/stream/${name}`);
    if (d.status === 204 || d.status === 200) catalog.deleted.add(name);
    else if (d.status === 0) catalog.deleteUnknown.add(name);
    else if (d.status > 0) check(false, `delete ${name}: unexpected ${d.status} ${d.text}`);
  }
}

// Acks the group "g" on `name` through the highest acknowledged plain position seen so far.
async function groupAcker(name, acked, group) {
  while (!stopping) {
    await sleep(5);
    await busy();
    const target = acked.reduce((m, a) => (a.pos > m ? a.pos : m), 0);
    if (target <= group.acked) continue;
    const r = await http("POST", `/v1/groups/stream/${name}?group=g&ack=${target}`);
    if (r.status === 200) {
      const stored = JSON.parse(r.text).last_acked;
      check(stored >= target, `ack ${target} answered last_acked ${stored}`);
      group.acked = Math.max(group.acked, stored);
    } else if (r.status > 0) {
      check(false, `ack ${target}: unexpected ${r.status} ${r.text}`);
    }
  }
}

// ---- verification ----------------------------------------------------------------------------

async function verifyStream(name, acked, unknown) {
  const msgs = await readAll(name);
  const { where } = verifyAcknowledged(name, msgs, acked, unknown);
  // Each producer's records appear in seq order with no seq missing below its last acknowledged.
  const seqs = new Map();
  for (const m of msgs) {
    if (m.p === undefined) continue;
    const last = seqs.get(m.p) ?? -1;
    check(m.seq === last + 1, `${name}: producer ${m.p} seq ${m.seq} follows ${last}`);
    seqs.set(m.p, m.seq);
  }
  // The next append continues right after the last record (offsets never go back, V4).
  const r = await http("POST", `/v1/stream/${name}`, { headers: JSON_TYPE, body: JSON.stringify({ w: "final", n: 0 }) });
  check(OK(r.status) && position(r.headers.get("stream-next-offset")) === msgs.length + 1,
        `${name}: the append after the last restart landed at ${r.headers?.get("stream-next-offset")}, want position ${msgs.length + 1}`);
  const present = [...unknown].filter((k) => where.has(k)).length;
  log(`${name}: ${msgs.length} records, ${acked.length} acknowledged, ${unknown.size} unknown (${present} present)`);
  return msgs.length;
}

async function verifyCatalog(catalog) {
  for (const name of catalog.created) {
    if (catalog.deleteUnknown.has(name)) continue; // either answer is right
    const h = await http("HEAD", `/v1/stream/${name}`);
    if (catalog.deleted.has(name)) check(h.status === 404, `deleted ${name}: HEAD ${h.status}, want 404`);
    else check(h.status === 200, `created ${name}: HEAD ${h.status}, want 200`);
  }
  log(`catalog: ${catalog.created.size} creates and ${catalog.deleted.size} deletes acknowledged, all as acknowledged`);
}

async function verifyGroup(name, group) {
  const r = await http("GET", `/v1/groups/stream/${name}`);
  if (!check(r.status === 200, `group list of ${name}: ${r.status} ${r.text}`)) return;
  const g = JSON.parse(r.text).groups.find((x) => x.group === "g");
  const stored = g ? g.last_acked : 0;
  check(stored >= group.acked, `group g on ${name}: stored ${stored}, an ack through ${group.acked} was acknowledged`);
  log(`group g on ${name}: stored ${stored} (highest acknowledged ack ${group.acked})`);
}

// ---- the run ---------------------------------------------------------------------------------

async function run() {
  const firstStart = await startServer();
  const streams = ["crash-a", "crash-b"];
  for (const s of streams) {
    const r = await http("PUT", `/v1/stream/${s}`, { headers: JSON_TYPE });
    if (r.status !== 201) throw new Error(`create ${s}: ${r.status} ${r.text}`);
  }
  const per = Object.fromEntries(streams.map((s) => [s, { acked: [], unknown: new Set() }]));
  const catalog = { created: new Set(), deleted: new Set(), deleteUnknown: new Set() };
  const group = { acked: 0 };
  const jobs = [];
  for (const s of streams) {
    const { acked, unknown } = per[s];
    for (let i = 0; i < 4; i++) jobs.push(plainWriter(`${s}-w${i}`, s, acked, unknown));
    for (let i = 0; i < 3; i++) jobs.push(producer(`${s}-p${i}`, s, acked));
    jobs.push(conditionalWriter(`${s}-c`, s, acked, unknown));
  }
  jobs.push(catalogWriter(catalog));
  jobs.push(groupAcker("crash-a", per["crash-a"].acked, group));

  const restarts = [firstStart];
  for (let k = 0; k < KILLS; k++) {
    await sleep(150 + Math.random() * 550);
    await killServer();
    restarts.push(await startServer());
    if ((k + 1) % 10 === 0 || k + 1 === KILLS) log(`${k + 1} of ${KILLS} kills`);
  }
  await sleep(300);
  stopping = true;
  await Promise.all(jobs);
  restarts.sort((a, b) => a - b);
  log(`restart to listening: median ${restarts[restarts.length >> 1].toFixed(0)} ms, max ${restarts[restarts.length - 1].toFixed(0)} ms`);

  let total = 0;
  for (const s of streams) total += await verifyStream(s, per[s].acked, per[s].unknown);
  await verifyCatalog(catalog);
  await verifyGroup("crash-a", group);
  log(`producers: ${resends.sent} resends after a lost answer, ${resends.acknowledged} of them acknowledged`);
  const producerAcks = streams.reduce((n, s) => n + per[s].acked.filter((a) => a.pos === undefined).length, 0);
  check(total > 20 * KILLS, `only ${total} records over ${KILLS} kills: the writers did not run`);
  check(producerAcks > 0 && catalog.created.size > 0 && group.acked > 0, "a kind of client had nothing acknowledged");
}

try {
  await run();
} catch (e) {
  console.error("FAIL:", e.stack ?? e);
  checks.failures++;
} finally {
  stopping = true;
  await stopServe(server);
  rmSync(work, { recursive: true, force: true });
}
if (checks.failures > 0) {
  console.error(`${checks.failures} check(s) failed`);
  process.exit(1);
}
log(`all checks passed over ${KILLS} kills`);
process.exit(0);

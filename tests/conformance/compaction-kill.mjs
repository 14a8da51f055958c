// kill -9 of `runnel serve --store log` while it compacts a State Protocol stream: after each
// restart, the stream read from the beginning folds (with the official @durable-streams/state
// MaterializedState) to the state of the full history this script appended, and readers resuming
// from positions saved before the kill fold to it too or are refused with 410 below the horizon.
// Each round appends more history, starts a compaction, kills the server at a pseudo-random
// moment, restarts it, checks, then compacts to the end and checks again.
// Usage: node compaction-kill.mjs RUNNEL_BINARY (run by compaction-kill.sh).
// RUNNEL_COMPACTION_KILLS sets the number of rounds (3 by default).
import { spawn } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { isDeepStrictEqual } from "node:util";
import { fold, lcg, snapshot } from "./state-fold.mjs";

const binary = process.argv[2];
if (!binary) throw new Error("usage: node compaction-kill.mjs RUNNEL_BINARY");
const rounds = Number(process.env.RUNNEL_COMPACTION_KILLS ?? 3);
if (!Number.isInteger(rounds) || rounds < 1 || rounds > 1000) {
  throw new Error("RUNNEL_COMPACTION_KILLS must be an integer from 1 to 1000");
}
const perRound = 10000;
const dataDir = mkdtempSync(join(tmpdir(), "runnel-compaction-kill-"));

const rand = lcg(4242);

const live = new Set();
function change(i) {
  const key = `k${rand() % 150}`;
  const op = !live.has(key) ? "insert" : rand() % 10 === 0 ? "delete" : "update";
  if (op === "delete") live.delete(key);
  else live.add(key);
  const m = { type: "row", key, headers: { operation: op } };
  if (op !== "delete") m.value = { n: i, pad: "x".repeat(200) };
  return m;
}

function check(ok, what) {
  if (!ok) throw new Error(what);
}

// Starts the server on the data directory; resolves with { child, url } once it listens.
function start() {
  const child = spawn(
    binary,
    ["serve", "--listen", "127.0.0.1:0", "--store", "log", "--data", dataDir,
     "--compaction-share", "0"],
    { stdio: ["ignore", "pipe", "pipe"] },
  );
  let output = "";
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`no address within 20 s:\n${output}`)), 20000);
    const look = (chunk) => {
      output += chunk;
      const m = output.match(/http:\/\/127\.0\.0\.1:[0-9]+/);
      if (m) {
        clearTimeout(timer);
        resolve({ child, url: m[0] });
      }
    };
    child.stdout.on("data", look);
    child.stderr.on("data", look);
    child.on("error", (e) => {
      clearTimeout(timer);
      reject(e);
    });
    child.on("exit", (code) => {
      clearTimeout(timer);
      reject(new Error(`runnel serve exited (${code}):\n${output}`));
    });
  });
}

function stop(server, signal) {
  return new Promise((resolve) => {
    if (server.child.exitCode !== null || server.child.signalCode !== null) return resolve();
    server.child.removeAllListeners("exit");
    server.child.on("exit", () => resolve());
    server.child.kill(signal);
  });
}

async function readAll(url, offset) {
  const messages = [];
  for (;;) {
    const r = await fetch(`${url}?offset=${encodeURIComponent(offset)}`);
    if (r.status !== 200) return { status: r.status, messages };
    messages.push(...JSON.parse(await r.text()));
    offset = r.headers.get("stream-next-offset");
    if (r.headers.get("stream-up-to-date") === "true") return { status: 200, messages };
  }
}

// The stream from the beginning folds to the full history's state; each saved reader position
// folds to it too when resumed, or is refused with 410 (below the horizon).
async function verify(streamUrl, all, saved, when) {
  const expected = snapshot(fold(all));
  const fromStart = await readAll(streamUrl, "-1");
  check(fromStart.status === 200, `${when}: read from -1 answered ${fromStart.status}`);
  check(isDeepStrictEqual(snapshot(fold(fromStart.messages)), expected),
        `${when}: the fold from -1 differs from the full history's`);
  let refused = 0;
  for (const { offset, folded } of saved) {
    const resumed = await readAll(streamUrl, offset);
    if (resumed.status === 410) {
      refused++;
      continue;
    }
    check(resumed.status === 200, `${when}: resumed read answered ${resumed.status}`);
    const state = fold(resumed.messages, fold(all.slice(0, folded)));
    check(isDeepStrictEqual(snapshot(state), expected),
          `${when}: a reader resumed at ${offset} folds to another state`);
  }
  return { survivors: fromStart.messages.length, refused };
}

const all = [];
const saved = [];
let server;
let kills = 0;
let midway = 0;  // kills after some records were dropped and before all were
// How long the last compaction took: the next kill comes at 75% to 105% of it, when a compaction
// of this size is mostly past its scan and dropping records.
let lastCompactionMs = 40;
let lastSurvivors = 0;
try {
  server = await start();
  const path = "/v1/stream/compaction-kill";
  const created = await fetch(server.url + path, {
    method: "PUT",
    headers: {
      "content-type": "application/json",
      "stream-compaction": "state",
      "stream-compaction-tombstone-ms": "0",
    },
  });
  check(created.status === 201, `PUT answered ${created.status}`);
  for (let round = 0; round < rounds; round++) {
    for (let i = 0; i < perRound; i += 100) {
      const batch = [];
      for (let j = 0; j < 100; j++) batch.push(change(all.length + batch.length));
      const r = await fetch(server.url + path, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify(batch),
      });
      check(r.status === 204, `append answered ${r.status}`);
      all.push(...batch);
      if (rand() % 4 === 0) saved.push({ offset: r.headers.get("stream-next-offset"), folded: all.length });
    }
    // A compaction, and a kill -9 at a pseudo-random moment of it (or just after).
    const delay = Math.floor((lastCompactionMs * (75 + (rand() % 31))) / 100);
    const before = lastSurvivors + perRound;  // the records the compaction starts from
    const compaction = fetch(`${server.url + path}?compact`, { method: "POST" }).catch(() => null);
    await new Promise((r) => setTimeout(r, delay));
    await stop(server, "SIGKILL");
    kills++;
    await compaction;
    server = await start();
    const afterKill = await verify(server.url + path, all, saved, `round ${round}, after the kill`);
    const compactionStarted = Date.now();
    const finished = await fetch(`${server.url + path}?compact`, { method: "POST" });
    lastCompactionMs = Date.now() - compactionStarted;
    check(finished.status === 200, `compaction after the restart answered ${finished.status}`);
    const report = await finished.json();
    const afterCompaction = await verify(server.url + path, all, saved,
                                         `round ${round}, compacted after the restart`);
    console.log(`round ${round}: killed ${delay} ms into a compaction of ${all.length} records; ` +
                `${afterKill.survivors} records after the restart, ${afterCompaction.survivors} ` +
                `after compacting (dropped ${report.dropped_records}); ` +
                `${afterCompaction.refused} of ${saved.length} saved readers below the horizon`);
    check(afterCompaction.survivors <= 150, "compaction left more than one record a key");
    if (afterKill.survivors > afterCompaction.survivors && afterKill.survivors < before) midway++;
    lastSurvivors = afterCompaction.survivors;
  }
  await stop(server, "SIGTERM");
  console.log(`compaction-kill: ${kills} kills (${midway} between the first and the last ` +
              `record dropped), every fold equal`);
} catch (e) {
  if (server) await stop(server, "SIGKILL");
  console.error(`compaction-kill: ${e.stack ?? e}`);
  process.exitCode = 1;
} finally {
  rmSync(dataDir, { recursive: true, force: true });
}

// Keyed compaction of State Protocol streams, checked with the official State Protocol package
// (@durable-streams/state, pinned in package.json) against the server named by RUNNEL_BASE_URL
// (started by run.sh): MaterializedState folds the full history and the compacted stream to the
// same state, resumed readers reach it too or are refused with 410 below the horizon, and
// non-State Protocol messages are refused on a compacted stream.
import { describe, expect, test } from "vitest";
import { fold, lcg, snapshot } from "./state-fold.mjs";

const baseUrl = process.env.RUNNEL_BASE_URL;
if (!baseUrl) throw new Error("RUNNEL_BASE_URL is not set; use run.sh");

let counter = 0;
const freshUrl = (name) => `${baseUrl}/v1/stream/state-${name}-${process.pid}-${++counter}`;

// A deterministic history: `n` changes over `keys` keys of two types, about 10% deletes.
function history(n, keys) {
  const rand = lcg(12345);
  const live = new Set();
  const out = [];
  for (let i = 0; i < n; i++) {
    const type = rand() % 2 ? "user" : "order";
    const key = `k${rand() % keys}`;
    const id = `${type}/${key}`;
    const op = !live.has(id) ? "insert" : rand() % 10 === 0 ? "delete" : "update";
    if (op === "delete") live.delete(id);
    else live.add(id);
    const m = { type, key, headers: { operation: op } };
    // About 700 bytes a message, so the survivors need more than one 1 MiB response.
    if (op !== "delete") m.value = { n: i, name: `row ${i}`, pad: "x".repeat(600) };
    out.push(m);
  }
  return out;
}

// Reads from `offset` until up to date: { status, messages, bytes }.
async function readAll(url, offset) {
  const messages = [];
  let bytes = 0;
  for (;;) {
    const r = await fetch(`${url}?offset=${encodeURIComponent(offset)}`);
    if (r.status !== 200) return { status: r.status, messages, bytes };
    const body = await r.text();
    bytes += body.length;
    messages.push(...JSON.parse(body));
    offset = r.headers.get("stream-next-offset");
    if (r.headers.get("stream-up-to-date") === "true") return { status: 200, messages, bytes };
  }
}

async function append(url, messages) {
  const r = await fetch(url, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify(messages),
  });
  return r;
}

describe("State Protocol compaction against runnel serve", () => {
  test("survivors and resumed readers fold to the full history's state", async () => {
    const url = freshUrl("fold");
    const created = await fetch(url, {
      method: "PUT",
      headers: {
        "content-type": "application/json",
        "stream-compaction": "state",
        "stream-compaction-tombstone-ms": "0",
      },
    });
    expect(created.status).toBe(201);
    const head = await fetch(url, { method: "HEAD" });
    expect(head.headers.get("stream-compaction")).toBe("state");
    expect(head.headers.get("stream-compaction-tombstone-ms")).toBe("0");

    const all = history(6000, 1000);
    // Offsets after each batch, and what a reader that stopped there had folded.
    const saved = [];
    for (let i = 0; i < all.length; i += 200) {
      const r = await append(url, all.slice(i, i + 200));
      expect(r.status).toBe(204);
      saved.push({ offset: r.headers.get("stream-next-offset"), folded: i + 200 });
    }
    const full = await readAll(url, "-1");
    expect(full.status).toBe(200);
    expect(full.messages.length).toBe(all.length);
    const expected = snapshot(fold(full.messages));

    const compacted = await fetch(`${url}?compact`, { method: "POST" });
    expect(compacted.status).toBe(200);
    const report = await compacted.json();
    expect(report.dropped_records).toBeGreaterThan(0);
    expect(report.dropped_tombstones).toBeGreaterThan(0);

    const after = await readAll(url, "-1");
    expect(after.status).toBe(200);
    expect(after.messages.length).toBe(report.kept_records);
    expect(snapshot(fold(after.messages))).toEqual(expected);
    expect(after.bytes).toBeLessThan(full.bytes / 2);
    // More survivors than one response carries (1 MiB): a reader of them is still never handed
    // an offset below the horizon that it would then be refused at.
    expect(after.bytes).toBeGreaterThan(1 << 20);

    let resumed = 0;
    let refused = 0;
    for (const s of saved) {
      const read = await readAll(url, s.offset);
      if (read.status === 410) {
        refused++;
        continue;
      }
      expect(read.status).toBe(200);
      const state = fold(read.messages, fold(all.slice(0, s.folded)));
      expect(snapshot(state)).toEqual(expected);
      resumed++;
    }
    expect(resumed).toBeGreaterThan(0);
    expect(refused).toBeGreaterThan(0);

    // Appends after the compaction are read as written.
    const late = { type: "user", key: "late", value: { n: -1 }, headers: { operation: "insert" } };
    expect((await append(url, [late])).status).toBe(204);
    const last = await readAll(url, "-1");
    expect(last.messages.at(-1)).toEqual(late);
  });

  test("a compacted stream refuses what is not a State Protocol message", async () => {
    const url = freshUrl("refuse");
    const created = await fetch(url, {
      method: "PUT",
      headers: { "content-type": "application/json", "stream-compaction": "state" },
    });
    expect(created.status).toBe(201);
    for (const bad of [{ n: 1 }, { type: "u", key: "1", headers: { operation: "upsert" }, value: 1 }]) {
      const r = await append(url, [bad]);
      expect(r.status).toBe(400);
      const body = await r.json();
      expect(body.error.code).toBe("invalid_argument");
      expect(body.error.message).toMatch(/State Protocol/);
    }
    const notJson = await fetch(freshUrl("bytes"), {
      method: "PUT",
      headers: { "content-type": "text/plain", "stream-compaction": "state" },
    });
    expect(notJson.status).toBe(400);
    const plain = freshUrl("plain");
    expect((await fetch(plain, { method: "PUT", headers: { "content-type": "application/json" } })).status).toBe(201);
    expect((await append(plain, [{ n: 1 }])).status).toBe(204);
    expect((await fetch(`${plain}?compact`, { method: "POST" })).status).toBe(409);
  });
});

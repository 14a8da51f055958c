// End-to-end test of the official TypeScript client (@durable-streams/client, pinned in
// package.json) against the server named by RUNNEL_BASE_URL (started by run.sh).
import { describe, expect, test } from "vitest";
import { DurableStream, IdempotentProducer } from "@durable-streams/client";

const baseUrl = process.env.RUNNEL_BASE_URL;
if (!baseUrl) throw new Error("RUNNEL_BASE_URL is not set; use run.sh");

let counter = 0;
const freshUrl = (name) => `${baseUrl}/v1/stream/client-e2e-${name}-${process.pid}-${++counter}`;

// Collects JSON items from a live response until `count` have arrived, then cancels it.
function collectJson(response, count) {
  return new Promise((resolve) => {
    const items = [];
    const unsubscribe = response.subscribeJson((batch) => {
      items.push(...batch.items);
      if (items.length >= count) {
        unsubscribe();
        response.cancel();
        resolve(items);
      }
    });
  });
}

describe("@durable-streams/client against runnel serve", () => {
  test("create, append and catch-up read", async () => {
    const stream = await DurableStream.create({ url: freshUrl("catchup"), contentType: "application/json" });
    await stream.append(JSON.stringify({ n: 1 }));
    await stream.append(JSON.stringify({ n: 2 }));
    const response = await stream.stream({ live: false });
    expect(await response.json()).toEqual([{ n: 1 }, { n: 2 }]);
    expect(response.upToDate).toBe(true);
  });

  test("live SSE tail delivers appends made after subscribing", async () => {
    const stream = await DurableStream.create({ url: freshUrl("sse"), contentType: "application/json" });
    await stream.append(JSON.stringify({ n: 0 }));
    const response = await stream.stream({ live: "sse" });
    const received = collectJson(response, 3);
    await stream.append(JSON.stringify({ n: 1 }));
    await stream.append(JSON.stringify({ n: 2 }));
    expect(await received).toEqual([{ n: 0 }, { n: 1 }, { n: 2 }]);
  });

  test("live long-poll tail delivers appends made after subscribing", async () => {
    const stream = await DurableStream.create({ url: freshUrl("longpoll"), contentType: "application/json" });
    const response = await stream.stream({ live: "long-poll" });
    const received = collectJson(response, 2);
    await stream.append(JSON.stringify({ n: 1 }));
    await stream.append(JSON.stringify({ n: 2 }));
    expect(await received).toEqual([{ n: 1 }, { n: 2 }]);
  });

  test("resumes from a saved offset without duplicates", async () => {
    const stream = await DurableStream.create({ url: freshUrl("resume"), contentType: "text/plain" });
    await stream.append("first;");
    const first = await stream.stream({ live: false });
    expect(await first.text()).toBe("first;");
    const saved = first.offset;
    await stream.append("second;");
    await stream.append("third;");
    const resumed = await stream.stream({ offset: saved, live: false });
    expect(await resumed.text()).toBe("second;third;");
  });

  test("idempotent producer: retries are deduplicated and a restart fences the old epoch", async () => {
    const url = freshUrl("producer");
    const stream = await DurableStream.create({ url, contentType: "application/json" });
    const producer = new IdempotentProducer(stream, "writer-1", { epoch: 0, lingerMs: 0 });
    producer.append(JSON.stringify({ n: 1 }));
    producer.append(JSON.stringify({ n: 2 }));
    await producer.flush();

    // A retry of an already accepted (producer, epoch, seq) is acknowledged without new data.
    const retry = await fetch(url, {
      method: "POST",
      headers: {
        "Content-Type": "application/json",
        "Producer-Id": "writer-1",
        "Producer-Epoch": "0",
        "Producer-Seq": "0",
      },
      body: JSON.stringify([{ n: 1 }]),
    });
    expect(retry.status).toBe(204);

    const restarted = new IdempotentProducer(stream, "writer-1", { epoch: 1, lingerMs: 0 });
    restarted.append(JSON.stringify({ n: 3 }));
    await restarted.flush();

    const zombie = await fetch(url, {
      method: "POST",
      headers: {
        "Content-Type": "application/json",
        "Producer-Id": "writer-1",
        "Producer-Epoch": "0",
        "Producer-Seq": "5",
      },
      body: JSON.stringify({ n: 99 }),
    });
    expect(zombie.status).toBe(403);
    expect(zombie.headers.get("Producer-Epoch")).toBe("1");

    const response = await stream.stream({ live: false });
    expect(await response.json()).toEqual([{ n: 1 }, { n: 2 }, { n: 3 }]);
  });
});

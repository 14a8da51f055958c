// The official Durable Streams conformance suite over HTTP/2: every request the suite makes to
// RUNNEL_BASE_URL goes through h2-fetch.mjs (h2c with prior knowledge), the rest as in
// conformance.test.mjs. The last test checks that the requests really went over HTTP/2.
import { h2Requests } from "./h2-fetch.mjs";
import { afterAll, expect, test } from "vitest";
import { runConformanceTests } from "@durable-streams/server-conformance-tests";

const baseUrl = process.env.RUNNEL_BASE_URL;
if (!baseUrl) throw new Error("RUNNEL_BASE_URL is not set; use run.sh");

runConformanceTests({
  baseUrl,
  longPollTimeoutMs: Number(process.env.RUNNEL_LONG_POLL_TIMEOUT_MS ?? "500"),
  subscriptions: true,
});

// The server counts a request when it answers it: a long poll or live read the suite left
// running is counted once it ends (the long-poll timeout, 500 ms), and a request the suite
// aborted before its answer (a reset stream) may never be, so wait up to 10 s for all but 1% of
// them (over HTTP/1.1, none would be counted here).
test("the suite's requests went over HTTP/2", async () => {
  expect(h2Requests).toBeGreaterThan(300);
  const enough = Math.floor(h2Requests * 0.99);
  let counted = 0;
  for (const deadline = Date.now() + 10_000; Date.now() < deadline; ) {
    const metrics = await (await fetch(`${baseUrl}/metrics`)).text();
    const line = metrics
      .split("\n")
      .find((l) => l.startsWith('runnel_http_requests_by_version_total{version="2"}'));
    counted = Number(line?.split(" ").pop());
    if (counted >= h2Requests - 1) break;
    await new Promise((resolve) => setTimeout(resolve, 200));
  }
  expect(counted).toBeGreaterThanOrEqual(enough);
  expect(counted).toBeLessThanOrEqual(h2Requests + 1);  // the /metrics reads themselves
}, 15_000);

// Runs the official Durable Streams server conformance suite against the server named by
// RUNNEL_BASE_URL (started by run.sh).
import { runConformanceTests } from "@durable-streams/server-conformance-tests";

const baseUrl = process.env.RUNNEL_BASE_URL;
if (!baseUrl) throw new Error("RUNNEL_BASE_URL is not set; use run.sh");

runConformanceTests({
  baseUrl,
  longPollTimeoutMs: Number(process.env.RUNNEL_LONG_POLL_TIMEOUT_MS ?? "500"),
  // The reserved __ds subscription API (PROTOCOL.md sections 6-7).
  subscriptions: true,
});

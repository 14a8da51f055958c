// Starts the Durable Streams Node reference server for benchmarks: in memory, or file-backed
// when a data directory is given. Prints "listening on <url>" and runs until SIGTERM.
import { DurableStreamTestServer } from "@durable-streams/server";

const dataDir = process.argv[2];
const server = new DurableStreamTestServer({
  host: "127.0.0.1",
  port: 0,
  compression: false,
  ...(dataDir ? { dataDir } : {}),
});
const url = await server.start();
console.log(`reference server listening on ${url} (${dataDir ? "file-backed" : "memory"})`);
process.on("SIGTERM", async () => {
  await server.stop();
  process.exit(0);
});

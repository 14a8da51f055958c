// Replaces the global fetch, for requests to RUNNEL_BASE_URL, with one that speaks HTTP/2 with
// prior knowledge (h2c) over a single connection through Node's http2 module, so a suite written
// against fetch runs over HTTP/2 unchanged. Everything else (the suite's own webhook receivers)
// keeps Node's fetch. Bodies are decoded like fetch does (gzip, deflate, br), and an aborted
// signal resets the stream. Imported before the suite by the *-h2.test.mjs entry files.
import http2 from "node:http2";
import { Readable } from "node:stream";
import zlib from "node:zlib";

const base = new URL(process.env.RUNNEL_BASE_URL ?? "http://127.0.0.1");
const nodeFetch = globalThis.fetch;
let session = null;
export let h2Requests = 0;

function connection() {
  if (!session || session.closed || session.destroyed) {
    session = http2.connect(base.origin, { settings: { enablePush: false } });
    session.on("error", () => {});
    session.unref();
  }
  return session;
}

function abortError(signal) {
  return signal?.reason ?? new DOMException("This operation was aborted", "AbortError");
}

globalThis.fetch = async function h2Fetch(input, init = {}) {
  const request = new Request(input, init);
  const url = new URL(request.url);
  if (url.origin !== base.origin) return nodeFetch(input, init);
  const signal = init.signal ?? request.signal;
  if (signal?.aborted) throw abortError(signal);
  const headers = {
    ":method": request.method,
    ":path": url.pathname + url.search,
    ":authority": url.host,
    ":scheme": "http",
  };
  for (const [name, value] of request.headers) {
    if (!["connection", "host", "keep-alive", "transfer-encoding"].includes(name)) headers[name] = value;
  }
  // As Node's fetch does.
  if (!("accept-encoding" in headers)) headers["accept-encoding"] = "gzip, deflate, br";
  const body = request.body ? Buffer.from(await request.arrayBuffer()) : null;
  const stream = connection().request(headers, { endStream: body === null });
  h2Requests++;
  if (body !== null) stream.end(body);
  const onAbort = () => stream.destroy(abortError(signal));
  signal?.addEventListener("abort", onAbort, { once: true });
  const head = await new Promise((resolve, reject) => {
    stream.once("response", resolve);
    stream.once("error", reject);
    stream.once("close", () => reject(abortError(signal)));
  });
  const status = head[":status"];
  const responseHeaders = new Headers();
  for (const [name, value] of Object.entries(head)) {
    if (name.startsWith(":")) continue;
    for (const v of Array.isArray(value) ? value : [value]) responseHeaders.append(name, String(v));
  }
  const noBody = request.method === "HEAD" || status === 204 || status === 304;
  let source = stream;
  const coding = head["content-encoding"];
  if (!noBody && coding === "gzip") source = stream.pipe(zlib.createGunzip());
  if (!noBody && coding === "deflate") source = stream.pipe(zlib.createInflate());
  if (!noBody && coding === "br") source = stream.pipe(zlib.createBrotliDecompress());
  if (source !== stream) stream.on("error", (e) => source.destroy(e));
  stream.on("close", () => signal?.removeEventListener("abort", onAbort));
  if (noBody) stream.resume();
  const response = new Response(noBody ? null : Readable.toWeb(source), {
    status,
    headers: responseHeaders,
  });
  Object.defineProperty(response, "url", { value: request.url });
  return response;
};

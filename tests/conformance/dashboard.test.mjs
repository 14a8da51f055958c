// The built-in dashboard (src/server/dashboard) against the server named by RUNNEL_BASE_URL
// (started by run.sh): its pure functions, then the page as served, run in jsdom with the
// page's requests going to the real server.
import { describe, expect, test, afterAll } from "vitest";
import vm from "node:vm";
import { JSDOM } from "jsdom";

const baseUrl = process.env.RUNNEL_BASE_URL;
if (!baseUrl) throw new Error("RUNNEL_BASE_URL is not set; use run.sh");

const tag = `dash-${process.pid}`;
const appJs = await (await fetch(`${baseUrl}/ui/app.js`)).text();

// app.js as a plain script outside a page: only its pure functions, in module.exports.
function loadFunctions() {
  const context = { module: { exports: {} } };
  vm.runInNewContext(appJs, context);
  return context.module.exports;
}

async function until(what, check, timeoutMs = 8000) {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = check();
    if (value) return value;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

async function put(name, contentType, body) {
  const r = await fetch(`${baseUrl}/v1/stream/${name}`, {
    method: "PUT", headers: { "Content-Type": contentType }, body,
  });
  expect([200, 201]).toContain(r.status);
}

async function post(name, contentType, body) {
  const r = await fetch(`${baseUrl}/v1/stream/${name}`, {
    method: "POST", headers: { "Content-Type": contentType }, body,
  });
  expect([200, 204]).toContain(r.status);
}

describe("dashboard functions", () => {
  const d = loadFunctions();

  test("parseMetrics reads samples, labels and escapes, and skips comments", () => {
    const samples = d.parseMetrics([
      "# HELP x y",
      "# TYPE x counter",
      'runnel_http_requests_total{route="stream",method="POST",status="204"} 7',
      'runnel_info{version="1.2",store="log",durability="a\\"b\\\\c"} 1',
      "runnel_connections 3",
      "garbage line",
      'runnel_append_latency_seconds_bucket{le="+Inf"} 9',
    ].join("\n"));
    expect(samples).toHaveLength(4);
    expect(samples[0]).toEqual({
      name: "runnel_http_requests_total",
      labels: { route: "stream", method: "POST", status: "204" },
      value: 7,
    });
    expect(samples[1].labels.durability).toBe('a"b\\c');
    expect(samples[3].labels.le).toBe("+Inf");
  });

  test("summarize counts successful appends and 5xx answers", () => {
    const s = d.summarize(d.parseMetrics([
      'runnel_http_requests_total{route="stream",method="POST",status="204"} 10',
      'runnel_http_requests_total{route="stream",method="POST",status="409"} 2',
      'runnel_http_requests_total{route="stream",method="GET",status="503"} 1',
      "runnel_store_syncs_total 4",
      "runnel_store_records_per_sync_sum 10",
    ].join("\n")));
    expect(s.requests).toBe(13);
    expect(s.appends).toBe(10);
    expect(s.errors).toBe(1);
    expect(s.syncs).toBe(4);
  });

  test("histogramQuantile interpolates inside the bucket, like Prometheus", () => {
    const buckets = [{ le: 0.001, count: 50 }, { le: 0.002, count: 100 }, { le: Infinity, count: 100 }];
    expect(d.histogramQuantile(buckets, 0.5)).toBeCloseTo(0.001);
    expect(d.histogramQuantile(buckets, 0.75)).toBeCloseTo(0.0015);
    expect(d.histogramQuantile([{ le: 0.001, count: 0 }, { le: Infinity, count: 0 }], 0.5)).toBeNull();
    expect(d.histogramQuantile([{ le: 0.001, count: 1 }, { le: Infinity, count: 10 }], 0.99))
      .toBe(0.001);
  });

  test("rates are per second, and a counter that went down (a restart) counts from zero", () => {
    const prev = d.summarize(d.parseMetrics(
      'runnel_http_requests_total{route="stream",method="POST",status="204"} 100'));
    const cur = d.summarize(d.parseMetrics(
      'runnel_http_requests_total{route="stream",method="POST",status="204"} 300'));
    expect(d.rates(prev, cur, 2).appends).toBe(100);
    expect(d.rates(cur, prev, 2).appends).toBe(50);
    expect(d.rates(prev, cur, 2).recordsPerSync).toBeNull();
  });

  test("paths encode each name segment, in the global and a tenant scope", () => {
    const global = d.scopePaths("");
    expect(global.list).toBe("/v1/streams");
    expect(global.stream("a b/c?d")).toBe("/v1/stream/a%20b/c%3Fd");
    expect(global.groups("x")).toBe("/v1/groups/stream/x");
    const tenant = d.scopePaths(" acme ");
    expect(tenant.list).toBe("/v1/tenants/acme/streams");
    expect(tenant.groups("x")).toBe("/v1/groups/tenants/acme/stream/x");
  });

  test("offsetPosition and recordsForDisplay", () => {
    expect(d.offsetPosition("0000000000000000_0000000000000042")).toBe("42");
    expect(d.offsetPosition("0000000000000000_0000000000000000")).toBe("0");
    expect(d.offsetPosition("18446744073709551615")).toBe("18446744073709551615");
    expect(d.recordsForDisplay("application/json", '[{"a":1},"s"]')).toEqual(['{"a":1}', '"s"']);
    expect(d.recordsForDisplay("text/plain; charset=utf-8", "hello")).toEqual(["hello"]);
    expect(d.isTextual("text/plain; charset=utf-8")).toBe(true);
    expect(d.isTextual("Application/JSON")).toBe(true);
    expect(d.isTextual("application/octet-stream")).toBe(false);
    expect(d.recordsForDisplay("application/octet-stream", 3)).toEqual(["(3 B of application/octet-stream)"]);
    expect(d.recordsForDisplay("application/octet-stream", 0)).toEqual([]);
    expect(d.recordsForDisplay("text/plain", "x".repeat(10), 4)).toEqual(["xxxx …"]);
  });
});

describe("dashboard page against runnel serve", () => {
  let dom;
  afterAll(() => dom?.window.close());

  test("served with a policy that allows only this origin", async () => {
    const r = await fetch(`${baseUrl}/`);
    expect(r.status).toBe(200);
    expect(r.headers.get("content-type")).toMatch(/^text\/html/);
    expect(r.headers.get("content-security-policy")).toContain("script-src 'self'");
    expect(r.headers.get("x-frame-options")).toBe("DENY");
    const missing = await fetch(`${baseUrl}/ui/nothing.js`);
    expect(missing.status).toBe(404);
    expect((await missing.json()).error.code).toBe("not_found");
  });

  test("lists streams, describes one, reads it and follows it live", async () => {
    await put(`${tag}-json`, "application/json", JSON.stringify([{ n: 1 }, { n: 2 }]));
    await put(`${tag}-text`, "text/plain", "hello");
    await put(`${tag}-<b>x</b>`, "text/plain", "");
    await put(`${tag}-bin`, "application/octet-stream", new Uint8Array([0, 1, 2, 255, 254]));
    const ack = await fetch(`${baseUrl}/v1/groups/stream/${tag}-json?group=workers&ack=1`, { method: "POST" });
    expect(ack.status).toBe(200);

    const html = await (await fetch(`${baseUrl}/`)).text();
    dom = new JSDOM(html, { url: `${baseUrl}/`, runScripts: "outside-only", pretendToBeVisual: true });
    const w = dom.window;
    // The page's requests go to the real server; jsdom has no fetch of its own.
    w.fetch = (input, init = {}) => {
      const options = { ...init };
      if (init.signal) {
        const controller = new AbortController();
        if (init.signal.aborted) controller.abort();
        init.signal.addEventListener("abort", () => controller.abort());
        options.signal = controller.signal;
      }
      return fetch(new URL(input, baseUrl), options);
    };
    w.document.getElementById("prefix").value = tag;
    w.eval(appJs);
    const $ = (id) => w.document.getElementById(id);

    // The listing, with names shown as text (the markup-like name makes no element).
    const rows = await until("four streams", () => {
      const r = [...$("streams").tBodies[0].rows];
      return r.length === 4 ? r : null;
    });
    const names = rows.map((r) => r.cells[0].textContent);
    expect(names).toEqual([`${tag}-<b>x</b>`, `${tag}-bin`, `${tag}-json`, `${tag}-text`]);
    expect($("streams").querySelector("b")).toBeNull();
    const json = rows[2];
    expect(json.cells[1].textContent).toBe("application/json");
    expect(json.cells[2].textContent).toBe("2");
    expect(json.cells[3].textContent).toBe("2");

    // Server figures and the runnel_info line.
    await until("health", () => $("health").textContent === "up");
    await until("info", () => /store memory|store log|store postgres/.test($("info").textContent));
    expect($("figures").querySelectorAll(".figure").length).toBeGreaterThan(5);

    // One stream: metadata and its consumer group.
    json.dispatchEvent(new w.MouseEvent("click", { bubbles: true }));
    await until("metadata", () => $("detail-meta").textContent.includes("application/json"));
    const group = await until("group row", () => {
      const r = $("groups").tBodies[0].rows[0];
      return r && r.cells.length === 4 ? r : null;
    });
    expect(group.cells[0].textContent).toBe("workers");
    expect(group.cells[1].textContent).toBe("1");
    expect(group.cells[2].textContent).toBe("1");

    // Records from the start, then live.
    $("read-start").click();
    await until("records", () => $("records").children.length === 2);
    expect([...$("records").children].map((li) => li.textContent)).toEqual(['{"n":1}', '{"n":2}']);
    $("tail-toggle").click();
    await until("live wait", () => $("tail-state").textContent === "waiting for new records");
    await new Promise((r) => setTimeout(r, 200));  // the long-poll is on its way
    await post(`${tag}-json`, "application/json", JSON.stringify({ n: 3 }));
    await until("live record", () => [...$("records").children].some((li) => li.textContent === '{"n":3}'));
    $("tail-toggle").click();
    expect($("tail-toggle").textContent).toBe("Follow live");

    // A binary stream's records are shown by size, not decoded.
    rows[1].dispatchEvent(new w.MouseEvent("click", { bubbles: true }));
    await until("binary metadata", () => $("detail-meta").textContent.includes("application/octet-stream"));
    $("read-start").click();
    await until("binary record", () => $("records").children.length === 1);
    expect($("records").children[0].textContent).toBe("(5 B of application/octet-stream)");
  });
});

// The built-in console (src/server/dashboard) against the server named by RUNNEL_BASE_URL
// (started by run.sh): its pure functions as served, and the headers the page is served with.
// The page itself is driven in a real browser by tests/console (ctest console_browser).
import { describe, expect, test } from "vitest";
import vm from "node:vm";

const baseUrl = process.env.RUNNEL_BASE_URL;
if (!baseUrl) throw new Error("RUNNEL_BASE_URL is not set; use run.sh");

const appJs = await (await fetch(`${baseUrl}/ui/app.js`)).text();

// app.js as a plain script outside a page: only its pure functions, in module.exports.
function loadFunctions() {
  const context = { module: { exports: {} }, URLSearchParams };
  vm.runInNewContext(appJs, context);
  return context.module.exports;
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
    expect(d.recordsForDisplay("application/json", '[{"a":1},"s"]', 7)).toEqual([
      { offset: 6, text: '{\n  "a": 1\n}' }, { offset: 7, text: '"s"' }]);
    expect(d.recordsForDisplay("text/plain; charset=utf-8", "hello", 3))
      .toEqual([{ offset: null, text: "hello" }]);
    expect(d.isTextual("text/plain; charset=utf-8")).toBe(true);
    expect(d.isTextual("Application/JSON")).toBe(true);
    expect(d.isTextual("application/octet-stream")).toBe(false);
    expect(d.recordsForDisplay("application/octet-stream", 3, 1))
      .toEqual([{ offset: null, text: "(3 B of application/octet-stream)" }]);
    expect(d.recordsForDisplay("application/octet-stream", 0, 0)).toEqual([]);
    expect(d.recordsForDisplay("text/plain", "x".repeat(10), 1, 4))
      .toEqual([{ offset: null, text: "xxxx …" }]);
    expect(d.offsetToken(0)).toBe("0000000000000000_0000000000000000");
    expect(d.offsetToken("41")).toBe("0000000000000000_0000000000000041");
    expect(() => d.offsetToken("-1")).toThrow();
  });

  test("naturalCompare puts bench-2 before bench-10 and is a total order", () => {
    const names = ["bench-10", "bench-2", "bench-1", "b", "bench-02", "bench-", "a10b2", "a10b10", "a9"];
    expect(names.slice().sort(d.naturalCompare)).toEqual(
      ["a9", "a10b2", "a10b10", "b", "bench-", "bench-1", "bench-02", "bench-2", "bench-10"]);
    expect(d.naturalCompare("x", "x")).toBe(0);
    expect(d.naturalCompare("99999999999999999999", "100000000000000000000")).toBeLessThan(0);
  });

  test("plural, internal streams and errors for people", () => {
    expect(d.plural(1, "stream")).toBe("1 stream");
    expect(d.plural(0, "stream")).toBe("0 streams");
    expect(d.plural(2, "stream")).toBe("2 streams");
    expect(d.isInternal({ name: "orders:checkpoint", channel: true })).toBe(true);
    expect(d.isInternal({ name: "orders:checkpoint" })).toBe(false);
    expect(d.isInternal({ name: "__ds/subs" })).toBe(true);
    expect(d.describeError(401, "unauthorized", "no token")).toMatch(/^401 unauthorized: no token — type a token/);
    expect(d.describeError(403, "forbidden", "x")).toMatch(/this token may not do that/);
    expect(d.describeError(409, "conflict", "closed")).toBe("409 conflict: closed");
  });

  test("visibleStreams keeps the server's order and hides internals unless asked", () => {
    const streams = ["s-1", "s-2", "o:0", "s-10"].map((name) => ({ name, channel: name === "o:0" }));
    const shown = d.visibleStreams(streams);
    expect(shown.rows.map((s) => s.name)).toEqual(["s-1", "s-2", "s-10"]);
    expect(shown.hidden).toBe(1);
    const all = d.visibleStreams(streams, true);
    expect(all.rows.map((s) => s.name)).toEqual(["s-1", "s-2", "o:0", "s-10"]);
    expect(all.hidden).toBe(0);
    expect(d.listPageNumber("3")).toBe(3);
    expect(d.listPageNumber("x")).toBe(1);
    expect(d.listPageNumber(undefined)).toBe(1);
    expect(d.listPageNumber("0")).toBe(1);
  });

  test("routes round-trip, with names that need encoding", () => {
    expect(d.parseRoute("")).toEqual({ view: "overview", name: null, params: {} });
    expect(d.parseRoute("#/streams?prefix=a%20b&after=x")).toEqual(
      { view: "streams", name: null, params: { prefix: "a b", after: "x" } });
    const hash = d.routeHash("stream", "a/b c?#", { offset: 5, tenant: "", follow: false });
    expect(hash).toBe("#/stream/a%2Fb%20c%3F%23?offset=5");
    expect(d.parseRoute(hash)).toEqual({ view: "stream", name: "a/b c?#", params: { offset: "5" } });
    expect(d.parseRoute("#/stream/%E0%A4%A").view).toBe("missing");
    expect(d.parseRoute("#/elsewhere").view).toBe("missing");
  });

  test("chart samples keep 15 minutes, and paths scale into the box", () => {
    let s = [];
    for (let t = 0; t <= 20 * 60 * 1000; t += 60 * 1000) s = d.pushSample(s, { t, v: 1 });
    expect(s[0].t).toBe(5 * 60 * 1000);
    expect(s).toHaveLength(16);
    expect(d.pushSample(s, { t: 0, v: 2 })).toEqual([{ t: 0, v: 2 }]);
    // A young chart spans its samples (at least one 2 s interval), an old one 15 minutes.
    expect(d.chartWindow([{ t: 90000 }], 100000)).toEqual([90000, 100000]);
    expect(d.chartWindow([], 100000)).toEqual([98000, 100000]);
    expect(d.chartWindow([{ t: 0 }], 3600000)).toEqual([2700000, 3600000]);
    expect(d.formatSpan(42000)).toBe("−42 s");
    expect(d.formatSpan(900000)).toBe("−15 min");
    expect(d.niceCeil(0)).toBe(1);
    expect(d.niceCeil(3)).toBe(5);
    expect(d.niceCeil(0.012)).toBeCloseTo(0.02);
    expect(d.niceCeil(100)).toBe(100);
    expect(d.chartPath([{ t: 0, v: 0 }, { t: 50, v: 5 }, { t: 75, v: null }, { t: 100, v: 10 }],
                       0, 100, 10, 200, 100)).toBe("M0.0 100.0L100.0 50.0M200.0 0.0");
  });
});

describe("dashboard page against runnel serve", () => {
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
});

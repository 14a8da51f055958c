// The built-in console in a real browser: Debian's chromium, headless, driven by puppeteer-core,
// against a `runnel serve` this test starts on a free loopback port with a temporary data
// directory. Each view is opened by its URL, reloaded, and driven as a person would; the test
// asserts on the DOM and writes a screenshot of each view into RUNNEL_CONSOLE_SCREENSHOTS
// (default build/console-screenshots). Run by run.sh (ctest console_browser).
import { after, afterEach, before, test } from "node:test";
import assert from "node:assert/strict";
import { spawn, execFileSync } from "node:child_process";
import { mkdirSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import puppeteer from "puppeteer-core";

const here = path.dirname(fileURLToPath(import.meta.url));
const root = path.resolve(here, "../..");
const binary = process.env.RUNNEL_BINARY ?? path.join(root, "build/release/bin/runnel");
const chromium = process.env.RUNNEL_CHROMIUM ?? "/usr/bin/chromium";
const shots = path.resolve(process.env.RUNNEL_CONSOLE_SCREENSHOTS ??
                           path.join(root, "build/console-screenshots"));
// Every wait in this file is bounded by this.
const waitMs = 10000;

let server;
let dataDir;
let base;
let browser;
let page;
// Script errors in the page and errors it logs; each test must leave none.
const pageErrors = [];

async function startServer() {
  dataDir = mkdtempSync(path.join(tmpdir(), "runnel-console-"));
  server = spawn(binary, ["serve", "--listen", "127.0.0.1:0", "--data", dataDir,
                          "--long-poll-timeout-ms", "1000"],
                 { stdio: ["ignore", "pipe", "pipe"] });
  let log = "";
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error("runnel serve did not start:\n" + log)), waitMs);
    const onData = (chunk) => {
      log += chunk;
      const m = /http:\/\/127\.0\.0\.1:\d+/.exec(log);
      if (m) {
        clearTimeout(timer);
        resolve(m[0]);
      }
    };
    server.stdout.on("data", onData);
    server.stderr.on("data", onData);
    server.on("exit", (code) => reject(new Error(`runnel serve exited (${code}):\n${log}`)));
  });
}

async function call(method, urlPath, { body, type, headers = {} } = {}) {
  const h = { ...headers };
  if (type) h["Content-Type"] = type;
  const r = await fetch(base + urlPath, { method, headers: h, body });
  if (!r.ok) throw new Error(`${method} ${urlPath}: ${r.status} ${await r.text()}`);
  return r;
}

// The text of every element matching `selector`.
function texts(selector) {
  return page.$$eval(selector, (els) => els.map((e) => e.textContent.trim()));
}

async function waitText(selector, expected) {
  try {
    await page.waitForFunction(
      (s, e) => {
        const n = document.querySelector(s);
        return n !== null && n.textContent.includes(e);
      },
      { timeout: waitMs }, selector, expected);
  } catch (e) {
    const got = await page.$eval(selector, (n) => n.textContent).catch(() => "(absent)");
    throw new Error(`${selector} never contained ${JSON.stringify(expected)}; it holds ` +
                    JSON.stringify(got));
  }
}

// Opens a view by its URL in a fresh load (as a shared link or a reload would).
async function open(hash) {
  await page.goto(base + "/" + hash, { waitUntil: "domcontentloaded" });
}

async function streamNames() {
  return texts("#streams tbody td:first-child");
}

async function shot(name) {
  await page.screenshot({ path: path.join(shots, name + ".png"), fullPage: true });
}

before(async () => {
  mkdirSync(shots, { recursive: true });
  base = await startServer();
  const args = ["--headless=new", "--disable-gpu", "--disable-dev-shm-usage"];
  if (process.getuid && process.getuid() === 0) args.push("--no-sandbox");
  browser = await puppeteer.launch({ executablePath: chromium, headless: true, args,
                                     protocolTimeout: 30000 });
  page = await browser.newPage();
  await page.setViewport({ width: 1280, height: 900 });
  page.setDefaultTimeout(waitMs);
  page.on("pageerror", (e) => pageErrors.push(e.message));
  // Errors the page logs count too (a Content-Security-Policy refusal is one), except the
  // browser's note of a 4xx answer, which the tests provoke on purpose.
  page.on("console", (m) => {
    if (m.type() === "error" && !/status of 4\d\d/.test(m.text())) pageErrors.push(m.text());
  });

  for (const n of ["bench-10", "bench-2", "bench-1", "bench-3"]) {
    await call("PUT", `/v1/stream/${n}`, { type: "text/plain" });
  }
  await call("PUT", "/v1/stream/events", { type: "application/json" });
  await call("POST", "/v1/stream/events", {
    type: "application/json", body: JSON.stringify([{ n: 1, tags: ["a", "b"] }, { n: 2 }, { n: 3 }]),
  });
  await call("POST", "/v1/groups/stream/events?group=workers&ack=1");
  await call("PUT", "/v1/channels/orders?partitions=2");
  await call("PUT", "/v1/stream/odd-%3Cb%3Ex%3C%2Fb%3E", { type: "text/plain", body: "hello" });
  await call("PUT", "/v1/stream/odd-bin", {
    type: "application/octet-stream", body: new Uint8Array([0, 1, 2, 255, 254]),
  });
  // More than 2,000 streams (the server pages them in natural order), created 16 at a time.
  let nextMany = 0;
  await Promise.all(Array.from({ length: 16 }, async () => {
    for (let i = nextMany++; i < 2005; i = nextMany++) {
      await call("PUT", `/v1/stream/many-${i}`, { type: "text/plain" });
    }
  }));
  for (let i = 1; i <= 30; i++) await call("PUT", `/v1/stream/page-${i}`, { type: "text/plain" });
});

afterEach(() => {
  assert.deepEqual(pageErrors.splice(0), [], "errors in the page");
});

after(async () => {
  await browser?.close();
  if (server && server.exitCode === null) {
    server.kill("SIGTERM");
    await new Promise((r) => server.once("exit", r));
  }
  if (dataDir) rmSync(dataDir, { recursive: true, force: true });
});

test("overview charts the server's figures and keeps them across a reload", async () => {
  await open("#/");
  assert.equal(await page.$eval("#view-overview", (e) => e.hidden), false);
  // Appends while the page samples: the appends chart must show a rate above zero.
  const deadline = Date.now() + waitMs;
  let points = 0;
  while (Date.now() < deadline) {
    await call("POST", "/v1/stream/events", { type: "application/json", body: '{"load":1}' });
    points = Number(await page.$eval('#chart-appends path[data-series="appends"]',
                                     (p) => p.dataset.points).catch(() => "0"));
    if (points >= 2) break;
    await new Promise((r) => setTimeout(r, 200));
  }
  assert.ok(points >= 2, `appends chart has ${points} points`);
  assert.deepEqual(await page.$$eval(".chart", (cs) => cs.map((c) => c.id)),
                   ["chart-appends", "chart-latency", "chart-sync", "chart-readers", "chart-errors"]);
  const d = await page.$eval('#chart-appends path[data-series="appends"]', (p) => p.getAttribute("d"));
  assert.match(d, /^M[\d.]+ [\d.]+L/);
  await page.waitForFunction(() => !/–/.test(
    document.querySelector('#chart-appends .chart-value').textContent), { timeout: waitMs });
  await page.waitForFunction(
    () => document.querySelector('#chart-latency path[data-series="p99"]').dataset.points !== "0",
    { timeout: waitMs });
  await shot("overview");
  await page.reload({ waitUntil: "domcontentloaded" });
  const kept = Number(await page.$eval('#chart-appends path[data-series="appends"]',
                                       (p) => p.dataset.points));
  assert.ok(kept >= points, `after a reload the chart kept ${kept} of ${points} points`);
});

test("stream list sorts naturally, hides channel internals, filters and pages", async () => {
  await open("#/streams?prefix=bench-");
  await waitText("#stream-count", "4 streams");
  assert.deepEqual(await streamNames(), ["bench-1", "bench-2", "bench-3", "bench-10"]);

  await open("#/streams?prefix=orders");
  await waitText("#stream-count", "0 streams (3 channel internals hidden)");
  await page.click("#show-internal");
  await waitText("#stream-count", "3 streams");
  assert.match(page.url(), /internal=1/);
  assert.deepEqual(await streamNames(), ["orders:0", "orders:1", "orders:checkpoint"]);

  // Names are text: a name that looks like markup makes no element.
  await open("#/streams?prefix=odd-");
  await waitText("#stream-count", "2 streams");
  assert.deepEqual(await streamNames(), ["odd-<b>x</b>", "odd-bin"]);
  assert.equal(await page.$("#streams tbody b"), null);

  // The prefix filter follows typing and is kept in the URL.
  await open("#/streams");
  await page.type("#prefix", "events");
  await waitText("#stream-count", "1 stream");
  assert.equal(await page.$eval("#stream-count", (e) => e.textContent), "1 stream");
  assert.match(page.url(), /prefix=events/);

  // 30 page-N streams, 25 a page: the server's pages in natural order; the second page has the
  // rest, survives a reload, and leads back to the first.
  await open("#/streams?prefix=page-&size=25");
  await waitText("#stream-count", "25 streams on page 1");
  await waitText("#list-mode", "In natural order");
  const first = await streamNames();
  assert.deepEqual([first[0], first[1], first[24]], ["page-1", "page-2", "page-25"]);
  assert.equal(await page.$eval("#page-next", (b) => b.disabled), false);
  assert.equal(await page.$eval("#page-prev", (b) => b.disabled), true);
  await shot("streams");
  await page.click("#page-next");
  await waitText("#stream-count", "5 streams on page 2");
  assert.match(page.url(), /page=2/);
  assert.match(page.url(), /after=page-25/);
  await page.reload({ waitUntil: "domcontentloaded" });
  await waitText("#stream-count", "5 streams on page 2");
  assert.deepEqual(await streamNames(), ["page-26", "page-27", "page-28", "page-29", "page-30"]);
  assert.equal(await page.$eval("#page-next", (b) => b.disabled), true);
  await page.click("#page-prev");
  await waitText("#stream-count", "25 streams on page 1");

  // More than 2,000 streams: every page continues the natural order where the last one ended.
  await open("#/streams?prefix=many-&size=500");
  await waitText("#stream-count", "500 streams on page 1");
  const one = await streamNames();
  assert.deepEqual(one, Array.from({ length: 500 }, (_, i) => `many-${i}`));
  await page.click("#page-next");
  await page.waitForFunction(() => location.hash.includes("after="));
  await waitText("#stream-count", "500 streams on page 2");
  const two = await streamNames();
  assert.deepEqual(two, Array.from({ length: 500 }, (_, i) => `many-${500 + i}`));
  await page.reload({ waitUntil: "domcontentloaded" });
  await waitText("#stream-count", "500 streams on page 2");
  assert.deepEqual(await streamNames(), two);
  // The last page: many-2000 .. many-2004 after four full pages.
  for (const n of [3, 4, 5]) {
    await page.click("#page-next");
    await waitText("#stream-count", ` on page ${n}`);
  }
  await waitText("#stream-count", "5 streams on page 5");
  assert.deepEqual(await streamNames(), ["many-2000", "many-2001", "many-2002", "many-2003",
                                         "many-2004"]);
  assert.equal(await page.$eval("#page-next", (b) => b.disabled), true);
  await page.click("#page-prev");
  await waitText("#stream-count", "500 streams on page 4");
  assert.equal((await streamNames())[0], "many-1500");
});

test("record browser shows offsets and pretty JSON, jumps, and follows live", async () => {
  await open("#/stream/events");
  await page.waitForSelector('#records tbody tr[data-offset="1"]');
  assert.deepEqual((await texts("#records tbody td:first-child")).slice(0, 3), ["1", "2", "3"]);
  const firstRecord = await page.$eval('#records tbody tr[data-offset="1"] pre', (e) => e.textContent);
  assert.equal(firstRecord, JSON.stringify({ n: 1, tags: ["a", "b"] }, null, 2));
  await waitText('#groups tr[data-group="workers"] .lag', "");
  assert.equal(await page.$eval('#groups tr[data-group="workers"] .acked', (e) => e.textContent), "1");

  // Jump to offset 2: the URL says so, and a reload shows the same records.
  await page.$eval("#jump-offset", (e) => { e.value = ""; });
  await page.type("#jump-offset", "2");
  await page.click("#jump");
  await page.waitForFunction(() => location.hash.includes("offset=2"));
  await page.waitForSelector('#records tbody tr[data-offset="2"]');
  await page.reload({ waitUntil: "domcontentloaded" });
  await page.waitForSelector('#records tbody tr[data-offset="2"]');
  assert.equal((await texts("#records tbody td:first-child"))[0], "2");

  // Follow: a record appended elsewhere appears, and the metadata and lag follow it.
  const before = Number(await page.$eval('dd[data-field="Records appended"]', (e) => e.textContent));
  const lagBefore = Number(await page.$eval('#groups tr[data-group="workers"] .lag', (e) => e.textContent));
  await page.click("#follow");
  await waitText("#records-state", "following");
  await call("POST", "/v1/stream/events", { type: "application/json", body: '{"followed":true}' });
  const offset = String(before + 1);
  await page.waitForSelector(`#records tbody tr[data-offset="${offset}"]`);
  assert.match(await page.$eval(`#records tbody tr[data-offset="${offset}"] .time`,
                                (e) => e.textContent), /^received \d\d:\d\d:\d\d/);
  await waitText('dd[data-field="Records appended"]', offset);
  await waitText('#groups tr[data-group="workers"] .lag', String(lagBefore + 1));
  await shot("stream");
  await page.click("#follow");
  await waitText("#records-state", "stopped");

  // A shared link can start the follow by itself.
  await open("#/stream/events?follow=1");
  await waitText("#records-state", "following");
  await call("POST", "/v1/stream/events", { type: "application/json", body: '{"shared":true}' });
  await waitText("#records tbody", '"shared": true');
});

test("text and binary records are shown as text and by size", async () => {
  await open("#/stream/" + encodeURIComponent("odd-<b>x</b>"));
  await waitText("#records tbody", "hello");
  assert.equal(await page.$("#records tbody b"), null);
  await open("#/stream/odd-bin");
  await waitText("#records tbody", "(5 B of application/octet-stream)");
});

test("consumer groups: ack, reset, read with times, delete", async () => {
  await open("#/stream/events");
  await page.waitForSelector('#groups tr[data-group="workers"]');
  const tail = Number(await page.$eval("#groups", (t) => t.dataset.tail));
  await page.type("#group-name", "workers");
  await page.type("#group-ack", "3");
  await page.click("#group-ack-submit");
  await waitText("#notice", "acked through record 3");
  await waitText('#groups tr[data-group="workers"] .acked', "3");
  assert.equal(await page.$eval('#groups tr[data-group="workers"] .lag', (e) => e.textContent),
               String(tail - 3));

  // Reset moves a group back, which a plain ack (monotonic) cannot.
  await page.$eval("#group-ack", (e) => { e.value = "1"; });
  await page.click("#group-reset");
  await waitText("#notice", "reset to record 1");
  await waitText('#groups tr[data-group="workers"] .acked', "1");

  // The group's next records come with their append times.
  await page.click('#groups tr[data-group="workers"] .actions button');
  await page.waitForSelector("#group-peek:not([hidden]) #peek tbody tr");
  assert.equal((await texts("#peek tbody td:first-child"))[0], "2");
  assert.match((await texts("#peek tbody td:nth-child(2)"))[0], /^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d/);

  // Delete asks twice.
  const del = 'tr[data-group="workers"] button.danger';
  await page.click(del);
  await waitText(del, "Really delete");
  await page.click(del);
  await waitText("#notice", "Group workers deleted");
  await page.waitForFunction(() => !document.querySelector('tr[data-group="workers"]'));
});

test("create, append, retention, close and delete from the page", async () => {
  await open("#/streams");
  // The list above the form fills in after the page loads and moves the form down: wait for it,
  // so the clicks below land where the form is.
  await waitText("#stream-count", "stream");
  await page.waitForSelector("#create-panel summary", {visible: true, timeout: 10000});
  await page.click("#create-panel summary");
  await page.waitForSelector("#create-name", {visible: true, timeout: 10000});
  await page.type("#create-name", "made-here");
  await page.waitForSelector("#create-submit", {visible: true, timeout: 10000});
  await page.$eval("#create-form", (form) => form.requestSubmit(form.querySelector("#create-submit")));
  await page.waitForFunction(() => location.hash.startsWith("#/stream/made-here"));
  await waitText("#stream-name", "made-here");
  await waitText("#notice", "Created made-here");
  await waitText("#stream-state", "open");

  await page.type("#append-body", '[{"id":1},{"id":2}]');
  await page.click("#append-submit");
  await waitText("#notice", "Appended");
  await waitText('dd[data-field="Records appended"]', "2");

  await page.type("#ret-events", "10");
  await page.click("#retention-submit");
  await waitText("#notice", "Retention set");
  await waitText('dd[data-field="Keep at most records"]', "10");

  await page.click("#read-first");
  await page.waitForSelector('#records tbody tr[data-offset="2"]');

  await page.click("#close-stream");
  await waitText("#stream-state", "closed");
  // An append to a closed stream is refused, and the refusal is shown.
  await page.type("#append-body", '{"id":3}');
  await page.click("#append-submit");
  await waitText("#error", "409");

  await page.click("#delete-stream");
  await waitText("#delete-stream", "Really delete made-here");
  await page.click("#delete-stream");
  await page.waitForFunction(() => location.hash.startsWith("#/streams"));
  await waitText("#notice", "Deleted made-here");
  const r = await fetch(`${base}/v1/stream/made-here`, { method: "HEAD" });
  assert.equal(r.status, 404);
});

test("an unknown route says so; a missing or wrong token is shown as 401 / 403", async () => {
  await open("#/nowhere");
  assert.equal(await page.$eval("#view-missing", (e) => e.hidden), false);

  // Creating a token puts the running server in token mode.
  const token = execFileSync(binary, ["token", "--data", dataDir, "create", "--tenant", "acme"],
                             { encoding: "utf8", stdio: ["ignore", "pipe", "ignore"] })
    .match(/rnl_\S+/)[0];
  let open401 = false;
  for (const deadline = Date.now() + waitMs; Date.now() < deadline;) {
    if ((await fetch(`${base}/v1/streams`)).status === 401) {
      open401 = true;
      break;
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  assert.ok(open401, "the server did not switch to token mode");
  await open("#/streams");
  await waitText("#error", "401");
  assert.match(await page.$eval("#error", (e) => e.textContent), /type a token/);
  await shot("unauthorized");

  // acme's token in the global scope: 403; in acme's scope it lists.
  await page.type("#token", token);
  await page.$eval("#token", (e) => e.dispatchEvent(new Event("change")));
  await waitText("#error", "403");
  await page.type("#tenant", "acme");
  await page.$eval("#tenant", (e) => e.dispatchEvent(new Event("change")));
  await waitText("#stream-count", "0 streams");
  assert.equal(await page.$eval("#error", (e) => e.hidden), true);
  assert.match(page.url(), /tenant=acme/);
});

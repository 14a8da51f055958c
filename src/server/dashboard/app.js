// runnel's built-in console: charts of the server's figures sampled from /metrics, the streams
// of a scope page by page, one stream's records, metadata and consumer groups, and the actions
// the token allows. Plain script, no dependencies; everything it shows comes from the public HTTP
// API with the token typed in the page. Every view has a URL (`#/`, `#/streams?…`,
// `#/stream/<name>?…`), so a reload or a shared link opens the same view. The pure functions
// come first and are exercised by tests/conformance/dashboard.test.mjs (they never touch the
// DOM); the page itself is driven in a real browser by tests/console.
'use strict';

// How long the overview's charts reach back, and how often the page samples /metrics.
const kWindowMs = 15 * 60 * 1000;
const kSampleMs = 2000;
// At most this many cursors of earlier list pages are kept for "Previous page".
const kListBackMax = 1000;

// Prometheus text exposition → [{name, labels, value}]. Comments, blank lines and lines that
// do not parse are skipped.
function parseMetrics(text) {
  const samples = [];
  for (const raw of String(text).split('\n')) {
    const line = raw.trim();
    if (line === '' || line.startsWith('#')) continue;
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s+(\S+)/.exec(line);
    if (!m) continue;
    const labels = {};
    if (m[3] !== undefined) {
      const re = /([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g;
      let l;
      while ((l = re.exec(m[3])) !== null) {
        labels[l[1]] = l[2].replace(/\\(.)/g, (_, c) => (c === 'n' ? '\n' : c));
      }
    }
    const value = m[4] === '+Inf' ? Infinity : Number(m[4]);
    if (Number.isNaN(value)) continue;
    samples.push({ name: m[1], labels, value });
  }
  return samples;
}

// The figures the console shows, as totals (counters) and levels (gauges).
function summarize(samples) {
  const s = {
    requests: 0, appends: 0, errors: 0, clientErrors: 0, bytesIn: 0, bytesOut: 0,
    connections: 0, liveReaders: 0, syncs: 0, syncedRecords: 0, syncSeconds: 0, appendCount: 0,
    appendBuckets: [], info: null,
  };
  for (const x of samples) {
    switch (x.name) {
      case 'runnel_http_requests_total': {
        const status = Number(x.labels.status);
        s.requests += x.value;
        if (x.labels.route === 'stream' && x.labels.method === 'POST' && status < 300) {
          s.appends += x.value;
        }
        if (status >= 500) s.errors += x.value;
        else if (status >= 400) s.clientErrors += x.value;
        break;
      }
      case 'runnel_http_bytes_in_total': s.bytesIn = x.value; break;
      case 'runnel_http_bytes_out_total': s.bytesOut = x.value; break;
      case 'runnel_connections': s.connections = x.value; break;
      case 'runnel_live_readers': s.liveReaders = x.value; break;
      case 'runnel_store_syncs_total': s.syncs = x.value; break;
      case 'runnel_store_records_per_sync_sum': s.syncedRecords = x.value; break;
      case 'runnel_store_sync_seconds_total': s.syncSeconds = x.value; break;
      case 'runnel_append_latency_seconds_count': s.appendCount = x.value; break;
      case 'runnel_append_latency_seconds_bucket':
        s.appendBuckets.push({ le: x.labels.le === '+Inf' ? Infinity : Number(x.labels.le),
                               count: x.value });
        break;
      case 'runnel_info': s.info = x.labels; break;
      default: break;
    }
  }
  s.appendBuckets.sort((a, b) => a.le - b.le);
  return s;
}

// Cumulative histogram buckets [{le, count}] (sorted by le) → the q-quantile, interpolated
// linearly inside its bucket as Prometheus's histogram_quantile does. null without samples;
// the highest finite bound when the quantile falls in the +Inf bucket.
function histogramQuantile(buckets, q) {
  if (buckets.length === 0) return null;
  const total = buckets[buckets.length - 1].count;
  if (!(total > 0)) return null;
  const rank = q * total;
  let lower = 0;
  let below = 0;
  for (const b of buckets) {
    if (b.count >= rank) {
      if (b.le === Infinity) return lower;
      const inBucket = b.count - below;
      return inBucket > 0 ? lower + (b.le - lower) * ((rank - below) / inBucket) : b.le;
    }
    if (b.le !== Infinity) lower = b.le;
    below = b.count;
  }
  return lower;
}

// The buckets that moved between two scrapes (same bounds), so a quantile describes the
// recent interval rather than the server's whole life.
function bucketDelta(prev, cur) {
  if (!prev || prev.length !== cur.length) return cur;
  return cur.map((b, i) => ({ le: b.le, count: Math.max(0, b.count - prev[i].count) }));
}

// Per-second rates between two summaries taken `seconds` apart. A counter that went down (the
// server restarted) counts from zero.
function rates(prev, cur, seconds) {
  const d = (k) => (cur[k] >= prev[k] ? cur[k] - prev[k] : cur[k]) / seconds;
  const syncs = cur.syncs - prev.syncs;
  const recent = bucketDelta(prev.appendBuckets, cur.appendBuckets);
  return {
    requests: d('requests'),
    appends: d('appends'),
    errors: d('errors'),
    clientErrors: d('clientErrors'),
    bytesIn: d('bytesIn'),
    bytesOut: d('bytesOut'),
    syncs: d('syncs'),
    recordsPerSync: syncs > 0 ? (cur.syncedRecords - prev.syncedRecords) / syncs : null,
    syncMs: syncs > 0 ? ((cur.syncSeconds - prev.syncSeconds) / syncs) * 1000 : null,
    appendP50: histogramQuantile(recent, 0.5),
    appendP99: histogramQuantile(recent, 0.99),
  };
}

// One point of the overview's charts, from the rates of an interval ending at `t` (unix ms)
// and the gauges read at its end. Latencies in milliseconds.
function chartSample(t, r, cur) {
  const ms = (s) => (s === null || s === undefined ? null : s * 1000);
  return {
    t,
    appends: r.appends,
    p50: ms(r.appendP50),
    p99: ms(r.appendP99),
    recordsPerSync: r.recordsPerSync,
    liveReaders: cur.liveReaders,
    errors: r.errors,
    clientErrors: r.clientErrors,
  };
}

// `samples` (oldest first) with `sample` added and everything older than `windowMs` before it
// dropped; a sample older than the newest (a clock step back) starts the series afresh.
function pushSample(samples, sample, windowMs = kWindowMs) {
  const last = samples.length > 0 ? samples[samples.length - 1] : null;
  const kept = last && sample.t < last.t ? [] : samples.filter((s) => s.t >= sample.t - windowMs);
  kept.push(sample);
  return kept;
}

// The time range a chart spans at `now`: the last `windowMs`, or less while the samples do not
// reach back that far yet (so a young chart fills its box). At least one sampling interval.
function chartWindow(samples, now, windowMs = kWindowMs) {
  const first = samples.length > 0 ? samples[0].t : now;
  const t0 = Math.min(now - kSampleMs, Math.max(now - windowMs, first));
  return [t0, now];
}

// A span of milliseconds as the chart's left label: "−42 s", "−3 min".
function formatSpan(ms) {
  const s = Math.round(ms / 1000);
  return s < 120 ? '−' + s + ' s' : '−' + Math.round(s / 60) + ' min';
}

// A round upper bound for a chart's y axis: 1, 2 or 5 times a power of ten, at least `v`.
function niceCeil(v) {
  if (!(v > 0)) return 1;
  const p = Math.pow(10, Math.floor(Math.log10(v)));
  for (const m of [1, 2, 5, 10]) {
    if (m * p >= v * (1 - 1e-12)) return m * p;
  }
  return 10 * p;
}

// An SVG path through `points` ([{t, v}]) over the time range [t0, t1] and values [0, yMax]
// in a width × height box (y grows downwards). A null value breaks the line.
function chartPath(points, t0, t1, yMax, width, height) {
  const span = Math.max(1, t1 - t0);
  let d = '';
  let pen = false;
  for (const p of points) {
    if (p.v === null || p.v === undefined || Number.isNaN(p.v)) {
      pen = false;
      continue;
    }
    const x = ((p.t - t0) / span) * width;
    const y = height - (Math.min(p.v, yMax) / yMax) * height;
    d += (pen ? 'L' : 'M') + x.toFixed(1) + ' ' + y.toFixed(1);
    pen = true;
  }
  return d;
}

// A stream name as a URL path: each '/'-separated segment percent-encoded.
function encodeName(name) {
  return String(name).split('/').map(encodeURIComponent).join('/');
}

// The URL paths of a scope: '' is the global scope.
function scopePaths(tenant) {
  const t = String(tenant || '').trim();
  const root = t === '' ? '/v1' : '/v1/tenants/' + encodeURIComponent(t);
  return {
    list: root + '/streams',
    stream: (name) => root + '/stream/' + encodeName(name),
    groups: (name) => '/v1/groups' + root.slice(3) + '/stream/' + encodeName(name),
  };
}

// "0000000000000000_0000000000000042" → "42" (a string, exact past 2^53); the token itself
// when it is not one.
function offsetPosition(token) {
  const m = /^\d{16}_(\d{16})$/.exec(String(token || ''));
  return m ? m[1].replace(/^0+(?=\d)/, '') : String(token || '');
}

// The protocol's offset token for the position after `done` records: a read there starts with
// record number done + 1 (records are numbered from 1, as consumer groups number them).
function offsetToken(done) {
  const digits = String(done);
  if (!/^\d{1,16}$/.test(digits)) throw new Error('an offset is a record number');
  return '0000000000000000_' + digits.padStart(16, '0');
}

// Natural order: runs of digits compare as numbers ("bench-2" before "bench-10"), everything
// else by code point; equal by that measure, the plain order decides.
function naturalCompare(a, b) {
  const re = /(\d+)|(\D+)/g;
  const pa = String(a).match(re) || [];
  const pb = String(b).match(re) || [];
  for (let i = 0; i < Math.min(pa.length, pb.length); i++) {
    const x = pa[i];
    const y = pb[i];
    if (x === y) continue;
    const dx = /^\d/.test(x);
    const dy = /^\d/.test(y);
    if (dx && dy) {
      const nx = x.replace(/^0+(?=\d)/, '');
      const ny = y.replace(/^0+(?=\d)/, '');
      if (nx.length !== ny.length) return nx.length - ny.length;
      if (nx !== ny) return nx < ny ? -1 : 1;
      continue;
    }
    return x < y ? -1 : 1;
  }
  if (pa.length !== pb.length) return pa.length - pb.length;
  return a < b ? -1 : a > b ? 1 : 0;
}

// Whether a listed stream belongs to the server rather than to its clients: a channel's
// partitions and checkpoint (marked by the listing) and the reserved `__ds/` streams.
function isInternal(stream) {
  return stream.channel === true || String(stream.name).startsWith('__ds/');
}

// The streams of one page of the server's listing that are shown (`internal`: channel internals
// too), in the server's order, and how many were hidden.
function visibleStreams(streams, internal = false) {
  const rows = streams.filter((s) => internal || !isInternal(s));
  return { rows, hidden: streams.length - rows.length };
}

// The page number a list URL names (1 when absent or not a positive integer).
function listPageNumber(page) {
  return Math.max(1, Math.floor(Number(page)) || 1);
}

// "1 stream", "2 streams", "0 streams".
function plural(n, one, many) {
  return n + ' ' + (n === 1 ? one : many || one + 's');
}

// A location hash → {view, name, params}: '#/' (overview), '#/streams', '#/stream/<name>';
// anything else is the view 'missing'. The query after '?' holds the view's state.
function parseRoute(hash) {
  let h = String(hash || '').replace(/^#/, '');
  if (h === '') h = '/';
  const q = h.indexOf('?');
  const path = q < 0 ? h : h.slice(0, q);
  const params = {};
  for (const [k, v] of new URLSearchParams(q < 0 ? '' : h.slice(q + 1))) params[k] = v;
  if (path === '/' || path === '/overview') return { view: 'overview', name: null, params };
  if (path === '/streams') return { view: 'streams', name: null, params };
  if (path.startsWith('/stream/') && path.length > '/stream/'.length) {
    try {
      return { view: 'stream', name: decodeURIComponent(path.slice('/stream/'.length)), params };
    } catch (e) {
      return { view: 'missing', name: null, params };
    }
  }
  return { view: 'missing', name: null, params };
}

// The hash of a view: the inverse of parseRoute. Empty parameters are left out.
function routeHash(view, name, params = {}) {
  let path = '/';
  if (view === 'streams') path = '/streams';
  if (view === 'stream') path = '/stream/' + encodeURIComponent(name);
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) {
    if (v !== undefined && v !== null && v !== '' && v !== false) q.set(k, String(v));
  }
  const qs = q.toString();
  return '#' + path + (qs === '' ? '' : '?' + qs);
}

function formatCount(n) {
  if (n === null || n === undefined || Number.isNaN(n)) return '–';
  if (Math.abs(n) >= 1e6) return (n / 1e6).toFixed(2) + 'M';
  if (Math.abs(n) >= 1e4) return (n / 1e3).toFixed(1) + 'k';
  return Number.isInteger(n) ? String(n) : n.toFixed(1);
}

function formatBytes(n) {
  if (n === null || n === undefined || Number.isNaN(n)) return '–';
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let v = n;
  let u = 0;
  while (Math.abs(v) >= 1024 && u < units.length - 1) {
    v /= 1024;
    u += 1;
  }
  return (u === 0 ? String(Math.round(v)) : v.toFixed(1)) + ' ' + units[u];
}

function formatSeconds(s) {
  if (s === null || s === undefined) return '–';
  if (s < 1e-3) return (s * 1e6).toFixed(0) + ' µs';
  if (s < 1) return (s * 1e3).toFixed(1) + ' ms';
  return s.toFixed(2) + ' s';
}

// Unix ms → "2026-12-05 23:41:07.123" in UTC.
function formatTime(ms) {
  if (!ms) return '–';
  return new Date(ms).toISOString().replace('T', ' ').replace('Z', '');
}

function mediaType(contentType) {
  return String(contentType || '').split(';')[0].trim().toLowerCase();
}

// Whether a read of this content type is shown as text (else only its size is).
function isTextual(contentType) {
  const media = mediaType(contentType);
  return media.startsWith('text/') || media === 'application/json';
}

// The records of one read response as rows {offset, text}. `next` is the record number after
// the response (its Stream-Next-Offset as a number). A JSON stream's messages are one record
// each, numbered up to `next` and pretty-printed; a text stream's response has no record
// boundaries and is one row for the range; anything else shows its size (`body` is then its
// length in bytes). Long texts are cut at `limit` characters.
function recordsForDisplay(contentType, body, next, limit = 4000) {
  const cut = (s) => (s.length > limit ? s.slice(0, limit) + ' …' : s);
  const media = mediaType(contentType);
  if (typeof body === 'number') {
    return body === 0 ? [] : [{ offset: null, text: '(' + formatBytes(body) + ' of ' +
                                                      (media || 'binary') + ')' }];
  }
  if (media === 'application/json') {
    try {
      const parsed = JSON.parse(body);
      if (Array.isArray(parsed)) {
        const first = next - parsed.length + 1;
        return parsed.map((m, i) => ({ offset: first + i, text: cut(JSON.stringify(m, null, 2)) }));
      }
    } catch (e) {
      // fall through: shown as text
    }
  }
  if (body.length === 0) return [];
  return [{ offset: null, text: cut(body) }];
}

// An API error for a person: the status, the server's code and sentence, and what to do about
// a missing or insufficient token.
function describeError(status, code, message) {
  const head = status + (code ? ' ' + code : '') + (message ? ': ' + message : '');
  if (status === 401) return head + ' — type a token in the header.';
  if (status === 403) return head + ' — this token may not do that.';
  return head;
}

if (typeof module !== 'undefined') {
  module.exports = {
    parseMetrics, summarize, histogramQuantile, bucketDelta, rates, chartSample, pushSample,
    niceCeil, chartPath, chartWindow, formatSpan, encodeName, scopePaths, offsetPosition,
    offsetToken, naturalCompare, isInternal, visibleStreams, listPageNumber, plural, parseRoute, routeHash,
    formatCount, formatBytes, formatSeconds, formatTime, isTextual, recordsForDisplay,
    describeError,
  };
}

// ---- the page ----------------------------------------------------------------------------

if (typeof document !== 'undefined') {
  const $ = (id) => document.getElementById(id);
  const svgNs = 'http://www.w3.org/2000/svg';
  // The records view keeps at most this many rows; followed records push out the oldest.
  const maxRecordRows = 500;
  // How often the open stream list, or a stream view's metadata and groups without a follow,
  // are fetched again.
  const streamRefreshMs = 5000;

  const state = {
    route: parseRoute(location.hash),
    prev: null,          // the last /metrics summary and when it was read
    prevAt: 0,
    samples: [],         // the overview's chart points, oldest first
    follow: null,        // {run, controller} of the live follow
    followRun: 0,
    viewTimer: null,     // the open view's refresh interval
    listNext: null,      // the URL parameters of the list's next page ({after, page})
    listPrev: null,      // and of the page before it, when its cursor is known
    lagHistory: {},      // "<tenant>\n<stream>" → group → [{t, v}]
    readNext: null,      // the record number the "Next" button reads from
    confirmDelete: null, // {what, until}: a delete waiting for its confirming click
    streamType: '',
    streamNext: null,    // the stream's Stream-Next-Offset as last read
    carryNotice: '',     // the notice the next view shows
  };

  const tenantInput = $('tenant');
  const tokenInput = $('token');
  tenantInput.value = sessionStorage.getItem('runnel.tenant') || '';
  tokenInput.value = sessionStorage.getItem('runnel.token') || '';
  try {
    const saved = JSON.parse(sessionStorage.getItem('runnel.samples') || '[]');
    if (Array.isArray(saved)) state.samples = saved.filter((s) => s && typeof s.t === 'number');
  } catch (e) {
    state.samples = [];
  }

  function tenant() {
    return tenantInput.value.trim();
  }

  // The hash of a view in the current tenant.
  function link(view, name, params = {}) {
    return routeHash(view, name, { ...params, tenant: tenant() });
  }

  function go(view, name, params, replace) {
    const hash = link(view, name, params);
    if (replace) location.replace(hash);
    else location.hash = hash;
  }

  function headers() {
    const h = {};
    const token = tokenInput.value.trim();
    if (token !== '') h.Authorization = 'Bearer ' + token;
    return h;
  }

  function showError(message) {
    const e = $('error');
    e.textContent = message || '';
    e.hidden = !message;
  }

  function showNotice(message) {
    const e = $('notice');
    e.textContent = message || '';
    e.hidden = !message;
  }

  // fetch with the token; a non-2xx answer throws an Error with .status and a message built
  // from the server's error body.
  async function api(path, options = {}) {
    const r = await fetch(path, { ...options, headers: { ...headers(), ...(options.headers || {}) },
                                  cache: 'no-store' });
    if (!r.ok) {
      let code = '';
      let message = r.statusText;
      try {
        const body = await r.json();
        if (body && body.error) {
          code = body.error.code;
          message = body.error.message;
        }
      } catch (e) {
        // not a JSON error body
      }
      const err = new Error(describeError(r.status, code, message));
      err.status = r.status;
      throw err;
    }
    return r;
  }

  // Runs an action, reporting its failure (401 and 403 spelled out) or `done` in the banners.
  // A read (no `done`) leaves the notice of the action before it.
  async function act(what, fn, done) {
    showError('');
    if (done) showNotice('');
    try {
      await fn();
      if (done) showNotice(done);
      return true;
    } catch (e) {
      showError(what + ': ' + e.message);
      return false;
    }
  }

  function el(tag, text, cls) {
    const e = document.createElement(tag);
    if (text !== undefined && text !== null) e.textContent = text;
    if (cls) e.className = cls;
    return e;
  }

  function cell(row, text, cls) {
    const td = el('td', text, cls);
    row.appendChild(td);
    return td;
  }

  function svg(tag, attrs) {
    const e = document.createElementNS(svgNs, tag);
    for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, String(v));
    return e;
  }

  // ---- health and metrics, sampled on every view ----

  async function refreshHealth() {
    const pill = $('health');
    try {
      await api('/healthz');
      pill.textContent = 'up';
      pill.className = 'pill ok';
    } catch (e) {
      pill.textContent = 'down';
      pill.className = 'pill bad';
    }
  }

  async function sampleMetrics() {
    let cur;
    try {
      cur = summarize(parseMetrics(await (await api('/metrics')).text()));
    } catch (e) {
      if (state.route.view === 'overview') showError('Metrics: ' + e.message);
      return;
    }
    const now = Date.now();
    if (cur.info) {
      $('info').textContent = ['runnel ' + (cur.info.version || ''),
                               cur.info.store ? 'store ' + cur.info.store : '',
                               cur.info.durability ? 'durability ' + cur.info.durability : '']
          .filter(Boolean).join(' · ');
    }
    const r = state.prev ? rates(state.prev, cur, (now - state.prevAt) / 1000) : null;
    state.prev = cur;
    state.prevAt = now;
    if (r) {
      state.samples = pushSample(state.samples, chartSample(now, r, cur));
      try {
        sessionStorage.setItem('runnel.samples', JSON.stringify(state.samples));
      } catch (e) {
        // storage full or refused: the charts keep their points in memory only
      }
    }
    if (state.route.view === 'overview') renderOverview(r, cur);
  }

  // The overview's charts: each a title, the newest value and an SVG line per series.
  const charts = [
    { id: 'appends', title: 'Appends / s', series: [['appends', 'appends / s']],
      format: formatCount },
    { id: 'latency', title: 'Append latency (ms)', series: [['p50', 'p50'], ['p99', 'p99']],
      format: (v) => (v === null ? '–' : v.toFixed(2) + ' ms') },
    { id: 'sync', title: 'Records per sync', series: [['recordsPerSync', 'records / sync']],
      format: formatCount },
    { id: 'readers', title: 'Live readers', series: [['liveReaders', 'waiting readers']],
      format: formatCount },
    { id: 'errors', title: 'Errors / s', series: [['errors', '5xx'], ['clientErrors', '4xx']],
      format: formatCount },
  ];

  function renderCharts() {
    const width = 480;
    const height = 120;
    const [t0, t1] = chartWindow(state.samples, Date.now());
    const box = $('charts');
    box.replaceChildren();
    for (const c of charts) {
      const fig = el('figure', null, 'chart');
      fig.id = 'chart-' + c.id;
      const last = state.samples.length > 0 ? state.samples[state.samples.length - 1] : null;
      let yMax = 0;
      for (const s of state.samples) {
        for (const [key] of c.series) {
          if (s[key] !== null && s[key] !== undefined) yMax = Math.max(yMax, s[key]);
        }
      }
      yMax = niceCeil(yMax);
      const caption = el('figcaption');
      caption.append(el('span', c.title, 'chart-title'));
      for (const [key, label] of c.series) {
        const v = el('span', label + ' ' + (last ? c.format(last[key]) : '–'), 'chart-value ' + key);
        v.dataset.series = key;
        caption.append(v);
      }
      const plot = svg('svg', { viewBox: `0 0 ${width} ${height}`, role: 'img',
                                'aria-label': c.title + ' over the last 15 minutes' });
      plot.classList.add('plot');
      for (const f of [0.25, 0.5, 0.75]) {
        plot.appendChild(svg('line', { x1: 0, x2: width, y1: height * f, y2: height * f,
                                       class: 'grid' }));
      }
      c.series.forEach(([key], i) => {
        const points = state.samples.map((s) => ({ t: s.t, v: s[key] }));
        const path = svg('path', { d: chartPath(points, t0, t1, yMax, width, height),
                                   class: 'line s' + i });
        path.dataset.series = key;
        path.dataset.points = String(points.filter((p) => p.v !== null).length);
        plot.appendChild(path);
      });
      const axis = el('div', null, 'axis');
      axis.append(el('span', formatSpan(t1 - t0)), el('span', 'max ' + c.format(yMax)), el('span', 'now'));
      fig.append(caption, plot, axis);
      box.appendChild(fig);
    }
  }

  function figure(label, value) {
    const div = el('div', null, 'figure');
    div.append(el('div', value, 'value'), el('div', label, 'label'));
    return div;
  }

  function renderOverview(r, cur) {
    renderCharts();
    if (!cur) return;
    $('figures').replaceChildren(
        figure('requests / s', r ? formatCount(r.requests) : '–'),
        figure('in / s', r ? formatBytes(r.bytesIn) : '–'),
        figure('out / s', r ? formatBytes(r.bytesOut) : '–'),
        figure('syncs / s', r ? formatCount(r.syncs) : '–'),
        figure('connections', formatCount(cur.connections)),
        figure('appends (total)', formatCount(cur.appends)));
  }

  // ---- the stream list ----

  // `refresh`: a periodic fetch, which leaves the error of an action in place.
  // The table rows of listed streams.
  function streamRows(streams) {
    const tbody = $('streams').tBodies[0];
    tbody.replaceChildren();
    for (const s of streams) {
      const tr = el('tr');
      const a = el('a', s.name);
      a.href = link('stream', s.name);
      cell(tr, null).appendChild(a);
      if (isInternal(s)) tr.classList.add('internal');
      cell(tr, s.content_type);
      cell(tr, offsetPosition(s.next_offset), 'num');
      cell(tr, formatCount(s.event_count), 'num');
      cell(tr, formatBytes(s.retained_bytes), 'num');
      cell(tr, s.closed ? 'closed' : 'open');
      tbody.appendChild(tr);
    }
  }

  // The cursors of the list's pages: entry i is the `after` of page i + 1 ("" for the first),
  // kept in the tab's session storage with the list they belong to (scope, prefix, size,
  // internals), so "Previous page" works after a reload or the browser's Back too.
  function listKey(size) {
    const p = state.route.params;
    return [tenant(), p.prefix || '', size, p.internal === '1' ? '1' : ''].join('\n');
  }
  function listBack(size) {
    try {
      const saved = JSON.parse(sessionStorage.getItem('runnel.listBack') || 'null');
      if (saved && saved.key === listKey(size) && Array.isArray(saved.back)) return saved.back;
    } catch (e) {
      // A damaged entry is dropped.
    }
    return [];
  }
  function saveListBack(size, back) {
    sessionStorage.setItem('runnel.listBack',
                           JSON.stringify({ key: listKey(size), back: back.slice(-kListBackMax) }));
  }

  // The server lists the streams in natural order (`order=natural`: bench-2 before bench-10),
  // `size` a page from the cursor `after` in the URL, so a scope of a million streams costs one
  // page per view. `refresh`: a periodic fetch, which leaves the error of an action in place.
  async function renderStreams(refresh = false) {
    const p = state.route.params;
    const size = ['25', '100', '500'].includes(p.size) ? Number(p.size) : 100;
    if (document.activeElement !== $('prefix')) $('prefix').value = p.prefix || '';
    $('show-internal').checked = p.internal === '1';
    $('page-size').value = String(size);
    const q = new URLSearchParams({ order: 'natural', limit: String(size) });
    if (p.prefix) q.set('prefix', p.prefix);
    if (p.after) q.set('after', p.after);
    let body;
    try {
      body = await (await api(scopePaths(tenant()).list + '?' + q.toString())).json();
      if (!refresh) showError('');
    } catch (e) {
      $('streams').tBodies[0].replaceChildren();
      $('stream-count').textContent = '';
      showError('Streams: ' + e.message);
      return;
    }
    const listed = body.streams || [];
    const shown = visibleStreams(listed, p.internal === '1');
    streamRows(shown.rows);
    const n = p.after ? listPageNumber(p.page) : 1;
    const back = p.after ? listBack(size) : [''];
    if (!p.after) saveListBack(size, back);
    state.listNext = body.next_after !== undefined && listed.length > 0
        ? { after: body.next_after, page: String(n + 1) } : null;
    state.listPrev = p.after && n >= 2 && back.length >= n - 1
        ? { after: back[n - 2], page: String(n - 1) } : null;
    $('page-first').disabled = !p.after;
    const hidden = shown.hidden > 0 ? ' (' + plural(shown.hidden, 'channel internal') + ' hidden)'
                                    : '';
    $('stream-count').textContent = !p.after && state.listNext === null
        ? plural(shown.rows.length, 'stream') + hidden
        : plural(shown.rows.length, 'stream') + ' on page ' + n + hidden;
    $('list-mode').textContent = 'In natural order (bench-2 before bench-10).';
    $('page-next').disabled = state.listNext === null;
    $('page-prev').disabled = state.listPrev === null;
  }

  // The list's URL parameters with `extra` changed; any change but a page move starts at the
  // first page.
  function listParams(extra) {
    const p = state.route.params;
    return { prefix: p.prefix, internal: p.internal, size: p.size, ...extra };
  }

  // ---- one stream ----

  function streamKey() {
    return tenant() + '\n' + state.route.name;
  }

  async function refreshMeta() {
    const name = state.route.name;
    const meta = $('stream-meta');
    let r;
    try {
      r = await api(scopePaths(tenant()).stream(name), { method: 'HEAD' });
    } catch (e) {
      meta.replaceChildren(el('dd', e.message));
      $('stream-state').textContent = e.status === 404 ? 'not found' : 'error';
      $('stream-state').className = 'pill bad';
      return null;
    }
    if (name !== state.route.name) return null;
    state.streamType = r.headers.get('Content-Type') || '';
    state.streamNext = r.headers.get('Stream-Next-Offset');
    const next = offsetPosition(r.headers.get('Stream-Next-Offset'));
    const closed = r.headers.get('Stream-Closed') === 'true';
    const rows = [
      ['Content type', state.streamType],
      ['Records appended', next],
      ['Next offset', r.headers.get('Stream-Next-Offset')],
      ['TTL (s)', r.headers.get('Stream-TTL')],
      ['Expires at', r.headers.get('Stream-Expires-At')],
      ['Keep at most records', r.headers.get('Stream-Retention-Max-Events')],
      ['Keep at most ms', r.headers.get('Stream-Retention-Max-Age-Ms')],
      ['Keep at most bytes', r.headers.get('Stream-Retention-Max-Bytes')],
      ['Refreshed', formatTime(Date.now())],
    ];
    meta.replaceChildren();
    for (const [k, v] of rows) {
      if (v === null || v === '') continue;
      const dt = el('dt', k);
      const dd = el('dd', v);
      dd.dataset.field = k;
      meta.append(dt, dd);
    }
    $('stream-state').textContent = closed ? 'closed' : 'open';
    $('stream-state').className = 'pill ' + (closed ? 'bad' : 'ok');
    for (const [id, header] of [['ret-events', 'Stream-Retention-Max-Events'],
                                ['ret-age', 'Stream-Retention-Max-Age-Ms'],
                                ['ret-bytes', 'Stream-Retention-Max-Bytes']]) {
      if (document.activeElement !== $(id)) $(id).value = r.headers.get(header) || '';
    }
    return { next: Number(next), closed };
  }

  function sparkline(points) {
    const width = 120;
    const height = 24;
    const [t0, t1] = chartWindow(points, Date.now());
    const yMax = niceCeil(Math.max(0, ...points.map((p) => p.v)));
    const s = svg('svg', { viewBox: `0 0 ${width} ${height}`, class: 'spark' });
    s.appendChild(svg('path', { d: chartPath(points, t0, t1, yMax, width, height),
                                class: 'line s0' }));
    const last = points[points.length - 1];
    s.appendChild(svg('title', {})).textContent =
        'lag ' + last.v + ' now, at most ' + Math.max(...points.map((p) => p.v)) + ' over ' +
        formatSpan(t1 - t0).slice(1);
    return s;
  }

  async function refreshGroups() {
    const name = state.route.name;
    const tbody = $('groups').tBodies[0];
    let g;
    try {
      g = await (await api(scopePaths(tenant()).groups(name))).json();
    } catch (e) {
      const tr = el('tr');
      cell(tr, e.message).colSpan = 6;
      tbody.replaceChildren(tr);
      return;
    }
    if (name !== state.route.name) return;
    const key = streamKey();
    const history = state.lagHistory[key] || (state.lagHistory[key] = {});
    const now = Date.now();
    tbody.replaceChildren();
    const groups = (g.groups || []).slice().sort((a, b) => naturalCompare(a.group, b.group));
    for (const x of groups) {
      history[x.group] = pushSample(history[x.group] || [], { t: now, v: x.lag });
      const tr = el('tr');
      tr.dataset.group = x.group;
      cell(tr, x.group);
      cell(tr, String(x.last_acked), 'num acked');
      cell(tr, String(x.lag), 'num lag');
      cell(tr, null).appendChild(sparkline(history[x.group]));
      cell(tr, formatTime(x.updated_at_ms));
      const actions = cell(tr, null, 'actions');
      const peek = el('button', 'Next records');
      peek.type = 'button';
      peek.addEventListener('click', () => peekGroup(x.group));
      const ackNext = el('button', 'Ack all');
      ackNext.type = 'button';
      ackNext.title = 'ack every record appended so far';
      ackNext.addEventListener('click', () => ackGroup(x.group, String(g.tail)));
      const reset = el('button', 'Reset…');
      reset.type = 'button';
      reset.addEventListener('click', () => {
        $('group-name').value = x.group;
        $('group-ack').value = '0';
        $('group-ack').focus();
      });
      const del = el('button', 'Delete', 'danger');
      del.type = 'button';
      del.addEventListener('click', () => confirmThen(del, 'group ' + x.group, () =>
        deleteGroup(x.group)));
      actions.append(peek, ackNext, reset, del);
      tbody.appendChild(tr);
    }
    if (groups.length === 0) {
      const tr = el('tr');
      cell(tr, 'none yet: ack below to start one').colSpan = 6;
      tbody.appendChild(tr);
    }
    $('groups').dataset.tail = String(g.tail);
  }

  // A destructive button asks once more: the first click turns it into "Really?", a second
  // click within 5 seconds runs `fn`.
  function confirmThen(button, what, fn) {
    const c = state.confirmDelete;
    if (c && c.what === what && Date.now() < c.until) {
      state.confirmDelete = null;
      fn();
      return;
    }
    state.confirmDelete = { what, until: Date.now() + 5000 };
    const label = button.textContent;
    button.textContent = 'Really delete ' + what + '?';
    setTimeout(() => {
      if (button.isConnected) button.textContent = label;
    }, 5000);
  }

  function groupUrl(params) {
    return scopePaths(tenant()).groups(state.route.name) + '?' + new URLSearchParams(params);
  }

  async function ackGroup(group, done) {
    await act('Ack', async () => {
      await api(groupUrl({ group, ack: done }), { method: 'POST' });
    }, 'Group ' + group + ' acked through record ' + done + '.');
    await refreshGroups();
  }

  async function resetGroup(group, done) {
    await act('Reset', async () => {
      try {
        await api(groupUrl({ group }), { method: 'DELETE' });
      } catch (e) {
        if (e.status !== 404) throw e;
      }
      await api(groupUrl({ group, ack: done }), { method: 'POST' });
    }, 'Group ' + group + ' reset to record ' + done + '.');
    await refreshGroups();
  }

  async function deleteGroup(group) {
    await act('Delete group', async () => {
      await api(groupUrl({ group }), { method: 'DELETE' });
    }, 'Group ' + group + ' deleted.');
    $('group-peek').hidden = true;
    await refreshGroups();
  }

  async function peekGroup(group) {
    const tbody = $('peek').tBodies[0];
    await act('Group read', async () => {
      const r = await (await api(groupUrl({ group, limit: '20' }))).json();
      tbody.replaceChildren();
      for (const e of r.events || []) {
        const tr = el('tr');
        cell(tr, String(e.offset), 'num');
        cell(tr, formatTime(e.appended_at_ms));
        const text = e.data !== undefined ? JSON.stringify(e.data, null, 2)
                                          : '(' + e.data_base64.length + ' base64 characters)';
        cell(tr, null).appendChild(el('pre', text));
        tbody.appendChild(tr);
      }
      if (tbody.rows.length === 0) {
        const tr = el('tr');
        cell(tr, 'nothing left to read').colSpan = 3;
        tbody.appendChild(tr);
      }
      $('group-peek-name').textContent = group;
      $('group-peek').hidden = false;
    });
  }

  // Adds the rows of one read response; `replace` clears the table first. Followed rows get
  // the time the page received them (a stream read carries no append times).
  function addRecords(contentType, body, next, replace, received) {
    const tbody = $('records').tBodies[0];
    if (replace) tbody.replaceChildren();
    const rows = recordsForDisplay(contentType, body, next);
    const room = replace ? maxRecordRows : rows.length;
    for (const rec of rows.slice(0, room)) {
      const tr = el('tr');
      if (rec.offset !== null) tr.dataset.offset = String(rec.offset);
      cell(tr, rec.offset === null ? '' : String(rec.offset), 'num');
      cell(tr, received ? 'received ' + formatTime(received).slice(11) : '–', 'time');
      cell(tr, null).appendChild(el('pre', rec.text));
      tbody.appendChild(tr);
    }
    while (tbody.rows.length > maxRecordRows) tbody.deleteRow(0);
    return rows.length > room ? rows[room].offset : null;
  }

  // A read from record number `from` (null: the oldest retained), shown in the records table.
  async function readRecords(from) {
    stopFollow();
    const url = scopePaths(tenant()).stream(state.route.name) + '?offset=' +
                (from === null ? '-1' : offsetToken(Math.max(0, from - 1)));
    await act('Read', async () => {
      const r = await api(url);
      const type = r.headers.get('Content-Type');
      const body = isTextual(type) ? await r.text() : (await r.arrayBuffer()).byteLength;
      const next = Number(offsetPosition(r.headers.get('Stream-Next-Offset')));
      const cutAt = addRecords(type, body, next, true, null);
      state.readNext = cutAt !== null ? cutAt : next + 1;
      const shown = $('records').tBodies[0].rows.length;
      $('records-state').textContent = shown === 0 ? 'no records at this offset'
          : r.headers.get('Stream-Up-To-Date') === 'true' && cutAt === null
              ? 'up to date' : 'more after these: Next reads on';
    });
  }

  function stopFollow() {
    state.followRun += 1;
    if (state.follow) state.follow.abort();
    state.follow = null;
    $('follow').textContent = 'Follow live';
    $('follow').classList.remove('on');
  }

  // Long-polls the stream from its tail as the metadata last showed it (so nothing appended
  // since is missed), adding each new record, and refreshes the metadata and group lag after
  // every answer, so the whole view stays current while followed.
  async function follow() {
    if (state.follow) {
      stopFollow();
      $('records-state').textContent = 'stopped';
      return;
    }
    const run = ++state.followRun;
    const controller = new AbortController();
    state.follow = controller;
    $('follow').textContent = 'Stop following';
    $('follow').classList.add('on');
    $('records-state').textContent = 'following: waiting for new records';
    const base = scopePaths(tenant()).stream(state.route.name);
    let offset = state.streamNext || 'now';
    let cursor = null;
    while (run === state.followRun) {
      const q = new URLSearchParams({ offset, live: 'long-poll' });
      if (cursor) q.set('cursor', cursor);
      try {
        const r = await api(base + '?' + q.toString(), { signal: controller.signal });
        if (run !== state.followRun) break;
        offset = r.headers.get('Stream-Next-Offset') || offset;
        cursor = r.headers.get('Stream-Cursor') || cursor;
        if (r.status === 200) {
          const type = r.headers.get('Content-Type');
          const body = isTextual(type) ? await r.text() : (await r.arrayBuffer()).byteLength;
          addRecords(type, body, Number(offsetPosition(offset)), false, Date.now());
          const box = $('records').parentElement;
          box.scrollTop = box.scrollHeight;
          $('records-state').textContent = 'following: last record received ' +
                                           formatTime(Date.now()).slice(11);
        }
        await Promise.all([refreshMeta(), refreshGroups()]);
        if (r.headers.get('Stream-Closed') === 'true') {
          $('records-state').textContent = 'the stream is closed';
          break;
        }
      } catch (e) {
        if (run === state.followRun) $('records-state').textContent = e.message;
        break;
      }
    }
    if (run === state.followRun) {
      state.follow = null;
      $('follow').textContent = 'Follow live';
      $('follow').classList.remove('on');
    }
  }

  async function renderStream() {
    const name = state.route.name;
    $('stream-name').textContent = name;
    state.streamNext = null;
    $('group-peek').hidden = true;
    $('records').tBodies[0].replaceChildren();
    $('records-state').textContent = '';
    const p = state.route.params;
    const from = /^\d+$/.test(p.offset || '') ? Number(p.offset) : null;
    $('jump-offset').value = from === null ? '' : String(from);
    const meta = await refreshMeta();
    await refreshGroups();
    if (meta) await readRecords(from);
    if (p.follow === '1' && name === state.route.name) follow();
  }

  // ---- routing ----

  function render() {
    stopFollow();
    clearInterval(state.viewTimer);
    state.viewTimer = null;
    state.route = parseRoute(location.hash);
    if (state.route.params.tenant !== undefined && state.route.params.tenant !== tenant()) {
      tenantInput.value = state.route.params.tenant;
      sessionStorage.setItem('runnel.tenant', tenantInput.value);
    }
    const view = state.route.view;
    for (const v of ['overview', 'streams', 'stream', 'missing']) {
      $('view-' + v).hidden = v !== view;
    }
    $('nav-overview').classList.toggle('active', view === 'overview');
    $('nav-streams').classList.toggle('active', view === 'streams' || view === 'stream');
    $('nav-streams').href = link('streams', null);
    $('nav-overview').href = link('overview', null);
    showError('');
    document.title = view === 'stream' ? state.route.name + ' · runnel'
                   : view === 'streams' ? 'streams · runnel' : 'runnel console';
    if (view === 'overview') renderOverview(null, state.prev);
    if (view === 'streams') {
      renderStreams();
      state.viewTimer = setInterval(() => {
        if (document.visibilityState === 'visible') renderStreams(true);
      }, streamRefreshMs);
    }
    if (view === 'stream') {
      renderStream();
      state.viewTimer = setInterval(() => {
        if (!state.follow && document.visibilityState === 'visible') {
          refreshMeta();
          refreshGroups();
        }
      }, streamRefreshMs);
    }
  }

  // A notice set by an action that then moves to another view is shown there once.
  window.addEventListener('hashchange', () => {
    showNotice(state.carryNotice);
    state.carryNotice = '';
    render();
  });

  $('settings').addEventListener('submit', (e) => e.preventDefault());
  // A new token shows the same view again with it; a new tenant is another scope, so a stream
  // view gives way to that scope's list.
  tokenInput.addEventListener('change', () => {
    sessionStorage.setItem('runnel.token', tokenInput.value);
    render();
  });
  tenantInput.addEventListener('change', () => {
    sessionStorage.setItem('runnel.tenant', tenantInput.value);
    const r = state.route;
    go(r.view === 'stream' ? 'streams' : r.view, null,
       r.view === 'streams' ? listParams({ after: '' }) : {}, true);
  });

  let filterTimer = null;
  $('list-form').addEventListener('submit', (e) => e.preventDefault());
  $('prefix').addEventListener('input', () => {
    clearTimeout(filterTimer);
    filterTimer = setTimeout(() => go('streams', null, listParams({ prefix: $('prefix').value,
                                                                    after: '' }), true), 250);
  });
  $('show-internal').addEventListener('change', () =>
    go('streams', null, listParams({ internal: $('show-internal').checked ? '1' : '' })));
  $('page-size').addEventListener('change', () =>
    go('streams', null, listParams({ size: $('page-size').value })));
  $('page-next').addEventListener('click', () => {
    if (state.listNext === null) return;
    // Records the open page's cursor as entry n - 1 (pages before it must be known).
    const size = Number($('page-size').value);
    const p = state.route.params;
    const n = p.after ? listPageNumber(p.page) : 1;
    const back = listBack(size);
    if (back.length >= n - 1) {
      back.length = n - 1;
      back.push(p.after || '');
      saveListBack(size, back);
    }
    go('streams', null, listParams(state.listNext));
  });
  $('page-prev').addEventListener('click', () => {
    if (state.listPrev === null) return;
    go('streams', null, listParams(state.listPrev.after ? state.listPrev : {}));
  });
  $('page-first').addEventListener('click', () => go('streams', null, listParams({})));

  $('create-form').addEventListener('submit', async (e) => {
    e.preventDefault();
    const name = $('create-name').value.trim();
    const h = { 'Content-Type': $('create-type').value.trim() || 'application/octet-stream' };
    for (const [id, header] of [['create-max-events', 'Stream-Retention-Max-Events'],
                                ['create-max-age', 'Stream-Retention-Max-Age-Ms'],
                                ['create-max-bytes', 'Stream-Retention-Max-Bytes']]) {
      if ($(id).value.trim() !== '') h[header] = $(id).value.trim();
    }
    const ok = await act('Create', () => api(scopePaths(tenant()).stream(name),
                                             { method: 'PUT', headers: h }),
                         'Created ' + name + '.');
    if (ok) {
      $('create-name').value = '';
      state.carryNotice = $('notice').textContent;
      go('stream', name, {});
    }
  });

  $('jump-form').addEventListener('submit', (e) => {
    e.preventDefault();
    const v = $('jump-offset').value.trim();
    if (!/^\d+$/.test(v)) {
      showError('Jump: an offset is a record number (1 is the first record).');
      return;
    }
    go('stream', state.route.name, { offset: v });
  });
  $('read-first').addEventListener('click', () => {
    if (state.route.params.offset) go('stream', state.route.name, {});
    else readRecords(null);
  });
  $('read-next').addEventListener('click', () => {
    if (state.readNext !== null) go('stream', state.route.name, { offset: state.readNext });
  });
  $('follow').addEventListener('click', follow);

  $('append-form').addEventListener('submit', async (e) => {
    e.preventDefault();
    const body = $('append-body').value;
    const ok = await act('Append', () => api(scopePaths(tenant()).stream(state.route.name), {
      method: 'POST', headers: { 'Content-Type': state.streamType || 'application/octet-stream' },
      body,
    }), 'Appended.');
    if (ok) $('append-body').value = '';
    if (!state.follow) await Promise.all([refreshMeta(), refreshGroups()]);
  });
  $('close-stream').addEventListener('click', async () => {
    await act('Close', () => api(scopePaths(tenant()).stream(state.route.name), {
      method: 'POST', headers: { 'Stream-Closed': 'true' },
    }), 'Closed: the stream takes no more appends.');
    await refreshMeta();
  });
  $('delete-stream').addEventListener('click', () => {
    const name = state.route.name;
    confirmThen($('delete-stream'), name, async () => {
      const ok = await act('Delete', () => api(scopePaths(tenant()).stream(name),
                                               { method: 'DELETE' }), 'Deleted ' + name + '.');
      if (ok) {
        state.carryNotice = $('notice').textContent;
        go('streams', null, {});
      }
    });
  });
  $('retention-form').addEventListener('submit', async (e) => {
    e.preventDefault();
    const h = {};
    for (const [id, header] of [['ret-events', 'Stream-Retention-Max-Events'],
                                ['ret-age', 'Stream-Retention-Max-Age-Ms'],
                                ['ret-bytes', 'Stream-Retention-Max-Bytes']]) {
      if ($(id).value.trim() !== '') h[header] = $(id).value.trim();
    }
    if (Object.keys(h).length === 0) h['Stream-Retention'] = 'none';
    await act('Retention', () => api(scopePaths(tenant()).stream(state.route.name),
                                     { method: 'PATCH', headers: h }), 'Retention set.');
    await refreshMeta();
  });
  $('group-form').addEventListener('submit', (e) => {
    e.preventDefault();
    const group = $('group-name').value.trim();
    const done = $('group-ack').value.trim();
    if (group === '' || !/^\d+$/.test(done)) {
      showError('Ack: name a group and the number of records it has done.');
      return;
    }
    ackGroup(group, done);
  });
  $('group-reset').addEventListener('click', () => {
    const group = $('group-name').value.trim();
    const done = $('group-ack').value.trim() || '0';
    if (group === '' || !/^\d+$/.test(done)) {
      showError('Reset: name a group and the number of records it has done.');
      return;
    }
    resetGroup(group, done);
  });

  render();
  refreshHealth();
  sampleMetrics();
  setInterval(() => {
    refreshHealth();
    sampleMetrics();
  }, kSampleMs);
}

// runnel's built-in dashboard: server figures from /metrics, the streams of a scope, one
// stream's metadata, consumer groups and records. Plain script, no dependencies; everything it
// shows comes from the public HTTP API with the token typed in the page. The pure functions
// come first and are exercised by tests/dashboard (they never touch the DOM).
'use strict';

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

// The figures the dashboard shows, as totals (counters) and levels (gauges).
function summarize(samples) {
  const s = {
    requests: 0, appends: 0, errors: 0, bytesIn: 0, bytesOut: 0, connections: 0,
    liveReaders: 0, syncs: 0, syncedRecords: 0, syncSeconds: 0, appendCount: 0,
    appendBuckets: [], info: null,
  };
  for (const x of samples) {
    switch (x.name) {
      case 'runnel_http_requests_total':
        s.requests += x.value;
        if (x.labels.route === 'stream' && x.labels.method === 'POST' &&
            Number(x.labels.status) < 300) {
          s.appends += x.value;
        }
        if (Number(x.labels.status) >= 500) s.errors += x.value;
        break;
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
    bytesIn: d('bytesIn'),
    bytesOut: d('bytesOut'),
    syncs: d('syncs'),
    recordsPerSync: syncs > 0 ? (cur.syncedRecords - prev.syncedRecords) / syncs : null,
    syncMs: syncs > 0 ? ((cur.syncSeconds - prev.syncSeconds) / syncs) * 1000 : null,
    appendP50: histogramQuantile(recent, 0.5),
    appendP99: histogramQuantile(recent, 0.99),
  };
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

// "0000000000000000_0000000000000042" → 42 (a string, exact past 2^53); the token itself
// when it is not one.
function offsetPosition(token) {
  const m = /^\d{16}_(\d{16})$/.exec(String(token || ''));
  return m ? m[1].replace(/^0+(?=\d)/, '') : String(token || '');
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

function mediaType(contentType) {
  return String(contentType || '').split(';')[0].trim().toLowerCase();
}

// Whether a read of this content type is shown as text (else only its size is).
function isTextual(contentType) {
  const media = mediaType(contentType);
  return media.startsWith('text/') || media === 'application/json';
}

// The records of one read response as display strings: the messages of a JSON stream, the
// text of a text stream (one entry per response: text has no message boundaries), the size of
// anything else (`body` is then its length in bytes). Long entries are cut at `limit`
// characters.
function recordsForDisplay(contentType, body, limit = 2000) {
  const cut = (s) => (s.length > limit ? s.slice(0, limit) + ' …' : s);
  const media = mediaType(contentType);
  if (typeof body === 'number') {
    return body === 0 ? [] : ['(' + formatBytes(body) + ' of ' + (media || 'binary') + ')'];
  }
  if (media === 'application/json') {
    try {
      const parsed = JSON.parse(body);
      if (Array.isArray(parsed)) return parsed.map((m) => cut(JSON.stringify(m)));
    } catch (e) {
      // fall through: shown as text
    }
  }
  if (body.length === 0) return [];
  return [cut(body)];
}

if (typeof module !== 'undefined') {
  module.exports = {
    parseMetrics, summarize, histogramQuantile, bucketDelta, rates, encodeName, scopePaths,
    offsetPosition, formatCount, formatBytes, formatSeconds, isTextual, recordsForDisplay,
  };
}

// ---- the page ----------------------------------------------------------------------------

if (typeof document !== 'undefined') {
  const $ = (id) => document.getElementById(id);
  const state = {
    prev: null, prevAt: 0, selected: null, after: null, paged: false, tail: null, tailRun: 0,
  };
  const maxRecords = 200;
  const listLimit = 100;

  const tenantInput = $('tenant');
  const tokenInput = $('token');
  tenantInput.value = sessionStorage.getItem('runnel.tenant') || '';
  tokenInput.value = sessionStorage.getItem('runnel.token') || '';

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

  async function api(path, options = {}) {
    const r = await fetch(path, { ...options, headers: { ...headers(), ...(options.headers || {}) },
                                  cache: 'no-store' });
    if (!r.ok && r.status !== 204) {
      let message = r.status + ' ' + r.statusText;
      try {
        const body = await r.json();
        if (body && body.error) message = body.error.code + ': ' + body.error.message;
      } catch (e) {
        // not a JSON error body
      }
      const err = new Error(message);
      err.status = r.status;
      throw err;
    }
    return r;
  }

  function cell(row, text, cls) {
    const td = document.createElement('td');
    td.textContent = text;
    if (cls) td.className = cls;
    row.appendChild(td);
    return td;
  }

  function figure(label, value, title) {
    const div = document.createElement('div');
    div.className = 'figure';
    if (title) div.title = title;
    const v = document.createElement('div');
    v.className = 'value';
    v.textContent = value;
    const l = document.createElement('div');
    l.className = 'label';
    l.textContent = label;
    div.append(v, l);
    return div;
  }

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

  async function refreshFigures() {
    let cur;
    try {
      cur = summarize(parseMetrics(await (await api('/metrics')).text()));
    } catch (e) {
      $('figures').replaceChildren(figure('metrics', '–', e.message));
      return;
    }
    const now = performance.now();
    if (cur.info) {
      $('info').textContent = ['runnel ' + (cur.info.version || ''),
                               cur.info.store ? 'store ' + cur.info.store : '',
                               cur.info.durability ? 'durability ' + cur.info.durability : '']
          .filter(Boolean).join(' · ');
    }
    const r = state.prev ? rates(state.prev, cur, (now - state.prevAt) / 1000) : null;
    state.prev = cur;
    state.prevAt = now;
    const f = [
      figure('requests / s', r ? formatCount(r.requests) : '–'),
      figure('appends / s', r ? formatCount(r.appends) : '–'),
      figure('append p50', r ? formatSeconds(r.appendP50) : '–',
             'from the append latency histogram, over the last interval'),
      figure('append p99', r ? formatSeconds(r.appendP99) : '–'),
      figure('records per sync', r ? formatCount(r.recordsPerSync) : '–',
             'group commit: appends made durable by one sync'),
      figure('syncs / s', r ? formatCount(r.syncs) : '–'),
      figure('in / s', r ? formatBytes(r.bytesIn) : '–'),
      figure('out / s', r ? formatBytes(r.bytesOut) : '–'),
      figure('connections', formatCount(cur.connections)),
      figure('live readers', formatCount(cur.liveReaders), 'long-poll and SSE readers waiting'),
      figure('5xx / s', r ? formatCount(r.errors) : '–'),
      figure('appends (total)', formatCount(cur.appends)),
    ];
    $('figures').replaceChildren(...f);
  }

  async function loadStreams(append) {
    const paths = scopePaths(tenantInput.value);
    const q = new URLSearchParams({ limit: String(listLimit) });
    const prefix = $('prefix').value;
    if (prefix !== '') q.set('prefix', prefix);
    if (append && state.after !== null) q.set('after', state.after);
    state.paged = append;
    let body;
    try {
      body = await (await api(paths.list + '?' + q.toString())).json();
      showError('');
    } catch (e) {
      showError('Streams: ' + e.message +
                (e.status === 401 ? ' (type a token above)' : ''));
      return;
    }
    const tbody = $('streams').tBodies[0];
    if (!append) tbody.replaceChildren();
    for (const s of body.streams || []) {
      const tr = document.createElement('tr');
      cell(tr, s.name);
      cell(tr, s.content_type);
      cell(tr, offsetPosition(s.next_offset), 'num');
      cell(tr, formatCount(s.event_count), 'num');
      cell(tr, formatBytes(s.retained_bytes), 'num');
      cell(tr, s.closed ? 'closed' : 'open');
      if (s.name === state.selected) tr.classList.add('selected');
      tr.addEventListener('click', () => select(s.name, tr));
      tbody.appendChild(tr);
    }
    state.after = body.next_after === undefined ? null : body.next_after;
    $('more').hidden = state.after === null;
    $('stream-count').textContent =
        tbody.rows.length + (state.after === null ? '' : '+') + ' streams';
  }

  function stopTail() {
    state.tailRun += 1;
    if (state.tail) state.tail.abort();
    state.tail = null;
    $('tail-toggle').textContent = 'Follow live';
    $('tail-state').textContent = '';
  }

  // A read response's body: text for textual types, else its size in bytes.
  async function readBody(r) {
    return isTextual(r.headers.get('Content-Type')) ? r.text()
                                                    : (await r.arrayBuffer()).byteLength;
  }

  function showRecords(contentType, body, replace) {
    const list = $('records');
    if (replace) list.replaceChildren();
    for (const text of recordsForDisplay(contentType, body)) {
      const li = document.createElement('li');
      li.textContent = text;
      list.appendChild(li);
    }
    while (list.children.length > maxRecords) list.removeChild(list.firstChild);
    list.scrollTop = list.scrollHeight;
  }

  async function select(name, row) {
    stopTail();
    state.selected = name;
    for (const tr of $('streams').tBodies[0].rows) tr.classList.toggle('selected', tr === row);
    $('detail').hidden = false;
    $('detail-name').textContent = name;
    $('records').replaceChildren();
    await describe(name);
  }

  async function describe(name) {
    const paths = scopePaths(tenantInput.value);
    const meta = $('detail-meta');
    try {
      const r = await api(paths.stream(name), { method: 'HEAD' });
      const rows = [
        ['Content type', r.headers.get('Content-Type')],
        ['Next offset', r.headers.get('Stream-Next-Offset')],
        ['Closed', r.headers.get('Stream-Closed') === 'true' ? 'yes' : 'no'],
        ['TTL (s)', r.headers.get('Stream-TTL')],
        ['Expires at', r.headers.get('Stream-Expires-At')],
        ['Retention: records', r.headers.get('Stream-Retention-Max-Events')],
        ['Retention: age (ms)', r.headers.get('Stream-Retention-Max-Age-Ms')],
        ['Retention: bytes', r.headers.get('Stream-Retention-Max-Bytes')],
      ];
      meta.replaceChildren();
      for (const [k, v] of rows) {
        if (v === null || v === '') continue;
        const dt = document.createElement('dt');
        dt.textContent = k;
        const dd = document.createElement('dd');
        dd.textContent = v;
        meta.append(dt, dd);
      }
    } catch (e) {
      meta.replaceChildren(document.createTextNode(e.message));
    }
    const tbody = $('groups').tBodies[0];
    try {
      const g = await (await api(paths.groups(name))).json();
      tbody.replaceChildren();
      for (const x of g.groups || []) {
        const tr = document.createElement('tr');
        cell(tr, x.group);
        cell(tr, String(x.last_acked), 'num');
        cell(tr, String(x.lag), 'num');
        cell(tr, x.updated_at_ms ? new Date(x.updated_at_ms).toISOString() : '–');
        tbody.appendChild(tr);
      }
      if (tbody.rows.length === 0) {
        const tr = document.createElement('tr');
        cell(tr, 'none').colSpan = 4;
        tbody.appendChild(tr);
      }
    } catch (e) {
      const tr = document.createElement('tr');
      cell(tr, e.message).colSpan = 4;
      tbody.replaceChildren(tr);
    }
  }

  async function readFromStart() {
    if (state.selected === null) return;
    stopTail();
    const url = scopePaths(tenantInput.value).stream(state.selected) + '?offset=-1';
    try {
      const r = await api(url);
      showRecords(r.headers.get('Content-Type'), await readBody(r), true);
      $('tail-state').textContent = r.headers.get('Stream-Up-To-Date') === 'true'
          ? 'all records shown' : 'first part shown (the server returns reads in chunks)';
    } catch (e) {
      $('tail-state').textContent = e.message;
    }
  }

  async function follow() {
    if (state.selected === null) return;
    if (state.tail) {
      stopTail();
      return;
    }
    const run = ++state.tailRun;
    const controller = new AbortController();
    state.tail = controller;
    $('tail-toggle').textContent = 'Stop';
    $('tail-state').textContent = 'waiting for new records';
    const base = scopePaths(tenantInput.value).stream(state.selected);
    let offset = 'now';
    let cursor = null;
    while (run === state.tailRun) {
      const q = new URLSearchParams({ offset, live: 'long-poll' });
      if (cursor) q.set('cursor', cursor);
      try {
        const r = await api(base + '?' + q.toString(), { signal: controller.signal });
        offset = r.headers.get('Stream-Next-Offset') || offset;
        cursor = r.headers.get('Stream-Cursor') || cursor;
        if (r.status === 200) showRecords(r.headers.get('Content-Type'), await readBody(r), false);
        if (r.headers.get('Stream-Closed') === 'true') {
          $('tail-state').textContent = 'the stream is closed';
          break;
        }
      } catch (e) {
        if (run === state.tailRun) $('tail-state').textContent = e.message;
        break;
      }
    }
    if (run === state.tailRun) {
      state.tail = null;
      $('tail-toggle').textContent = 'Follow live';
    }
  }

  function settingsChanged() {
    sessionStorage.setItem('runnel.tenant', tenantInput.value);
    sessionStorage.setItem('runnel.token', tokenInput.value);
    stopTail();
    state.selected = null;
    state.after = null;
    $('detail').hidden = true;
    loadStreams(false);
    refreshFigures();
  }

  $('settings').addEventListener('submit', (e) => e.preventDefault());
  tenantInput.addEventListener('change', settingsChanged);
  tokenInput.addEventListener('change', settingsChanged);
  $('prefix').addEventListener('input', () => {
    state.after = null;
    loadStreams(false);
  });
  $('more').addEventListener('click', () => loadStreams(true));
  $('read-start').addEventListener('click', readFromStart);
  $('tail-toggle').addEventListener('click', follow);

  refreshHealth();
  refreshFigures();
  loadStreams(false);
  setInterval(() => {
    refreshHealth();
    refreshFigures();
  }, 2000);
  setInterval(() => {
    // Refresh the first page only: a user paging through a long listing keeps their place.
    if (!state.paged && document.visibilityState === 'visible') loadStreams(false);
  }, 5000);
}

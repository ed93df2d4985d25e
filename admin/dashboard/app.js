// saltus dashboard. Polls GET /admin/dashboard.json (the admin listener's
// /metrics as JSON, the backends, the route table's statistics, the
// cluster and the model pools) every second with the admin token, keeps the last 5 minutes
// client-side (bounded: at most maxPoints polls), computes rates from
// counter deltas over the server's own clock, and draws the charts on
// canvas. No library, no build step.
'use strict';

(function () {
  const pollMs = 1000;
  const historySec = 300; // what the charts show
  const maxPoints = 400; // the history's bound: 5 min at 1 s, with room
  const rateSec = 10; // the window of the rates shown as numbers
  const quantileSec = 60; // the window of the percentiles shown as numbers
  const chartQuantileSec = 15; // each latency chart point: the last 15 s
  const tokenKey = 'saltus-admin-token';

  const $ = (id) => document.getElementById(id);
  let pts = []; // points, oldest first
  let timer = 0;
  let inflightReq = null;
  let failures = 0;

  // ---- token ---------------------------------------------------------

  // A token in the URL fragment (#token=…) is taken into sessionStorage
  // and removed from the address bar: a fragment never goes to the
  // server, and this way it does not stay in the browser history or a bookmark.
  function takeFragmentToken() {
    const h = location.hash.replace(/^#/, '');
    if (!h) return;
    const params = new URLSearchParams(h);
    const t = params.get('token');
    if (t === null) return;
    try { sessionStorage.setItem(tokenKey, t.trim()); } catch (e) { /* storage off: the prompt asks each load */ }
    params.delete('token');
    const rest = params.toString();
    window.history.replaceState(null, '', location.pathname + location.search + (rest ? '#' + rest : ''));
  }
  function token() {
    try { return sessionStorage.getItem(tokenKey) || ''; } catch (e) { return ''; }
  }
  function setToken(t) {
    try { sessionStorage.setItem(tokenKey, t); } catch (e) { /* see takeFragmentToken */ }
  }

  function showAuth(message) {
    $('auth').hidden = false;
    $('auth-message').textContent = message;
    $('token-input').focus();
  }

  // ---- formatting: every number with its unit ------------------------

  function fmtNum(v, digits) {
    if (v === null || v === undefined || !isFinite(v)) return '–';
    const a = Math.abs(v);
    if (a >= 1e9) return (v / 1e9).toFixed(2) + ' G';
    if (a >= 1e6) return (v / 1e6).toFixed(2) + ' M';
    if (a >= 1e4) return (v / 1e3).toFixed(1) + ' k';
    if (digits !== undefined) return v.toFixed(digits);
    return Number.isInteger(v) ? String(v) : v.toFixed(a >= 100 ? 0 : a >= 10 ? 1 : 2);
  }
  function fmtInt(v) {
    if (v === null || v === undefined || !isFinite(v)) return '–';
    return Math.round(v).toLocaleString('en-US');
  }
  function fmtRate(v) { return v === null ? '–' : fmtNum(v) + '/s'; }
  function fmtPct(v) { return v === null || !isFinite(v) ? '–' : (v * 100).toFixed(1) + ' %'; }
  function fmtSec(s) {
    if (s === null || s === undefined || !isFinite(s)) return '–';
    if (s === 0) return '0';
    if (s < 1e-3) return (s * 1e6).toFixed(0) + ' µs';
    if (s < 1) return (s * 1e3).toFixed(s < 0.01 ? 1 : 0) + ' ms';
    if (s < 120) return s.toFixed(2) + ' s';
    return (s / 60).toFixed(1) + ' min';
  }
  function fmtBytes(b) {
    if (b === null || b === undefined || !isFinite(b)) return '–';
    const u = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
    let i = 0;
    while (Math.abs(b) >= 1024 && i < u.length - 1) { b /= 1024; i++; }
    return (i === 0 ? b.toFixed(0) : b.toFixed(1)) + ' ' + u[i];
  }

  // set writes a number into an element: its text, and the raw value in
  // data-value (what the browser test compares with /metrics).
  function set(id, value, text) {
    const el = $(id);
    if (!el) return;
    el.dataset.value = value === null || value === undefined || !isFinite(value) ? '' : String(value);
    el.textContent = text;
  }

  // ---- reading the JSON ----------------------------------------------

  function samples(d, name) { return (d.metrics && d.metrics[name]) || []; }
  function has(d, name) { return !!(d.metrics && d.metrics[name]); }
  function sum(d, name, pred) {
    let s = 0;
    for (const x of samples(d, name)) if (!pred || pred(x.labels || {})) s += x.value;
    return s;
  }
  // byLabel sums a family's series by the value of one label.
  function byLabel(d, name, label) {
    const out = {};
    for (const x of samples(d, name)) {
      const k = (x.labels || {})[label];
      if (k === undefined) continue;
      out[k] = (out[k] || 0) + x.value;
    }
    return out;
  }
  // hist sums a histogram's series (those pred accepts) into one:
  // {le: [...], counts: [...cumulative, +Inf]}; null if it has none.
  function hist(d, family, pred) {
    const list = (d.histograms && d.histograms[family]) || [];
    let out = null;
    for (const h of list) {
      if (pred && !pred(h.labels || {})) continue;
      if (!out) { out = { le: h.le.slice(), counts: h.counts.slice() }; continue; }
      if (h.le.length !== out.le.length || h.le.some((v, i) => v !== out.le[i])) continue; // other buckets: not summable
      for (let i = 0; i < out.counts.length; i++) out.counts[i] += h.counts[i];
    }
    return out;
  }
  function histByLabel(d, family, label) {
    const out = {};
    for (const h of (d.histograms && d.histograms[family]) || []) {
      const k = (h.labels || {})[label];
      if (k !== undefined) out[k] = hist(d, family, (l) => l[label] === k);
    }
    return out;
  }
  const code = (l) => Number(l.code);
  const is5xx = (l) => code(l) >= 500 && code(l) < 600;

  // point is what one poll keeps for the history: cumulative counters,
  // gauges and histograms, at the server's clock.
  function point(d) {
    const p = {
      t: d.time_ms / 1000,
      req: sum(d, 'saltus_requests_total'),
      err: sum(d, 'saltus_requests_total', is5xx),
      prompt: has(d, 'saltus_route_prompt_tokens_total') ? sum(d, 'saltus_route_prompt_tokens_total') : null,
      actual: sum(d, 'saltus_route_actual_cached_tokens_total'),
      predicted: sum(d, 'saltus_route_predicted_cached_tokens_total'),
      tokHits: sum(d, 'saltus_tokenizer_cache_hits_total'),
      tokMisses: sum(d, 'saltus_tokenizer_cache_misses_total'),
      evictions: sum(d, 'saltus_tree_evictions_total'),
      cpu: has(d, 'process_cpu_seconds_total') ? sum(d, 'process_cpu_seconds_total') : null,
      ttfb: hist(d, 'saltus_backend_ttfb_seconds'),
      ttft: hist(d, 'saltus_route_ttft_seconds'),
      inflight: byLabel(d, 'saltus_backend_in_flight', 'backend'),
      pool: byLabel(d, 'saltus_pool_requests_total', 'model'),
      qwait: histByLabel(d, 'saltus_queue_wait_seconds', 'model'),
      be: {},
    };
    const req = byLabel(d, 'saltus_backend_requests_total', 'backend');
    const err = {};
    for (const x of samples(d, 'saltus_backend_requests_total')) {
      const l = x.labels || {};
      if (is5xx(l)) err[l.backend] = (err[l.backend] || 0) + x.value;
    }
    const ttfb = histByLabel(d, 'saltus_backend_ttfb_seconds', 'backend');
    for (const k of new Set([...Object.keys(req), ...Object.keys(ttfb)])) {
      p.be[k] = { req: req[k] || 0, err: err[k] || 0, ttfb: ttfb[k] || null };
    }
    return p;
  }

  // ---- rates and quantiles from the history -----------------------

  // base returns the oldest point within sec of the newest (at least the
  // one before it), or null with fewer than two points.
  function base(sec, at) {
    const end = at === undefined ? pts.length - 1 : at;
    if (end < 1) return null;
    const last = pts[end];
    let i = end - 1;
    while (i > 0 && last.t - pts[i - 1].t <= sec) i--;
    return pts[i];
  }
  // rate: the per-second increase of f(point) over the window; null
  // without two points or when the counter went down (a restart).
  function rate(f, sec, at) {
    const end = at === undefined ? pts.length - 1 : at;
    const b = base(sec, end);
    if (!b) return null;
    const last = pts[end];
    const dv = f(last) - f(b);
    const dt = last.t - b.t;
    if (dt <= 0 || dv < 0 || !isFinite(dv)) return null;
    return dv / dt;
  }
  function delta(f, sec, at) {
    const end = at === undefined ? pts.length - 1 : at;
    const b = base(sec, end);
    if (!b) return null;
    const dv = f(pts[end]) - f(b);
    return dv >= 0 ? dv : null;
  }
  function histDelta(a, b) {
    if (!a) return null;
    if (!b || b.le.length !== a.le.length) return a;
    const counts = a.counts.map((c, i) => c - b.counts[i]);
    if (counts.some((c) => c < 0)) return a; // a restart: since then
    return { le: a.le, counts };
  }
  // quantile as Prometheus's histogram_quantile: linear within the bucket;
  // in the +Inf bucket, the highest finite bound. null without
  // observations.
  function quantile(q, h) {
    if (!h) return null;
    const n = h.counts[h.counts.length - 1];
    if (!(n > 0)) return null;
    const rank = q * n;
    let i = 0;
    while (i < h.counts.length - 1 && h.counts[i] < rank) i++;
    if (i >= h.le.length) return h.le[h.le.length - 1];
    const lo = i === 0 ? 0 : h.le[i - 1];
    const below = i === 0 ? 0 : h.counts[i - 1];
    const inBucket = h.counts[i] - below;
    if (inBucket <= 0) return h.le[i];
    return lo + (h.le[i] - lo) * ((rank - below) / inBucket);
  }
  // windowed: the histogram of the last sec, or, when nothing was observed
  // in it, the whole since start (scope says which).
  function windowed(f, sec) {
    const last = pts[pts.length - 1];
    const b = base(sec);
    const w = histDelta(f(last), b ? f(b) : null);
    if (w && w.counts[w.counts.length - 1] > 0 && b) return { h: w, scope: 'last ' + sec + ' s' };
    const all = f(last);
    if (all && all.counts[all.counts.length - 1] > 0) return { h: all, scope: 'since start' };
    return { h: null, scope: 'no answers yet' };
  }

  // ---- rendering -----------------------------------------------------

  function backendLabel(b, p) {
    if (b.url in p.be || b.url in p.inflight) return b.url;
    if (b.name && (b.name in p.be || b.name in p.inflight)) return b.name;
    return b.url;
  }

  function render(d) {
    const p = pts[pts.length - 1];

    // requests
    set('kpi-req-rate', rate((x) => x.req, rateSec), fmtRate(rate((x) => x.req, rateSec)));
    set('kpi-req-total', p.req, fmtInt(p.req));
    set('kpi-err-rate', rate((x) => x.err, rateSec), fmtRate(rate((x) => x.err, rateSec)));

    // backends
    const backends = d.backends || [];
    const healthy = backends.filter((b) => b.healthy).length;
    const inflight = sum(d, 'saltus_backend_in_flight');
    set('kpi-inflight', inflight, fmtInt(inflight));
    set('kpi-backends', backends.length, fmtInt(backends.length));
    set('kpi-backends-healthy', healthy, fmtInt(healthy));

    // token hit ratio: the engines' cached tokens over prompt tokens, and
    // what the route table predicted, over the window, else since start
    let hit = null, pred = null, scope = '';
    if (p.prompt !== null) {
      const dp = delta((x) => x.prompt, quantileSec);
      if (dp > 0) {
        hit = delta((x) => x.actual, quantileSec) / dp;
        pred = delta((x) => x.predicted, quantileSec) / dp;
        scope = 'last ' + quantileSec + ' s';
      } else if (p.prompt > 0) {
        hit = p.actual / p.prompt; pred = p.predicted / p.prompt; scope = 'since start';
      }
    }
    set('kpi-hit', hit, fmtPct(hit));
    set('kpi-hit-predicted', pred, fmtPct(pred));
    $('kpi-hit-scope').textContent = scope ? '· ' + scope : '';

    // prediction quality: precision and recall of "holds a block"
    const pr = {};
    for (const x of samples(d, 'saltus_route_cache_predictions_total')) {
      const l = x.labels || {};
      pr[l.predicted + '/' + l.actual] = (pr[l.predicted + '/' + l.actual] || 0) + x.value;
    }
    const tp = pr['hit/hit'] || 0, fp = pr['hit/miss'] || 0, fn = pr['miss/hit'] || 0;
    const precision = tp + fp > 0 ? tp / (tp + fp) : null;
    const recall = tp + fn > 0 ? tp / (tp + fn) : null;
    set('kpi-precision', precision, fmtPct(precision));
    set('kpi-recall', recall, fmtPct(recall));

    // latency percentiles
    const ttft = windowed((x) => x.ttft, quantileSec);
    const q50 = quantile(0.5, ttft.h), q99 = quantile(0.99, ttft.h);
    set('kpi-ttft-p50', q50, fmtSec(q50));
    set('kpi-ttft-p99', q99, fmtSec(q99));
    $('kpi-ttft-scope').textContent = d.histograms && d.histograms['saltus_route_ttft_seconds']
      ? 'streamed answers · ' + ttft.scope : 'not exposed by this saltus';
    const ttfb = windowed((x) => x.ttfb, quantileSec);
    const b50 = quantile(0.5, ttfb.h), b99 = quantile(0.99, ttfb.h);
    set('kpi-ttfb-p50', b50, fmtSec(b50));
    set('kpi-ttfb-p99', b99, fmtSec(b99));
    $('kpi-ttfb-scope').textContent = ttfb.scope;

    // route table
    const nodes = has(d, 'saltus_tree_nodes') ? sum(d, 'saltus_tree_nodes') : (d.routes && d.routes.nodes);
    const blocks = has(d, 'saltus_tree_blocks') ? sum(d, 'saltus_tree_blocks') : (d.routes && d.routes.blocks);
    set('kpi-routes', nodes, fmtInt(nodes));
    set('kpi-blocks', blocks, fmtInt(blocks));
    const ev = rate((x) => x.evictions, rateSec);
    set('kpi-evictions', p.evictions, fmtInt(p.evictions) + (ev ? ' (' + fmtRate(ev) + ')' : ''));

    // tokenizer cache
    const th = delta((x) => x.tokHits, quantileSec), tm = delta((x) => x.tokMisses, quantileSec);
    let tokHit = null;
    if (th !== null && th + tm > 0) tokHit = th / (th + tm);
    else if (p.tokHits + p.tokMisses > 0) tokHit = p.tokHits / (p.tokHits + p.tokMisses);
    set('kpi-tok-hit', tokHit, fmtPct(tokHit));
    const tb = sum(d, 'saltus_tokenizer_cache_bytes'), te = sum(d, 'saltus_tokenizer_cache_entries');
    set('kpi-tok-bytes', tb, fmtBytes(tb));
    set('kpi-tok-entries', te, fmtInt(te));

    // process
    const cpu = rate((x) => x.cpu, rateSec);
    set('kpi-cpu', cpu, cpu === null ? '–' : (cpu * 100).toFixed(0) + ' %');
    const rss = sum(d, 'process_resident_memory_bytes'), gr = sum(d, 'go_goroutines');
    set('kpi-rss', rss, fmtBytes(rss));
    set('kpi-goroutines', gr, fmtInt(gr));

    renderCluster(d.cluster || {});
    renderBackends(backends, p);
    renderPools(d.pools);
    renderCharts();
  }

  function cell(tr, text, cls) {
    const td = document.createElement('td');
    if (cls) td.className = cls;
    td.textContent = text;
    tr.appendChild(td);
    return td;
  }

  function renderBackends(backends, p) {
    const body = $('backends-body');
    const rows = [];
    for (const b of backends) {
      const lbl = backendLabel(b, p);
      const tr = document.createElement('tr');
      tr.dataset.backend = String(b.id);
      const name = cell(tr, b.name || ('backend-' + b.id));
      const url = document.createElement('span');
      url.className = 'url';
      url.textContent = b.url;
      name.appendChild(url);
      const st = cell(tr, '');
      const badge = document.createElement('span');
      badge.className = 'badge ' + (b.draining ? 'warn' : b.healthy ? 'ok' : 'bad');
      badge.textContent = b.draining ? 'draining' : b.healthy ? 'healthy' : 'down';
      badge.dataset.healthy = String(b.healthy);
      st.appendChild(badge);
      modelsCell(tr, b);
      cell(tr, fmtInt(b.in_flight), 'n').dataset.value = String(b.in_flight);
      const e = b.engine;
      cell(tr, e ? fmtInt(e.waiting) : '–', 'n');
      cell(tr, e ? fmtInt(e.running) : '–', 'n');
      const kv = cell(tr, '');
      if (e) {
        const bar = document.createElement('span');
        bar.className = 'kvbar';
        const fill = document.createElement('b');
        fill.style.width = Math.max(0, Math.min(100, e.kv_usage * 100)).toFixed(1) + '%';
        bar.appendChild(fill);
        kv.appendChild(bar);
        kv.appendChild(document.createTextNode(fmtPct(e.kv_usage) + (e.kv_tokens ? ' of ' + fmtNum(e.kv_tokens) + ' tok' : '')));
      } else {
        kv.textContent = '–';
      }
      const rq = rate((x) => (x.be[lbl] ? x.be[lbl].req : 0), rateSec);
      cell(tr, fmtRate(rq), 'n');
      const er = rate((x) => (x.be[lbl] ? x.be[lbl].err : 0), rateSec);
      cell(tr, fmtRate(er), 'n');
      const w = windowed((x) => (x.be[lbl] ? x.be[lbl].ttfb : null), quantileSec);
      cell(tr, fmtSec(quantile(0.5, w.h)), 'n');
      const byB = (name) => {
        for (const x of samples(lastData, name)) if ((x.labels || {}).backend === lbl) return x.value;
        return null;
      };
      cell(tr, fmtInt(byB('saltus_backend_pending_prefill_tokens')), 'n');
      cell(tr, fmtInt(byB('saltus_backend_kv_pinned_tokens')), 'n');
      rows.push(tr);
    }
    if (!rows.length) {
      const tr = document.createElement('tr');
      cell(tr, 'no backends', 'muted').colSpan = 12;
      rows.push(tr);
    }
    body.replaceChildren(...rows);
  }

  // modelsCell shows the models a backend serves (its pools), and where
  // they come from: pinned, or unknown (not listed yet) with the last
  // fetch's error as the cell's tooltip.
  function modelsCell(tr, b) {
    const models = b.models || [];
    const td = cell(tr, models.join(', '), 'models');
    td.dataset.models = models.join(',');
    td.dataset.state = b.models_state || '';
    if (!b.models_state || b.models_state === 'unknown' || !models.length) {
      // not tracked (no fleet), not listed yet, or an engine that lists none
      td.textContent = !b.models_state ? '–' : b.models_state === 'unknown' ? 'unknown' : 'none';
      td.classList.add('muted');
    } else if (b.models_state === 'pinned') {
      const tag = document.createElement('span');
      tag.className = 'url';
      tag.textContent = 'pinned';
      td.appendChild(tag);
    }
    if (b.models_error) {
      td.title = 'last GET /v1/models: ' + b.models_error;
      const warn = document.createElement('span');
      warn.className = 'badge warn';
      warn.textContent = 'fetch error';
      td.appendChild(document.createTextNode(' '));
      td.appendChild(warn);
    }
    return td;
  }

  // queueCells adds a pool's gateway queue to its row: the requests
  // waiting now (by class in the title and below: h high, n normal, l
  // low priority), the oldest one's wait, and the p50 / p99 of the waits
  // of the last minute (saltus_queue_wait_seconds, every class).
  function queueCells(tr, model, q) {
    if (!q) {
      for (let i = 0; i < 3; i++) cell(tr, '–', 'n muted');
      return;
    }
    const by = q.by_class || {};
    tr.dataset.queued = String(q.depth);
    tr.dataset.queueDispatched = String(q.dispatched);
    const d = cell(tr, fmtInt(q.depth), 'n');
    d.dataset.value = String(q.depth);
    d.title = 'high ' + (by.high || 0) + ' · normal ' + (by.normal || 0) + ' · low ' + (by.low || 0) +
      ' — since start: queued ' + q.queued + ', dispatched ' + q.dispatched + ', refused full ' + q.full +
      ', expired ' + q.expired + ', gone ' + q.gone + (q.shutdown ? ', at shutdown ' + q.shutdown : '');
    if (q.depth > 0) {
      d.classList.add('warn');
      const cls = document.createElement('span');
      cls.className = 'url';
      cls.textContent = 'h ' + (by.high || 0) + ' · n ' + (by.normal || 0) + ' · l ' + (by.low || 0);
      d.appendChild(cls);
    }
    cell(tr, q.depth > 0 ? fmtSec(q.oldest_wait_ms / 1000) : '–', 'n').dataset.value = String(q.oldest_wait_ms);
    const w = windowed((x) => (x.qwait ? x.qwait[model] || null : null), quantileSec);
    const p50 = quantile(0.5, w.h), p99 = quantile(0.99, w.h);
    const c = cell(tr, p50 === null ? '–' : fmtSec(p50) + ' / ' + fmtSec(p99), 'n');
    c.title = 'waits ' + w.scope;
  }

  // renderPools fills the pools table from /admin/dashboard.json's pools
  // (GET /admin/pools): per model its base (an adapter's parent), its
  // backends routable of total, the requests admitted since start and
  // their rate from the history (saltus_pool_requests_total), and its
  // gateway queue (queueCells).
  function renderPools(pools) {
    const body = $('pools-body');
    const summary = $('pools-summary');
    if (!pools) {
      const tr = document.createElement('tr');
      cell(tr, 'this saltus does not report model pools', 'muted').colSpan = 8;
      body.replaceChildren(tr);
      summary.textContent = '';
      return;
    }
    const list = pools.pools || [];
    const rows = list.map((pl) => {
      const tr = document.createElement('tr');
      const total = (pl.backends || []).length;
      tr.dataset.pool = pl.model;
      tr.dataset.backends = String(total);
      tr.dataset.routable = String(pl.routable);
      tr.dataset.requests = String(pl.requests);
      const m = cell(tr, pl.model);
      m.title = (pl.backends || []).map((b) => b.name || b.url).join(', ');
      if (pl.max_model_len) {
        const len = document.createElement('span');
        len.className = 'url';
        len.textContent = 'max ' + fmtNum(pl.max_model_len) + ' tok';
        m.appendChild(len);
      }
      cell(tr, pl.parent || '–', pl.parent ? '' : 'muted');
      const bc = cell(tr, fmtInt(pl.routable) + ' / ' + fmtInt(total), 'n');
      if (pl.routable === 0) bc.classList.add('bad');
      else if (pl.routable < total) bc.classList.add('warn');
      cell(tr, fmtInt(pl.requests), 'n').dataset.value = String(pl.requests);
      cell(tr, fmtRate(rate((x) => x.pool[pl.model] || 0, rateSec)), 'n');
      queueCells(tr, pl.model, pl.queue);
      return tr;
    });
    if (!rows.length) {
      const tr = document.createElement('tr');
      cell(tr, 'no model known yet: every backend is sent any model', 'muted').colSpan = 8;
      rows.push(tr);
    }
    if (pools.other_queue) {
      // Requests for models without a pool of their own ("(other)").
      const tr = document.createElement('tr');
      tr.dataset.pool = '(other)';
      cell(tr, '(other models)', 'muted').title = 'models no pool lists (sent to the backends whose models are not known), and pools past the 100th';
      for (let i = 0; i < 4; i++) cell(tr, '', 'muted');
      queueCells(tr, '(other)', pools.other_queue);
      rows.push(tr);
    }
    body.replaceChildren(...rows);
    const unknown = (pools.unknown || []).map((b) => b.name || b.url || ('backend-' + b.id));
    summary.textContent = fmtInt(list.length) + (list.length === 1 ? ' pool' : ' pools') +
      (unknown.length ? ' · models unknown (sent only models no pool serves): ' + unknown.join(', ') : ' · every backend\'s models known');
  }

  function renderCluster(c) {
    const body = $('cluster-body');
    if (!c.enabled) {
      set('kpi-members', 1, 'single');
      $('kpi-cluster-sub').textContent = 'not in a cluster (no --cluster-bind)';
      const tr = document.createElement('tr');
      cell(tr, 'not in a cluster', 'muted').colSpan = 5;
      body.replaceChildren(tr);
      $('cluster-summary').textContent = '';
      $('node').textContent = '';
      return;
    }
    const members = c.members || [];
    const alive = members.filter((m) => m.state === 'alive').length;
    set('kpi-members', members.length, fmtInt(alive) + ' / ' + fmtInt(members.length) + ' alive');
    const dropped = Object.values((c.routes && c.routes.dropped) || {}).reduce((a, b) => a + b, 0);
    $('kpi-cluster-sub').textContent = 'lag p99 ' + fmtSec(c.lag ? c.lag.p99_ms / 1000 : null) + ' · ' + fmtInt(dropped) + ' routes dropped';
    $('node').textContent = 'node ' + (c.node || '') + (c.encrypted ? ' (encrypted)' : '');
    const rows = members.map((m) => {
      const tr = document.createElement('tr');
      cell(tr, m.name + (m.self ? ' (this router)' : ''));
      const st = cell(tr, '');
      const badge = document.createElement('span');
      badge.className = 'badge ' + (m.state === 'alive' ? 'ok' : m.state === 'suspect' ? 'warn' : 'bad');
      badge.textContent = m.state;
      st.appendChild(badge);
      cell(tr, m.self ? '–' : m.last_contact_ms < 0 ? 'never' : fmtSec(m.last_contact_ms / 1000) + ' ago', 'n');
      cell(tr, m.self ? '–' : fmtInt(m.in_flight), 'n');
      cell(tr, m.self ? '–' : fmtInt(m.routes_received), 'n');
      return tr;
    });
    body.replaceChildren(...rows);
    const r = c.routes || {};
    $('cluster-summary').textContent = 'routes sent ' + fmtInt(r.sent) + ', received ' + fmtInt(r.received) +
      ', dropped ' + fmtInt(dropped) + ' · lag p50 ' + fmtSec(c.lag ? c.lag.p50_ms / 1000 : null) +
      ', p99 ' + fmtSec(c.lag ? c.lag.p99_ms / 1000 : null) + ' · queue ' + fmtInt(c.queue_depth);
  }

  // ---- charts ---------------------------------------------------------

  function cssVar(name) { return getComputedStyle(document.documentElement).getPropertyValue(name).trim(); }
  const palette = () => ['--c1', '--c2', '--c3', '--c4', '--c5', '--c6'].map(cssVar);

  function legend(id, series) {
    const el = $(id);
    el.replaceChildren(...series.map((s) => {
      const span = document.createElement('span');
      const i = document.createElement('i');
      i.style.background = s.dash ? 'repeating-linear-gradient(90deg, ' + s.color + ' 0 3px, transparent 3px 5px)' : s.color;
      span.appendChild(i);
      span.appendChild(document.createTextNode(s.label));
      return span;
    }));
  }

  // drawChart draws series ({label, color, points: [[t, v|null]]}) over
  // the last minute to historySec seconds (as much as the history holds); fmt labels the y axis; yMax fixes its top.
  function drawChart(canvas, series, fmt, yMax) {
    const dpr = window.devicePixelRatio || 1;
    const w = canvas.clientWidth, h = canvas.clientHeight;
    if (w === 0 || h === 0) return;
    if (canvas.width !== Math.round(w * dpr) || canvas.height !== Math.round(h * dpr)) {
      canvas.width = Math.round(w * dpr);
      canvas.height = Math.round(h * dpr);
    }
    const ctx = canvas.getContext('2d');
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    ctx.clearRect(0, 0, w, h);
    const padL = 52, padR = 6, padT = 6, padB = 16;
    const now = pts.length ? pts[pts.length - 1].t : 0;
    // The time axis grows with the history, from 1 minute to historySec.
    const span = pts.length ? now - pts[0].t : 0;
    const win = [60, 120, 180, 300].find((v) => v >= span) || historySec;
    const t0 = now - win;
    let top = yMax || 0;
    if (!yMax) {
      for (const s of series) for (const [t, v] of s.points) if (t >= t0 && v !== null && v > top) top = v;
      top = niceTop(top);
    }
    const x = (t) => padL + ((t - t0) / win) * (w - padL - padR);
    const y = (v) => padT + (1 - v / top) * (h - padT - padB);
    ctx.font = '10px system-ui, sans-serif';
    ctx.lineWidth = 1;
    ctx.strokeStyle = cssVar('--grid');
    ctx.fillStyle = cssVar('--muted');
    ctx.textAlign = 'right';
    ctx.textBaseline = 'middle';
    for (let i = 0; i <= 4; i++) {
      const v = (top * i) / 4;
      const yy = Math.round(y(v)) + 0.5;
      ctx.beginPath(); ctx.moveTo(padL, yy); ctx.lineTo(w - padR, yy); ctx.stroke();
      ctx.fillText(fmt(v), padL - 4, yy);
    }
    ctx.textAlign = 'center';
    ctx.textBaseline = 'top';
    const step = win <= 60 ? 15 : win <= 180 ? 30 : 60;
    for (let a = 0; a <= win; a += step) {
      const label = a === 0 ? 'now' : a % 60 === 0 ? '−' + a / 60 + ' min' : '−' + a + ' s';
      ctx.fillText(label, Math.min(Math.max(x(now - a), padL + 16), w - padR - 16), h - padB + 3);
    }
    ctx.lineWidth = 1.6;
    for (const s of series) {
      ctx.strokeStyle = s.color;
      ctx.setLineDash(s.dash ? [5, 3] : []);
      ctx.beginPath();
      let pen = false;
      for (const [t, v] of s.points) {
        if (t < t0 || v === null || !isFinite(v)) { pen = false; continue; }
        const xx = x(t), yy = y(Math.min(v, top));
        if (pen) ctx.lineTo(xx, yy); else ctx.moveTo(xx, yy);
        pen = true;
      }
      ctx.stroke();
    }
    ctx.setLineDash([]);
    if (!series.some((s) => s.points.some(([t, v]) => t >= t0 && v !== null))) {
      ctx.fillStyle = cssVar('--muted');
      ctx.textBaseline = 'middle';
      ctx.fillText('no data yet', (padL + w) / 2, h / 2);
    }
  }
  function niceTop(v) {
    if (!(v > 0)) return 1;
    const e = Math.pow(10, Math.floor(Math.log10(v)));
    for (const m of [1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6, 8, 10]) if (m * e >= v) return m * e;
    return 10 * e;
  }

  // each returns, for every point of the history, [t, f(index)]
  function along(f) {
    const out = [];
    for (let i = 0; i < pts.length; i++) out.push([pts[i].t, f(i)]);
    return out;
  }
  function stepRate(f) { return along((i) => (i === 0 ? null : rate(f, 0, i))); }

  function renderCharts() {
    const c = palette();
    const req = [
      { label: 'requests/s', color: c[0], points: stepRate((x) => x.req) },
      { label: '5xx/s', color: c[1], points: stepRate((x) => x.err) },
    ];
    legend('legend-req', req);
    drawChart($('chart-req'), req, (v) => fmtNum(v));

    const win = (f, i) => delta(f, chartQuantileSec, i);
    const ratio = (num) => (i) => {
      const dp = i === 0 ? null : win((x) => x.prompt, i);
      return dp > 0 ? win(num, i) / dp : null;
    };
    const hit = [
      { label: 'predicted (route table)', color: c[3], dash: true, points: along(ratio((x) => x.predicted)) },
      { label: 'actual (engine cached)', color: c[2], points: along(ratio((x) => x.actual)) },
    ];
    legend('legend-hit', hit);
    drawChart($('chart-hit'), hit, (v) => (v * 100).toFixed(0) + ' %', 1);

    const q = (qq, f) => along((i) => {
      if (i === 0) return null;
      const b = base(chartQuantileSec, i);
      const h = histDelta(f(pts[i]), b ? f(b) : null);
      return h && h.counts[h.counts.length - 1] > 0 ? quantile(qq, h) : null;
    });
    const lat = [
      { label: 'TTFT p50', color: c[0], points: q(0.5, (x) => x.ttft) },
      { label: 'TTFT p99', color: c[1], points: q(0.99, (x) => x.ttft) },
      { label: 'TTFB p50', color: c[2], points: q(0.5, (x) => x.ttfb) },
      { label: 'TTFB p99', color: c[3], points: q(0.99, (x) => x.ttfb) },
    ];
    legend('legend-lat', lat);
    drawChart($('chart-lat'), lat, fmtSec);

    const labels = new Set();
    for (const p of pts) for (const k of Object.keys(p.inflight)) labels.add(k);
    const names = {};
    for (const b of (lastData && lastData.backends) || []) names[b.url] = b.name || b.url;
    const inflight = [...labels].sort().map((k, j) => ({
      label: names[k] || k,
      color: c[j % c.length],
      points: along((i) => (k in pts[i].inflight ? pts[i].inflight[k] : null)),
    }));
    legend('legend-inflight', inflight);
    drawChart($('chart-inflight'), inflight, (v) => fmtNum(v));
  }

  // ---- polling --------------------------------------------------------

  let lastData = null;

  function status(text, cls) {
    const s = $('status');
    s.textContent = text;
    s.className = 'status ' + cls;
  }

  async function poll() {
    timer = 0;
    const ctl = new AbortController();
    const to = setTimeout(() => ctl.abort(), 5000);
    inflightReq = ctl;
    let next = pollMs;
    try {
      const headers = { Accept: 'application/json' };
      const t = token();
      if (t) headers.Authorization = 'Bearer ' + t;
      const r = await fetch('/admin/dashboard.json', { headers, cache: 'no-store', signal: ctl.signal, credentials: 'omit' });
      if (r.status === 401) {
        document.body.dataset.state = 'unauthorized';
        status('401 unauthorized', 'bad');
        showAuth(t ? 'The admin token was refused (401): enter the token saltus serve was given with --admin-token.'
          : 'This admin listener needs its token (401): enter the token saltus serve was given with --admin-token.');
        return; // polling resumes when a token is entered
      }
      if (!r.ok) throw new Error('HTTP ' + r.status);
      const d = await r.json();
      $('auth').hidden = true;
      lastData = d;
      const p = point(d);
      if (pts.length && p.t <= pts[pts.length - 1].t) pts.pop(); // a clock step back: keep order
      pts.push(p);
      while (pts.length > maxPoints || (pts.length > 1 && p.t - pts[0].t > historySec + 5)) pts.shift();
      render(d);
      failures = 0;
      document.body.dataset.state = 'ok';
      document.body.dataset.polls = String(Number(document.body.dataset.polls || 0) + 1);
      status('live', 'ok');
      $('updated').textContent = 'updated ' + new Date(d.time_ms).toLocaleTimeString() + ' · every ' + pollMs / 1000 + ' s';
    } catch (e) {
      failures++;
      document.body.dataset.state = 'error';
      status('no answer: ' + (e && e.name === 'AbortError' ? 'timed out' : (e && e.message) || e), failures > 2 ? 'bad' : 'warn');
      next = Math.min(pollMs * Math.pow(2, failures), 10000); // back off while the admin listener is away
    } finally {
      clearTimeout(to);
      inflightReq = null;
    }
    timer = setTimeout(poll, next);
  }

  function restart() {
    if (timer) clearTimeout(timer);
    if (inflightReq) inflightReq.abort();
    timer = setTimeout(poll, 0);
  }

  function init() {
    takeFragmentToken();
    $('token-form').addEventListener('submit', (ev) => {
      ev.preventDefault();
      const t = $('token-input').value.trim();
      $('token-input').value = '';
      setToken(t);
      $('auth').hidden = true;
      status('connecting…', 'warn');
      restart();
    });
    $('token-button').addEventListener('click', () => showAuth('Enter the admin token (saltus serve --admin-token).'));
    window.addEventListener('resize', () => { if (pts.length) renderCharts(); });
    window.addEventListener('hashchange', () => { takeFragmentToken(); restart(); });
    poll();
  }

  if (document.readyState === 'loading') document.addEventListener('DOMContentLoaded', init);
  else init();
})();

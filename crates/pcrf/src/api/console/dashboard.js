// The live dashboard: polls GET /v1/stats every 2 s, keeps the last two
// minutes of snapshots, and draws rates, latency percentiles, Apdex,
// sessions, peers, store and policy figures from their differences, and
// the policy versions (a rollout's canary and stable) side by side.
'use strict';

const POLL_MS = 2000;
const KEEP = 61; // snapshots: two minutes at one per 2 s
const WINDOW = 5; // snapshots back for percentiles and Apdex (about 10 s)
const APDEX_T = 0.005; // seconds; tolerating up to 4 T (as pcrf-bench's default)

const APP_OF = {
  'CCR-I': 'Gx', 'CCR-U': 'Gx', 'CCR-T': 'Gx', 'CCR-E': 'Gx', RAR: 'Gx',
  AAR: 'Rx', STR: 'Rx', ASR: 'Rx',
  'SD-CCR': 'Sd', TSR: 'Sd', 'SD-RAR': 'Sd',
  SLR: 'Sy', SNR: 'Sy',
  CER: 'base', DWR: 'base', DPR: 'base',
};
const APPS = ['Gx', 'Rx', 'Sd', 'Sy', 'base'];
const RESULT_NAMES = {
  2001: 'SUCCESS', 2002: 'LIMITED_SUCCESS', 3002: 'UNABLE_TO_DELIVER', 3004: 'TOO_BUSY',
  5002: 'UNKNOWN_SESSION_ID', 5003: 'AUTHORIZATION_REJECTED', 5005: 'MISSING_AVP',
  5012: 'UNABLE_TO_COMPLY', 5030: 'USER_UNKNOWN', 5065: 'IP-CAN_SESSION_NOT_AVAILABLE',
  5140: 'NO_ASSOCIATED_IP-CAN_SESSION', none: 'no answer',
};

const history = [];

function samples(snap, name) {
  return (snap && snap.metrics[name]) || [];
}

// Sum of a family's samples grouped by `key(labels)` (null drops a sample).
function grouped(snap, name, key) {
  const out = {};
  for (const s of samples(snap, name)) {
    const k = key(s.labels);
    if (k === null || k === undefined || s.value === null) continue;
    out[k] = (out[k] || 0) + s.value;
  }
  return out;
}

function total(snap, name, filter) {
  return samples(snap, name)
    .filter((s) => !filter || filter(s.labels))
    .reduce((a, s) => a + (s.value || 0), 0);
}

// Per-second rate series of grouped counters over the history.
function rateSeries(name, key, groups) {
  const series = {};
  for (const g of groups) series[g] = [];
  for (let i = 1; i < history.length; i += 1) {
    const a = history[i - 1];
    const b = history[i];
    const dt = (b.at_ms - a.at_ms) / 1000;
    const ga = grouped(a, name, key);
    const gb = grouped(b, name, key);
    for (const g of groups) {
      const d = (gb[g] || 0) - (ga[g] || 0);
      series[g].push([b.at_ms, dt > 0 && d >= 0 ? d / dt : null]);
    }
  }
  return groups.map((g) => ({ name: g, points: series[g] }));
}

// Cumulative bucket counts of one command (or of the series of `family`
// whose `label` is `value`): [[le, count], ...] ascending.
function buckets(snap, command, family = 'pcrf_request_duration_seconds_bucket', label = 'command') {
  return samples(snap, family)
    .filter((s) => s.labels[label] === command)
    .map((s) => [s.labels.le === '+Inf' ? Infinity : Number(s.labels.le), s.value || 0])
    .sort((x, y) => x[0] - y[0]);
}

function bucketDelta(newer, older, command, family, label) {
  const b = buckets(newer, command, family, label);
  const a = older ? buckets(older, command, family, label) : [];
  return b.map(([le, n], i) => [le, n - (a[i] ? a[i][1] : 0)]);
}

// How many observations were at most `x`, interpolating inside a bucket.
function countBelow(cum, x) {
  let prevLe = 0;
  let prevN = 0;
  for (const [le, n] of cum) {
    if (x <= le) {
      if (le === Infinity) return prevN;
      return prevN + ((n - prevN) * (x - prevLe)) / (le - prevLe);
    }
    prevLe = le;
    prevN = n;
  }
  return prevN;
}

// The q-quantile (seconds), as Prometheus' histogram_quantile reads buckets.
function quantile(cum, q) {
  const all = cum.length ? cum[cum.length - 1][1] : 0;
  if (!all) return null;
  const target = q * all;
  let prevLe = 0;
  let prevN = 0;
  for (const [le, n] of cum) {
    if (n >= target) {
      if (le === Infinity) return prevLe;
      return n === prevN ? le : prevLe + ((le - prevLe) * (target - prevN)) / (n - prevN);
    }
    prevLe = le;
    prevN = n;
  }
  return prevLe;
}

function apdex(cum) {
  const all = cum.length ? cum[cum.length - 1][1] : 0;
  if (!all) return null;
  return (countBelow(cum, APDEX_T) + countBelow(cum, 4 * APDEX_T)) / (2 * all);
}

function commandsSeen(snap) {
  const seen = new Set(samples(snap, 'pcrf_requests_total').map((s) => s.labels.command));
  return Object.keys(APP_OF).filter((c) => seen.has(c));
}

function gauge(snap, name, filter) {
  return total(snap, name, filter);
}

function sessionsSeries() {
  const apps = [
    ['Gx', 'pcrf_sessions', (l) => l.state === 'open'],
    ['Rx', 'pcrf_rx_sessions'],
    ['Sd', 'pcrf_sd_sessions'],
    ['Sy', 'pcrf_sy_sessions'],
  ];
  return apps.map(([name, family, filter]) => ({
    name,
    points: history.map((h) => [h.at_ms, samples(h, family).length ? gauge(h, family, filter) : null]),
  }));
}

// Store commits per 100 application transactions between snapshots.
function commitsSeries() {
  const points = [];
  for (let i = 1; i < history.length; i += 1) {
    const a = history[i - 1];
    const b = history[i];
    const tx = (s) => total(s, 'pcrf_requests_total', (l) => APP_OF[l.command] && APP_OF[l.command] !== 'base');
    const dTx = tx(b) - tx(a);
    const dC = total(b, 'pcrf_store_commits_total') - total(a, 'pcrf_store_commits_total');
    points.push([b.at_ms, dTx > 0 ? (100 * dC) / dTx : null]);
  }
  return [{ name: 'commits per 100 transactions', points }];
}

function policySeries() {
  const fams = [
    ['Lua runs', 'pcrf_policy_runs_total'],
    ['memo hits', 'pcrf_policy_skips_total'],
    ['fallbacks', 'pcrf_policy_fallbacks_total'],
  ];
  return fams.map(([name, family]) => rateSeries(family, () => name, [name])[0]);
}

function latencySeries(commands) {
  return commands.map((c) => {
    const points = [];
    for (let i = 1; i < history.length; i += 1) {
      const q = quantile(bucketDelta(history[i], history[i - 1], c), 0.99);
      points.push([history[i].at_ms, q === null ? null : q * 1000]);
    }
    return { name: c + ' p99', points };
  });
}

function commandTable(now, commands) {
  const older = history[Math.max(0, history.length - 1 - WINDOW)];
  const prev = history.length > 1 ? history[history.length - 2] : null;
  const perCommand = grouped(now, 'pcrf_requests_total', (l) => l.command);
  const perCommandPrev = prev ? grouped(prev, 'pcrf_requests_total', (l) => l.command) : {};
  const dt = prev ? (now.at_ms - prev.at_ms) / 1000 : 0;
  const rows = commands.map((c) => {
    let cum = older !== now ? bucketDelta(now, older, c) : [];
    let scope = 'last 10 s';
    if (!cum.length || !cum[cum.length - 1][1]) {
      cum = bucketDelta(now, null, c);
      scope = 'since start';
    }
    const p50 = quantile(cum, 0.5);
    const p99 = quantile(cum, 0.99);
    const a = apdex(cum);
    const rate = dt > 0 ? ((perCommand[c] || 0) - (perCommandPrev[c] || 0)) / dt : null;
    return {
      attrs: { 'data-command': c },
      cells: [c, APP_OF[c], fmtNum(rate, 1), fmtNum(perCommand[c] || 0),
        p50 === null ? '—' : fmtNum(p50 * 1000, 2), p99 === null ? '—' : fmtNum(p99 * 1000, 2),
        a === null ? '—' : a.toFixed(2), el('span', { class: 'muted', text: scope })],
    };
  });
  return table(['command', 'application', 'req/s', 'total', 'p50 ms', 'p99 ms', `Apdex [${APDEX_T * 1000} ms]`, 'window'], rows, { id: 'commands' });
}

// The stored policy versions side by side (a rollout's canary beside its
// stable version): decisions, fallbacks, error answers and the latency of
// the Gx requests each decided, over the last 10 s or since start.
function versionTable(now) {
  const older = history[Math.max(0, history.length - 1 - WINDOW)];
  const decisions = grouped(now, 'pcrf_policy_version_decisions_total', (l) => l.version);
  const fallbacks = grouped(now, 'pcrf_policy_version_fallbacks_total', (l) => l.version);
  const errors = grouped(now, 'pcrf_policy_version_errors_total', (l) => l.version);
  const family = 'pcrf_policy_version_request_duration_seconds_bucket';
  const canary = gauge(now, 'pcrf_policy_canary_version');
  const serving = gauge(now, 'pcrf_policy_version');
  const rows = Object.keys(decisions).sort((a, b) => Number(b) - Number(a)).map((v) => {
    let cum = older !== now ? bucketDelta(now, older, v, family, 'version') : [];
    let scope = 'last 10 s';
    if (!cum.length || !cum[cum.length - 1][1]) {
      cum = bucketDelta(now, null, v, family, 'version');
      scope = 'since start';
    }
    const p50 = quantile(cum, 0.5);
    const p99 = quantile(cum, 0.99);
    const a = apdex(cum);
    const role = Number(v) === canary ? 'canary' : Number(v) === serving ? 'serving' : 'earlier';
    return {
      attrs: { 'data-version': v },
      cells: [v, role, fmtNum(decisions[v] || 0), fmtNum(fallbacks[v] || 0), fmtNum(errors[v] || 0),
        p50 === null ? '—' : fmtNum(p50 * 1000, 2), p99 === null ? '—' : fmtNum(p99 * 1000, 2),
        a === null ? '—' : a.toFixed(2), el('span', { class: 'muted', text: scope })],
    };
  });
  return rows.length
    ? table(['version', '', 'decisions', 'fallbacks', 'error answers', 'p50 ms', 'p99 ms', `Apdex [${APDEX_T * 1000} ms]`, 'window'], rows, { id: 'versions' })
    : el('p', { class: 'muted', text: 'no decision yet' });
}

function peersTable(now) {
  const state = samples(now, 'pcrf_peer_state');
  const msgs = samples(now, 'pcrf_peer_messages_total');
  const inFlight = grouped(now, 'pcrf_peer_in_flight', (l) => l.peer);
  const count = (peer, dir) => {
    const s = msgs.find((m) => m.labels.peer === peer && m.labels.direction === dir);
    return s ? s.value : 0;
  };
  const shed = grouped(now, 'pcrf_overload_shed_total', (l) => l.class);
  const rows = state.map((s) => ({
    attrs: { 'data-peer': s.labels.peer },
    cells: [s.labels.peer, el('span', { class: 'state state-' + s.labels.state, text: s.labels.state }),
      doicCell(now, s.labels.peer),
      fmtNum(count(s.labels.peer, 'in')), fmtNum(count(s.labels.peer, 'out')), fmtNum(inFlight[s.labels.peer] || 0)],
  }));
  return [
    rows.length ? table(['peer', 'state', 'DOIC', 'messages in', 'messages out', 'in flight'], rows, { id: 'peers' })
      : el('p', { class: 'muted', text: 'no Diameter peer' }),
    el('p', { class: 'muted' },
      'DOIC: requests shed with 3004 (an OC-OLR goes to peers that sent OC-Supported-Features): new ',
      el('b', { text: fmtNum(shed.new || 0) }), ', existing ', el('b', { text: fmtNum(shed.existing || 0) }),
      '; Gx in flight ', el('b', { text: fmtNum(gauge(now, 'pcrf_gx_in_flight')) }), '.'),
  ];
}

function errorsChart(now) {
  const byCode = grouped(now, 'pcrf_requests_total', (l) => (l.result_code === '2001' || l.result_code === '2002' ? null : l.result_code));
  const items = Object.entries(byCode)
    .filter(([, v]) => v > 0)
    .sort((a, b) => b[1] - a[1])
    .map(([code, v]) => ({ label: RESULT_NAMES[code] ? `${code} ${RESULT_NAMES[code]}` : code, value: v }));
  return barChart(items, { empty: 'no error answers since start' });
}

function render() {
  const now = history[history.length - 1];
  if (!now) return;
  const commands = commandsSeen(now);
  const version = samples(now, 'pcrf_policy_script_info')[0];
  const build = samples(now, 'pcrf_build_info')[0];
  const start = samples(now, 'pcrf_start_time_seconds')[0];
  fill('summary',
    el('span', {}, 'version ', el('b', { text: build ? build.labels.version : '?' })),
    el('span', {}, 'up since ', el('b', { text: start ? fmtTime(start.value * 1000) : '?' })),
    el('span', {}, 'policy ', el('b', { text: version ? version.labels.version : '?' })),
    el('span', {}, 'subscribers ', el('b', { text: fmtNum(gauge(now, 'pcrf_subscribers_cached')) })),
    el('span', { id: 'updated' }, 'updated ', el('b', { text: new Date(now.at_ms).toLocaleTimeString() })));
  fill('rps', lineChart(rateSeries('pcrf_requests_total', (l) => APP_OF[l.command] || null, APPS), { unit: '/s', title: 'requests per second by application' }));
  fill('commands-card', commandTable(now, commands));
  fill('versions-card', versionTable(now));
  fill('latency', lineChart(latencySeries(commands.filter((c) => APP_OF[c] !== 'base')), { unit: 'ms', title: 'p99 latency by command' }));
  fill('sessions', lineChart(sessionsSeries(), { title: 'open sessions by application' }));
  fill('peers-card', peersTable(now));
  fill('commits', lineChart(commitsSeries(), { title: 'store commits per 100 transactions' }));
  fill('policy', lineChart(policySeries(), { unit: '/s', title: 'policy runs, memo hits, fallbacks' }));
  fill('errors', errorsChart(now));
}

function layout() {
  const main = document.getElementById('main');
  append(main, [
    el('p', { id: 'summary', class: 'summary' }),
    el('div', { class: 'grid' },
      section('Requests per second by application', el('div', { id: 'rps' })),
      section('Latency p99 by command (ms)', el('div', { id: 'latency' })),
      el('section', { class: 'card wide' }, el('h2', { text: 'Per command' }), el('div', { id: 'commands-card', class: 'scroll' })),
      el('section', { class: 'card wide' }, el('h2', { text: 'Per policy version (Gx requests each decided)' }), el('div', { id: 'versions-card', class: 'scroll' })),
      section('Open sessions by application', el('div', { id: 'sessions' })),
      section('Diameter peers', el('div', { id: 'peers-card', class: 'scroll' })),
      section('Store commits per 100 transactions', el('div', { id: 'commits' })),
      section('Policy: Lua runs, memo hits, fallbacks per second', el('div', { id: 'policy' })),
      section('Error answers by Result-Code (since start)', el('div', { id: 'errors' }))),
  ]);
}

async function poll() {
  try {
    const snap = await api('GET', '/v1/stats');
    history.push(snap);
    while (history.length > KEEP) history.shift();
    status('');
    render();
  } catch (e) {
    status(e.status === 401 ? 'The API needs its token: type it above.' : 'Cannot read /v1/stats: ' + e.message, 'bad');
  }
}

layout();
every(POLL_MS, poll);
document.addEventListener('pcrf-token', poll);

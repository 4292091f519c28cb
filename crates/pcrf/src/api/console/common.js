// What every console page shares: the API token (typed once, kept in this
// tab's sessionStorage, sent as a bearer header, never a cookie), JSON calls
// to /v1, DOM building that only ever sets text (data from provisioning or
// the network is never parsed as HTML), the confirmation dialog, formatting.
'use strict';

const TOKEN_KEY = 'pcrf-console-token';

function token() {
  return sessionStorage.getItem(TOKEN_KEY) || '';
}

// An element with attributes and children. Strings become text nodes;
// `text` sets textContent; functions under `on*` become listeners.
function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  setAttrs(node, attrs);
  append(node, children);
  return node;
}

function setAttrs(node, attrs) {
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k === 'text') node.textContent = String(v);
    else if (k.startsWith('on') && typeof v === 'function') node.addEventListener(k.slice(2), v);
    else node.setAttribute(k, v === true ? '' : String(v));
  }
}

function append(node, children) {
  for (const c of children.flat(Infinity)) {
    if (c === null || c === undefined || c === false) continue;
    node.appendChild(c instanceof Node ? c : document.createTextNode(String(c)));
  }
}

function clear(node) {
  while (node.firstChild) node.removeChild(node.firstChild);
  return node;
}

// Replaces the content of the element with id `id`.
function fill(id, ...children) {
  const node = document.getElementById(id);
  if (!node) return null;
  clear(node);
  append(node, children);
  return node;
}

class ApiError extends Error {
  constructor(status, message, line) {
    super(message);
    this.status = status;
    this.line = line;
  }
}

// Calls the JSON API. Throws ApiError with the server's message (and the
// script line of a refused policy) on any non-2xx answer.
async function api(method, path, body) {
  const headers = { Accept: 'application/json' };
  const t = token();
  if (t) headers.Authorization = 'Bearer ' + t;
  const init = { method, headers, credentials: 'omit', cache: 'no-store' };
  // The API refuses a change without this header, also without a body:
  // it is what a form on another site cannot send.
  if (method !== 'GET' && method !== 'HEAD') headers['Content-Type'] = 'application/json';
  if (body !== undefined) init.body = JSON.stringify(body);
  const r = await fetch(path, init);
  const text = await r.text();
  let data = null;
  try {
    data = text ? JSON.parse(text) : null;
  } catch (_) {
    data = { error: text };
  }
  if (r.status === 401) tokenState('token needed', 'bad');
  if (!r.ok) {
    throw new ApiError(r.status, (data && data.error) || r.statusText, data && data.line);
  }
  return data;
}

function tokenState(text, kind) {
  const s = document.getElementById('token-state');
  if (!s) return;
  s.textContent = text;
  s.className = kind || 'muted';
}

function setupToken() {
  const form = document.getElementById('token-form');
  const input = document.getElementById('token');
  if (!form || !input) return;
  tokenState(token() ? 'token set' : 'no token');
  form.addEventListener('submit', (e) => {
    e.preventDefault();
    if (input.value) sessionStorage.setItem(TOKEN_KEY, input.value);
    else sessionStorage.removeItem(TOKEN_KEY);
    input.value = '';
    tokenState(token() ? 'token set' : 'no token');
    document.dispatchEvent(new Event('pcrf-token'));
  });
}

function status(text, kind) {
  const s = document.getElementById('status');
  if (!s) return;
  s.textContent = text || '';
  s.className = kind || 'muted';
}

// Asks before an action; resolves true when confirmed.
function confirmAction(text, detail) {
  const dialog = document.getElementById('confirm');
  fill('confirm-text', text);
  fill('confirm-detail', detail || '');
  document.getElementById('confirm-detail').hidden = !detail;
  return new Promise((resolve) => {
    dialog.addEventListener('close', () => resolve(dialog.returnValue === 'ok'), { once: true });
    dialog.returnValue = '';
    dialog.showModal();
  });
}

function fmtNum(n, digits) {
  if (n === null || n === undefined || Number.isNaN(n)) return '—';
  const d = digits === undefined ? (Math.abs(n) < 10 && n % 1 !== 0 ? 2 : 0) : digits;
  return n.toLocaleString('en-US', { maximumFractionDigits: d, minimumFractionDigits: 0 });
}

function fmtBytes(n) {
  if (n === null || n === undefined) return '—';
  const units = ['B', 'kB', 'MB', 'GB', 'TB', 'PB'];
  let i = 0;
  let v = n;
  while (Math.abs(v) >= 1000 && i < units.length - 1) {
    v /= 1000;
    i += 1;
  }
  return fmtNum(v, i === 0 ? 0 : 2) + ' ' + units[i];
}

function fmtTime(ms) {
  if (!ms && ms !== 0) return '—';
  return new Date(ms).toISOString().replace('T', ' ').replace(/\.\d+Z$/, ' UTC');
}

// A peer's DOIC state (RFC 7683) from a /v1/stats snapshot: "no" when its
// requests carry no OC-Supported-Features, "yes" when they do, with the
// overload report this node sends it while there is one.
function doicCell(snap, peer) {
  const of = (family) => {
    const s = (snap.metrics[family] || []).find((x) => x.labels.peer === peer);
    return s ? s.value : null;
  };
  if (!of('pcrf_peer_doic_supported')) return el('span', { class: 'muted doic', text: 'no' });
  const sequence = of('pcrf_peer_doic_sequence');
  if (sequence === null) return el('span', { class: 'doic', text: 'yes' });
  const reduction = of('pcrf_peer_doic_reduction_percent');
  const validity = of('pcrf_peer_doic_validity_seconds');
  const report = validity ? `reduce ${fmtNum(reduction)}% for ${fmtNum(Math.ceil(validity))} s` : 'overload ended';
  return el('span', { class: 'doic' }, 'yes · ', el('b', { class: 'warn', text: report }),
    el('span', { class: 'muted', text: ` (seq ${sequence})` }));
}

// A table from a header row and rows of cells (strings or nodes), in a box
// that scrolls sideways on a narrow screen instead of the whole page.
function table(headers, rows, attrs) {
  return el('div', { class: 'scroll' }, el('table', attrs || {},
    el('thead', {}, el('tr', {}, headers.map((h) => el('th', { text: h })))),
    el('tbody', {}, rows.map((r) => el('tr', r.attrs || {}, (r.cells || r).map((c) => el('td', {}, c)))))));
}

function section(title, ...children) {
  return el('section', { class: 'card' }, el('h2', { text: title }), children);
}

function pre(value) {
  return el('pre', { text: typeof value === 'string' ? value : JSON.stringify(value, null, 2) });
}

// Runs `tick` now and every `ms`, skipping a beat while one is running.
function every(ms, tick) {
  let busy = false;
  const run = async () => {
    if (busy) return;
    busy = true;
    try {
      await tick();
    } finally {
      busy = false;
    }
  };
  run();
  return setInterval(run, ms);
}

setupToken();

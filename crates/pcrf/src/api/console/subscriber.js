// The subscriber page: search by IMSI, MSISDN or UE address (server-side,
// a page at a time), then one subscriber: the profile with an edit form,
// usage against quotas with top-up, the open sessions (Gx, and N7 PDU
// sessions with the SMF's context) with their bound Rx and Sd sessions
// and the last decision explained, the last decisions read back from the
// decision log with the policy version of each, and the actions
// (re-authorize, terminate, top up), each confirmed first.
'use strict';

const DECISIONS_SHOWN = 20;

let current = null; // IMSI shown
let pageCursors = [null]; // `after` of each page seen
let lastQuery = '';
let lastAction = ''; // outcome of the last session action, kept across refreshes

function layout() {
  append(document.getElementById('main'), [
    el('form', { id: 'search-form', class: 'search' },
      el('input', { id: 'q', type: 'search', placeholder: 'IMSI, MSISDN or UE address', 'aria-label': 'search', autocomplete: 'off' }),
      el('button', { type: 'submit', text: 'Search' })),
    el('div', { id: 'results' }),
    el('div', { id: 'subscriber' }),
  ]);
  document.getElementById('search-form').addEventListener('submit', (e) => {
    e.preventDefault();
    lastQuery = document.getElementById('q').value.trim();
    pageCursors = [null];
    search(0);
  });
}

async function search(page) {
  const params = new URLSearchParams({ q: lastQuery, limit: '20' });
  if (pageCursors[page]) params.set('after', pageCursors[page]);
  try {
    const res = await api('GET', '/v1/subscribers?' + params.toString());
    if (res.next) pageCursors[page + 1] = res.next;
    const rows = res.subscribers.map((s) => ({
      attrs: { class: 'clickable', 'data-imsi': s.imsi },
      cells: [el('a', {
        href: '#' + encodeURIComponent(s.imsi),
        text: s.imsi,
        onclick: (e) => {
          e.preventDefault();
          show(s.imsi);
        },
      }), s.msisdn || '—', s.plan || '—', fmtNum(s.sessions), s.provisioned ? 'yes' : 'no'],
    }));
    fill('results',
      el('p', { class: 'muted', text: `${res.subscribers.length} shown (matched by ${res.matched_by})` }),
      rows.length ? table(['IMSI', 'MSISDN', 'plan', 'open sessions', 'provisioned'], rows, { id: 'result-table' }) : null,
      el('div', { class: 'pager' },
        page > 0 ? el('button', { type: 'button', text: '← previous', onclick: () => search(page - 1) }) : null,
        res.next ? el('button', { type: 'button', id: 'next-page', text: 'next →', onclick: () => search(page + 1) }) : null));
    if (res.subscribers.length === 1) show(res.subscribers[0].imsi);
  } catch (e) {
    fill('results', el('p', { class: 'bad', text: 'Search failed: ' + e.message }));
  }
}

function profileCard(p) {
  const attrs = Object.entries(p.attributes || {}).map(([k, v]) => [k, typeof v === 'string' ? v : JSON.stringify(v)]);
  const quotas = Object.entries(p.quotas || {}).map(([k, v]) => [k, fmtBytes(v)]);
  const form = el('form', { id: 'profile-form', class: 'stack' },
    el('label', {}, 'MSISDN', el('input', { name: 'msisdn', value: p.msisdn || '' })),
    el('label', {}, 'Plan', el('input', { name: 'plan', value: p.plan || '' })),
    el('label', {}, 'Services (comma-separated)', el('input', { name: 'services', value: (p.services || []).join(', ') })),
    el('label', {}, 'Billing day', el('input', { name: 'billing_day', type: 'number', min: 1, max: 28, value: p.billing_day || '' })),
    el('label', {}, 'Attributes (JSON object)', el('textarea', { name: 'attributes', rows: 3, text: JSON.stringify(p.attributes || {}) })),
    el('label', {}, 'Quotas, octets per period (JSON object)', el('textarea', { name: 'quotas', rows: 2, text: JSON.stringify(p.quotas || {}) })),
    el('button', { type: 'submit', text: 'Save profile' }),
    el('span', { id: 'profile-state', class: 'muted' }));
  form.addEventListener('submit', async (e) => {
    e.preventDefault();
    const f = new FormData(form);
    let body;
    try {
      body = {
        msisdn: f.get('msisdn') || null,
        plan: f.get('plan') || null,
        services: String(f.get('services')).split(',').map((s) => s.trim()).filter(Boolean),
        billing_day: f.get('billing_day') ? Number(f.get('billing_day')) : null,
        attributes: JSON.parse(f.get('attributes') || '{}'),
        quotas: JSON.parse(f.get('quotas') || '{}'),
      };
    } catch (err) {
      fill('profile-state', 'Not JSON: ' + err.message);
      return;
    }
    if (!(await confirmAction(`Save the profile of ${p.imsi}? Its open sessions are re-decided.`, JSON.stringify(body, null, 2)))) return;
    try {
      await api('PUT', '/v1/subscribers/' + encodeURIComponent(p.imsi), body);
      fill('profile-state', 'saved');
      show(p.imsi);
    } catch (err) {
      fill('profile-state', 'Refused: ' + err.message);
    }
  });
  return section('Profile',
    table(['field', 'value'], [
      ['IMSI', p.imsi], ['MSISDN', p.msisdn || '—'], ['plan', p.plan || '—'],
      ['services', (p.services || []).join(', ') || '—'], ['billing day', p.billing_day || 'default'],
    ], { id: 'profile' }),
    el('h3', { text: 'Attributes' }),
    attrs.length ? table(['name', 'value'], attrs, { id: 'attributes' }) : el('p', { class: 'muted', text: 'none' }),
    quotas.length ? [el('h3', { text: 'Quota overrides' }), table(['accumulator', 'per period'], quotas)] : null,
    el('details', {}, el('summary', { text: 'Edit' }), form));
}

function usageCard(u) {
  const names = Object.keys(u.accumulators);
  if (!names.length) return section('Usage', el('p', { class: 'muted', text: 'usage monitoring is off (no usage file)' }));
  const withQuota = names.find((n) => u.accumulators[n].allowance !== null && u.accumulators[n].allowance !== undefined);
  const rows = names.map((name) => {
    const a = u.accumulators[name];
    return {
      attrs: { 'data-accumulator': name },
      cells: [name, meter(a.used, a.allowance), `${fmtBytes(a.used)} of ${a.allowance === null || a.allowance === undefined ? 'no quota' : fmtBytes(a.allowance)}`,
        a.topup ? fmtBytes(a.topup) : '—', a.reset, a.period_end || '—'],
    };
  });
  const form = el('form', { id: 'topup-form', class: 'inline' },
    el('select', { name: 'accumulator', id: 'topup-accumulator', 'aria-label': 'accumulator' },
      names.map((n) => el('option', { value: n, text: n, selected: n === withQuota }))),
    el('input', { name: 'mb', type: 'number', min: 1, value: 1000, 'aria-label': 'megabytes' }), ' MB ',
    el('button', { type: 'submit', id: 'topup', text: 'Top up' }),
    el('span', { id: 'topup-state', class: 'muted' }));
  form.addEventListener('submit', async (e) => {
    e.preventDefault();
    const f = new FormData(form);
    const octets = Math.round(Number(f.get('mb')) * 1e6);
    const acc = String(f.get('accumulator'));
    if (!(await confirmAction(`Top up ${acc} of ${u.subscriber} by ${fmtBytes(octets)}? Its sessions are re-decided at once.`))) return;
    try {
      const r = await api('POST', `/v1/subscribers/${encodeURIComponent(u.subscriber)}/topup`, { accumulator: acc, octets });
      fill('topup-state', `done: ${r.sessions} session(s) re-decided, ${r.rar_sent} RAR sent`);
      await refreshUsage(u.subscriber);
    } catch (err) {
      fill('topup-state', 'Refused: ' + err.message);
    }
  });
  return [table(['accumulator', 'used / allowance', '', 'topped up', 'reset', 'period ends'], rows, { id: 'usage' }), form];
}

async function refreshUsage(imsi) {
  try {
    fill('usage-card', usageCard(await api('GET', `/v1/subscribers/${encodeURIComponent(imsi)}/usage`)));
  } catch (e) {
    fill('usage-card', el('p', { class: 'bad', text: e.message }));
  }
}

function decisionView(d) {
  if (!d) return el('p', { class: 'muted', text: 'no decision recorded' });
  const dec = d.decision || {};
  const qos = [];
  if (dec.apn_ambr) qos.push(['APN-AMBR', `UL ${fmtNum(dec.apn_ambr.ul)} / DL ${fmtNum(dec.apn_ambr.dl)} bit/s`]);
  if (dec.default_bearer_qos) qos.push(['default bearer', JSON.stringify(dec.default_bearer_qos)]);
  if (dec.revalidation_secs) qos.push(['revalidation', dec.revalidation_secs + ' s']);
  if (dec.reject) qos.push(['reject', JSON.stringify(dec.reject)]);
  const rules = [
    ...(dec.rules || []).map((r) => [r, 'predefined']),
    ...(dec.base_names || []).map((r) => [r, 'rule base']),
    ...(dec.definitions || []).map((r) => [r.name, 'dynamic: ' + JSON.stringify(r.qos || {})]),
    ...(dec.adc || []).map((r) => [r.name || JSON.stringify(r), 'ADC (Sd)']),
  ];
  return el('div', { class: 'decision' },
    el('p', {}, 'script ', el('code', { text: d.script_version }), ' at ', fmtTime(d.at_ms), ', inputs hash ', el('code', { text: d.input_hash })),
    rules.length ? table(['rule', 'kind'], rules, { class: 'rules' }) : el('p', { class: 'muted', text: 'no rules' }),
    qos.length ? table(['QoS', 'value'], qos) : null,
    (dec.monitoring || []).length ? el('p', {}, 'monitoring keys: ', dec.monitoring.join(', ')) : null,
    el('details', {}, el('summary', { text: 'Inputs the script saw' }), pre(d.inputs)),
    el('details', {}, el('summary', { text: 'Decision as JSON' }), pre(dec)));
}

function sessionCard(s, imsi) {
  const af = (s.af || []).map((a) => [a.id, a.application || '—', a.af_host, String((a.media || []).length), (a.rules || []).map((r) => r.name).join(', ') || '—']);
  const tdf = s.tdf ? [[s.tdf.id, s.tdf.mode, s.tdf.host, (s.tdf.installed || []).map((r) => r.name || JSON.stringify(r)).join(', ') || '—']] : [];
  const action = (label, cls, ask, run) => el('button', {
    type: 'button', class: cls, text: label,
    onclick: async () => {
      if (!(await confirmAction(ask))) return;
      try {
        const r = await run();
        lastAction = `${label}: ${JSON.stringify(r)}`;
      } catch (e) {
        lastAction = `${label} refused: ${e.message}`;
      }
      show(imsi);
    },
  });
  const id = encodeURIComponent(s.id);
  // A 5G PDU session (N7) carries the SMF's context; a Gx session its PCEF.
  const n7 = s.n7;
  const slice = n7 && n7.sliceInfo ? `SST ${n7.sliceInfo.sst}${n7.sliceInfo.sd ? ' SD ' + n7.sliceInfo.sd : ''}` : '—';
  const where = n7
    ? [['interface', 'N7 (5G PDU session)'], ['SMF', n7.notificationUri || s.pcef_host], ['SUPI', n7.supi || '—'],
      ['PDU session id', String(n7.pduSessionId ?? '—')], ['S-NSSAI', slice],
      ['access / RAT', `${n7.accessType || '—'} / ${n7.ratType || '—'}`]]
    : [['interface', 'Gx (4G IP-CAN session)'], ['PCEF', `${s.pcef_host} (${s.pcef_realm})`],
      ['RAT type', s.rat_type === null || s.rat_type === undefined ? '—' : String(s.rat_type)]];
  const push = n7 ? 'notify the SMF' : 'push the difference in a RAR';
  const end = n7 ? `Tell the SMF at ${n7.notificationUri} to end ${s.id} (terminate notification)?` : `Ask ${s.pcef_host} to end ${s.id} (RAR with Session-Release-Cause)?`;
  return el('article', { class: 'session', 'data-session': s.id, 'data-interface': n7 ? 'n7' : 'gx' },
    el('h3', {}, el('code', { text: s.id })),
    table(['field', 'value'], [
      ...where,
      ['state', s.state], [n7 ? 'DNN' : 'APN', s.apn || '—'], ['UE IPv4', s.ue_ipv4 || '—'], ['UE IPv6 prefix', s.ue_ipv6_prefix || '—'],
      ['installed rules', (s.installed.rules || []).concat((s.installed.definitions || []).map((d) => d.name)).join(', ') || '—'],
    ], { class: 'fields' }),
    el('h4', { text: 'Rx (AF) sessions bound' }),
    af.length ? table(['Rx Session-Id', 'application', 'AF', 'media', 'rules'], af, { class: 'af' }) : el('p', { class: 'muted', text: 'none' }),
    el('h4', { text: 'Sd (TDF) session bound' }),
    tdf.length ? table(['Sd Session-Id', 'mode', 'TDF', 'ADC rules'], tdf) : el('p', { class: 'muted', text: 'none' }),
    el('h4', { text: 'Last decision, explained' }),
    decisionView(s.last_decision),
    el('div', { class: 'actions' },
      action('Re-authorize', '', `Re-decide ${s.id} and ${push}?`, () => api('POST', `/v1/sessions/${id}/reauth`)),
      action('Terminate', 'danger', end, () => api('DELETE', `/v1/sessions/${id}`))));
}

// The decision log's file read back: one row per decision, newest first,
// each with the version that made it and what it decided, expandable to
// the inputs and the whole record.
function decisionsCard(r) {
  if (r.error) return el('p', { class: 'muted', text: r.error.message });
  if (!r.decisions.length) return el('p', { class: 'muted', text: `none in ${r.file}` });
  const rows = r.decisions.map((d) => {
    const p = d.payload || {};
    const rec = p.record || {};
    const dec = rec.decision || p.running?.decision || {};
    const ambr = dec.apn_ambr ? `DL ${fmtNum(dec.apn_ambr.dl)} bit/s` : '—';
    return [d.time, p.trigger || '—', p.session || '—', String(p.policy_version ?? '—'),
      p.reused ? 'memo' : 'script', (dec.rules || []).join(', ') || '—', ambr,
      el('details', {}, el('summary', { text: 'record' }), pre(p))];
  });
  return [table(['time', 'trigger', 'session', 'version', 'by', 'rules', 'APN-AMBR', ''], rows, { id: 'decisions' }),
    r.complete ? null : el('p', { class: 'muted', text: `older decisions may be in ${r.file}` })];
}

async function show(imsi) {
  if (current !== imsi) lastAction = '';
  current = imsi;
  if (location.hash !== '#' + encodeURIComponent(imsi)) history.replaceState(null, '', '#' + encodeURIComponent(imsi));
  const q = encodeURIComponent(imsi);
  const [profile, sessions, decisions] = await Promise.all([
    api('GET', '/v1/subscribers/' + q).catch((e) => ({ error: e })),
    api('GET', `/v1/subscribers/${q}/sessions`).catch((e) => ({ error: e })),
    api('GET', `/v1/subscribers/${q}/decisions?limit=${DECISIONS_SHOWN}`).catch((e) => ({ error: e })),
  ]);
  if (current !== imsi) return;
  const open = sessions.error ? [] : sessions.sessions.filter((s) => s.state === 'open');
  fill('subscriber',
    el('h2', { class: 'subscriber-title' }, 'Subscriber ', el('code', { text: imsi })),
    el('div', { class: 'grid two' },
      profile.error ? section('Profile', el('p', { class: 'muted', text: profile.error.message })) : profileCard(profile),
      section('Usage', el('div', { id: 'usage-card' }))),
    section(`Open sessions, Gx and N7 (${open.length})`,
      el('p', { id: 'session-state', class: 'muted', role: 'status', text: lastAction }),
      open.length ? open.map((s) => sessionCard(s, imsi)) : el('p', { class: 'muted', text: 'no open session' })),
    section('Last decisions (decision log, newest first)', decisionsCard(decisions)));
  if (!profile.error) await refreshUsage(imsi);
}

layout();
const fromHash = decodeURIComponent(location.hash.slice(1));
if (fromHash) {
  document.getElementById('q').value = fromHash;
  lastQuery = fromHash;
  search(0);
}
document.addEventListener('pcrf-token', () => current && show(current));

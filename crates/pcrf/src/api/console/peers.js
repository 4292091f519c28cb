// The peers page: every Diameter peer (connected, or configured and not
// connected) with its state, DOIC state (whether it advertised DOIC and the
// overload report it is sent), transport counters and last error, from
// GET /v1/stats, refreshed every 2 s.
'use strict';

// [header, family, direction ("both": in / out)]
const COUNTERS = [
  ['messages in / out', 'pcrf_peer_messages_total', 'both'],
  ['requests in / out', 'pcrf_peer_requests_total', 'both'],
  ['bytes in / out', 'pcrf_peer_bytes_total', 'both'],
  ['writes', 'pcrf_peer_writes_total'],
  ['in flight', 'pcrf_peer_in_flight'],
  ['connects', 'pcrf_peer_connects_total'],
  ['error answers', 'pcrf_peer_error_answers_total'],
  ['shed (3004)', 'pcrf_peer_too_busy_total'],
  ['RAR timeouts', 'pcrf_peer_request_timeouts_total'],
  ['unmatched answers', 'pcrf_peer_unmatched_answers_total'],
];

function value(snap, family, peer, direction) {
  const s = (snap.metrics[family] || []).find((x) => x.labels.peer === peer && (!direction || x.labels.direction === direction));
  return s ? s.value : null;
}

async function refresh() {
  try {
    const snap = await api('GET', '/v1/stats');
    const peers = snap.metrics.pcrf_peer_state || [];
    const byState = {};
    for (const s of snap.metrics.pcrf_peers || []) byState[s.labels.state] = s.value;
    fill('peer-summary', Object.entries(byState).map(([k, v]) => el('span', {}, k + ' ', el('b', { text: fmtNum(v) }))),
      el('span', {}, 'awaiting CER ', el('b', { text: fmtNum(value(snap, 'pcrf_diameter_connections_awaiting_cer') || 0) })));
    const rows = peers.map((p) => {
      const peer = p.labels.peer;
      const problems = ['pcrf_peer_error_answers_total', 'pcrf_peer_request_timeouts_total', 'pcrf_peer_too_busy_total']
        .some((f) => value(snap, f, peer));
      const last = (snap.metrics.pcrf_peer_last_error_time_seconds || []).find((x) => x.labels.peer === peer);
      return {
        attrs: { 'data-peer': peer, class: problems ? 'warn-row' : '' },
        cells: [peer, el('span', { class: 'state state-' + p.labels.state, text: p.labels.state }),
          doicCell(snap, peer),
          last ? el('span', { class: 'last-error' }, el('span', { class: 'muted nowrap', text: fmtTime(last.value * 1000) }), ' ', last.labels.error) : '—',
          ...COUNTERS.map(([, f, dir]) => (dir === 'both'
            ? `${fmtNum(value(snap, f, peer, 'in'))} / ${fmtNum(value(snap, f, peer, 'out'))}`
            : fmtNum(value(snap, f, peer, dir))))],
      };
    });
    fill('peer-table', rows.length ? table(['peer', 'state', 'DOIC', 'last error', ...COUNTERS.map((c) => c[0])], rows, { id: 'peers', class: 'wrap-head' })
      : el('p', { class: 'muted', text: 'no Diameter peer connected or configured' }));
    status('');
  } catch (e) {
    status(e.status === 401 ? 'The API needs its token: type it above.' : 'Cannot read /v1/stats: ' + e.message, 'bad');
  }
}

append(document.getElementById('main'), [
  el('p', { id: 'peer-summary', class: 'summary' }),
  section('Diameter peers', el('div', { id: 'peer-table', class: 'scroll' })),
]);
every(2000, refresh);
document.addEventListener('pcrf-token', refresh);

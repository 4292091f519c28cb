// The policy workbench: the running script and its stored versions (who,
// when, why; each can be rolled back to after its diff is confirmed), an
// editor whose draft the server compiles and checks (errors with their
// line), the policy's test cases run on the draft, a dry run of the draft
// beside the running script for one subscriber, and deployment with a
// diff against the running version, confirmed first.
'use strict';

let running = null;

function layout() {
  append(document.getElementById('main'), [
    el('p', { id: 'running', class: 'summary' }),
    el('div', { class: 'grid two' },
      section('Editor',
        el('textarea', { id: 'editor', class: 'code', rows: 24, spellcheck: 'false', 'aria-label': 'policy script' }),
        el('div', { class: 'actions' },
          el('button', { type: 'button', id: 'check', text: 'Check' }),
          el('button', { type: 'button', id: 'run-tests', text: 'Run test cases' }),
          el('button', { type: 'button', id: 'revert', text: 'Revert to running' }),
          el('button', { type: 'button', id: 'deploy', class: 'danger', text: 'Deploy…' })),
        el('div', { id: 'check-result', role: 'status' })),
      el('div', {},
        section('Test cases', el('div', { id: 'tests' }, el('p', { class: 'muted', text: 'Run the cases to see results per case.' }))),
        section('Dry run',
          el('form', { id: 'dry-form', class: 'inline' },
            el('input', { id: 'dry-imsi', placeholder: 'IMSI', 'aria-label': 'IMSI for the dry run' }),
            el('button', { type: 'submit', text: 'Dry run draft' })),
          el('div', { id: 'dry' })),
        section('History', el('div', { id: 'history' })))),
  ]);
  const editor = document.getElementById('editor');
  let timer = null;
  editor.addEventListener('input', () => {
    clearTimeout(timer);
    timer = setTimeout(check, 700);
  });
  document.getElementById('check').addEventListener('click', check);
  document.getElementById('run-tests').addEventListener('click', runTests);
  document.getElementById('revert').addEventListener('click', () => {
    if (running) editor.value = running.source;
    check();
  });
  document.getElementById('deploy').addEventListener('click', deploy);
  document.getElementById('dry-form').addEventListener('submit', (e) => {
    e.preventDefault();
    dryRun();
  });
}

function draft() {
  return document.getElementById('editor').value;
}

function lineOf(source, n) {
  return source.split('\n')[n - 1];
}

function showError(e) {
  const text = e.line ? lineOf(draft(), e.line) : null;
  fill('check-result',
    el('p', { class: 'bad', id: 'check-error' },
      e.line ? el('b', { id: 'error-line', 'data-line': e.line, text: `line ${e.line}: ` }) : null,
      e.message),
    text !== undefined && text !== null ? el('pre', { class: 'error-line', text: `${e.line} | ${text}` }) : null);
  if (e.line) selectLine(e.line);
}

function selectLine(n) {
  const editor = document.getElementById('editor');
  const lines = editor.value.split('\n');
  const start = lines.slice(0, n - 1).reduce((a, l) => a + l.length + 1, 0);
  editor.focus({ preventScroll: true });
  editor.setSelectionRange(start, start + (lines[n - 1] || '').length);
  // Bring the line into the textarea's view (about a third from the top).
  const lineHeight = editor.scrollHeight / Math.max(1, lines.length);
  editor.scrollTop = Math.max(0, (n - 1) * lineHeight - editor.clientHeight / 3);
}

async function check() {
  try {
    const r = await api('POST', '/v1/policy/check', { source: draft() });
    const same = running && r.version === running.version;
    fill('check-result', el('p', { class: 'good', id: 'check-ok' }, 'The draft compiles and answers the sample inputs: version ',
      el('code', { text: r.version }), same ? ' (the running one)' : ''));
    return true;
  } catch (e) {
    showError(e);
    return false;
  }
}

async function runTests() {
  fill('tests', el('p', { class: 'muted', text: 'running…' }));
  try {
    const r = await api('POST', '/v1/policy/test', { source: draft() });
    const rows = r.cases.map((c) => ({
      attrs: { class: c.passed ? 'pass' : 'fail', 'data-case': c.name },
      cells: [el('span', { class: (c.passed ? 'good' : 'bad') + ' nowrap', text: c.passed ? 'PASS' : 'FAIL' }), c.name,
        c.error ? pre(c.error) : c.diffs.length ? pre(c.diffs.map((d) => `${d.field}: expected ${JSON.stringify(d.expected)}, actual ${JSON.stringify(d.actual)}`).join('\n')) : ''],
    }));
    fill('tests',
      el('p', { id: 'tests-summary', class: r.failed ? 'bad' : 'good', text: `${r.passed} passed, ${r.failed} failed (${r.cases_file}, draft ${r.script_version})` }),
      table(['', 'case', 'difference'], rows, { id: 'test-table' }));
  } catch (e) {
    fill('tests', el('p', { class: 'bad', text: (e.line ? `line ${e.line}: ` : '') + e.message }));
  }
}

function decisionBox(title, d) {
  return el('div', {},
    el('h4', {}, title, ' ', el('code', { text: d.script_version || '' })),
    d.error ? el('p', { class: 'bad', text: d.error }) : pre(d.decision));
}

async function dryRun() {
  const imsi = document.getElementById('dry-imsi').value.trim();
  try {
    const r = await api('POST', '/v1/policy/dry-run', { source: draft(), subscriber: imsi });
    const same = JSON.stringify(r.running.decision) === JSON.stringify(r.draft.decision);
    fill('dry',
      el('p', { id: 'dry-verdict', class: same ? 'muted' : 'warn', text: same ? 'Same decision.' : 'The draft decides differently.' }),
      el('p', { class: 'muted', text: r.session ? `inputs of session ${r.session}'s last decision` : 'no open session: the profile on a sample LTE session' }),
      el('div', { class: 'grid two' }, decisionBox('Running', r.running), decisionBox('Draft', r.draft)),
      el('details', {}, el('summary', { text: 'Inputs' }), pre(r.inputs)));
  } catch (e) {
    fill('dry', el('p', { class: 'bad', text: e.message }));
  }
}

// Line diff (longest common subsequence), with two lines of context.
function diffLines(a, b) {
  const x = a.split('\n');
  const y = b.split('\n');
  const n = x.length;
  const m = y.length;
  const lcs = Array.from({ length: n + 1 }, () => new Uint32Array(m + 1));
  for (let i = n - 1; i >= 0; i -= 1) {
    for (let j = m - 1; j >= 0; j -= 1) {
      lcs[i][j] = x[i] === y[j] ? lcs[i + 1][j + 1] + 1 : Math.max(lcs[i + 1][j], lcs[i][j + 1]);
    }
  }
  const ops = [];
  let i = 0;
  let j = 0;
  while (i < n || j < m) {
    if (i < n && j < m && x[i] === y[j]) {
      ops.push([' ', x[i], j + 1]);
      i += 1;
      j += 1;
    } else if (j < m && (i === n || lcs[i][j + 1] >= lcs[i + 1][j])) {
      ops.push(['+', y[j], j + 1]);
      j += 1;
    } else {
      ops.push(['-', x[i], null]);
      i += 1;
    }
  }
  const keep = ops.map((op, k) => op[0] !== ' ' || ops.slice(Math.max(0, k - 2), k + 3).some((o) => o[0] !== ' '));
  const out = [];
  let skipped = false;
  ops.forEach((op, k) => {
    if (keep[k]) {
      out.push(`${op[0]} ${op[1]}`);
      skipped = false;
    } else if (!skipped) {
      out.push('  …');
      skipped = true;
    }
  });
  return ops.some((o) => o[0] !== ' ') ? out.join('\n') : '';
}

async function deploy() {
  if (!(await check())) return;
  const diff = diffLines(running ? running.source : '', draft());
  if (!diff) {
    fill('check-result', el('p', { class: 'muted', text: 'The draft is the running script: nothing to deploy.' }));
    return;
  }
  if (!(await confirmAction(`Deploy this draft over version ${running ? running.version : '?'}? It serves every new decision at once.`, diff))) return;
  try {
    const r = await api('PUT', '/v1/policy', { source: draft() });
    fill('check-result', el('p', { class: 'good', id: 'deployed', text: `Deployed: version ${r.version} is serving.` }));
    await load(false);
  } catch (e) {
    showError(e);
  }
}

async function rollback(id) {
  try {
    const headers = {};
    if (token()) headers.Authorization = 'Bearer ' + token();
    const r = await fetch(`/v1/policy/versions/${running.id}/diff/${id}`, { headers, credentials: 'omit', cache: 'no-store' });
    const diff = r.ok ? await r.text() : '';
    if (!(await confirmAction(`Roll back to version ${id}? Its script is checked and deployed as a new version.`, diff))) return;
    const d = await api('POST', `/v1/policy/rollback/${id}`);
    fill('check-result', el('p', { class: 'good', id: 'deployed', text: `Rolled back: version ${d.deployed.id} (${d.version}) is serving.` }));
    await load(true);
  } catch (e) {
    showError(e);
  }
}

async function renderRunning() {
  // Read first, so the running version and the table change together.
  const page = await api('GET', '/v1/policy/versions');
  fill('running',
    el('span', {}, 'running ', el('code', { id: 'running-version', text: running.version }), ` (version ${running.id})`),
    el('span', {}, 'file ', el('code', { text: running.path })),
    el('span', {}, 'cases ', el('code', { text: running.cases || 'none' })),
    running.refused ? el('span', { class: 'bad' }, `version ${running.refused.version} refused here: ${running.refused.reason}`) : '');
  const rows = page.versions.map((v) => [
    String(v.id), el('code', { text: v.hash }), fmtTime(v.at_ms), v.by, v.comment,
    v.serving ? 'serving' : el('button', { type: 'button', class: 'rollback', text: 'Roll back…', onclick: () => rollback(v.id) }),
  ]);
  fill('history', table(['version', 'script', 'when', 'by', 'comment', ''], rows, { id: 'history-table' }));
}

async function load(intoEditor) {
  try {
    running = await api('GET', '/v1/policy');
    await renderRunning();
    if (intoEditor) document.getElementById('editor').value = running.source;
    status('');
  } catch (e) {
    status(e.status === 401 ? 'The API needs its token: type it above.' : e.message, 'bad');
  }
}

layout();
load(true);
document.addEventListener('pcrf-token', () => load(!draft()));

// The console's charts, drawn as SVG by hand: time series lines, horizontal
// bars and a usage meter. Small on purpose: no chart library to embed.
// Labels are set as text nodes, like everything else on the pages.
'use strict';

const SVG_NS = 'http://www.w3.org/2000/svg';
const PALETTE = ['#2f6fde', '#e0572b', '#2a9d55', '#9b51e0', '#d4a20b', '#1aa3b5', '#c2306b', '#6b7280'];

function svgEl(tag, attrs, ...children) {
  const node = document.createElementNS(SVG_NS, tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined) continue;
    if (k === 'text') node.textContent = String(v);
    else node.setAttribute(k, String(v));
  }
  for (const c of children.flat(Infinity)) {
    if (c) node.appendChild(c);
  }
  return node;
}

function colorOf(i) {
  return PALETTE[i % PALETTE.length];
}

// A short label for an axis value.
function axisLabel(v) {
  if (v >= 1e9) return (v / 1e9).toFixed(1) + 'G';
  if (v >= 1e6) return (v / 1e6).toFixed(1) + 'M';
  if (v >= 1e4) return (v / 1e3).toFixed(0) + 'k';
  if (v >= 100) return v.toFixed(0);
  if (v >= 1) return v.toFixed(1);
  return v.toFixed(2);
}

// Lines over time. `series`: [{name, points: [[tMs, value|null], ...]}].
// Returns a figure with the SVG and a legend (name and latest value).
function lineChart(series, opts) {
  const o = Object.assign({ width: 480, height: 170, unit: '' }, opts || {});
  const pad = { l: 44, r: 8, t: 8, b: 20 };
  const all = series.flatMap((s) => s.points);
  const values = all.map((p) => p[1]).filter((v) => v !== null && Number.isFinite(v));
  const times = all.map((p) => p[0]);
  const tMin = times.length ? Math.min(...times) : 0;
  const tMax = times.length ? Math.max(...times) : 1;
  const vMax = Math.max(o.min || 0, values.length ? Math.max(...values) : 0) || 1;
  const w = o.width - pad.l - pad.r;
  const h = o.height - pad.t - pad.b;
  const x = (t) => pad.l + (tMax === tMin ? w : ((t - tMin) / (tMax - tMin)) * w);
  const y = (v) => pad.t + h - (v / vMax) * h;
  const svg = svgEl('svg', {
    viewBox: `0 0 ${o.width} ${o.height}`,
    class: 'chart',
    role: 'img',
    'aria-label': o.title || 'chart',
    preserveAspectRatio: 'none',
  });
  for (const frac of [0, 0.5, 1]) {
    const yy = pad.t + h - frac * h;
    svg.appendChild(svgEl('line', { x1: pad.l, x2: pad.l + w, y1: yy, y2: yy, class: 'grid' }));
    svg.appendChild(svgEl('text', { x: pad.l - 4, y: yy + 4, class: 'axis', 'text-anchor': 'end', text: axisLabel(vMax * frac) }));
  }
  const span = Math.round((tMax - tMin) / 1000);
  svg.appendChild(svgEl('text', { x: pad.l, y: o.height - 4, class: 'axis', text: span ? `-${span}s` : '' }));
  svg.appendChild(svgEl('text', { x: pad.l + w, y: o.height - 4, class: 'axis', 'text-anchor': 'end', text: 'now' }));
  series.forEach((s, i) => {
    let d = '';
    let pen = false;
    for (const [t, v] of s.points) {
      if (v === null || !Number.isFinite(v)) {
        pen = false;
        continue;
      }
      d += `${pen ? 'L' : 'M'}${x(t).toFixed(1)},${y(v).toFixed(1)} `;
      pen = true;
    }
    if (d) svg.appendChild(svgEl('path', { d, class: 'series', stroke: colorOf(i), 'data-series': s.name }));
  });
  const legend = el('ul', { class: 'legend' }, series.map((s, i) => {
    const last = [...s.points].reverse().find((p) => p[1] !== null && Number.isFinite(p[1]));
    return el('li', {},
      el('span', { class: 'swatch', 'data-color': i % PALETTE.length }),
      s.name + ' ',
      el('b', { text: last ? fmtNum(last[1]) + (o.unit ? ' ' + o.unit : '') : '—' }));
  }));
  return el('figure', { class: 'plot' }, svg, legend);
}

// Horizontal bars: [{label, value}], longest first, scaled to the largest.
function barChart(items, opts) {
  const o = Object.assign({ unit: '' }, opts || {});
  if (!items.length) return el('p', { class: 'muted', text: o.empty || 'nothing yet' });
  const max = Math.max(...items.map((i) => i.value)) || 1;
  return el('div', { class: 'bars' }, items.map((it, i) => {
    const fill = el('span', { class: 'bar-fill', 'data-color': (it.color === undefined ? i : it.color) % PALETTE.length });
    fill.style.width = `${Math.max(0.5, (100 * it.value) / max).toFixed(1)}%`;
    return el('div', { class: 'bar-row' },
      el('span', { class: 'bar-label', text: it.label }),
      el('span', { class: 'bar-track' }, fill),
      el('span', { class: 'bar-value', text: fmtNum(it.value) + (o.unit ? ' ' + o.unit : '') }));
  }));
}

// A usage meter: `used` against `allowance` (null: no quota).
function meter(used, allowance) {
  const frac = allowance ? Math.min(1, used / allowance) : 0;
  const fill = el('span', { class: 'meter-fill' + (allowance && used >= allowance ? ' over' : '') });
  fill.style.width = `${(100 * frac).toFixed(2)}%`;
  return el('span', {
    class: 'meter',
    role: 'meter',
    'aria-valuemin': 0,
    'aria-valuemax': allowance || 0,
    'aria-valuenow': used,
    'data-fraction': frac.toFixed(6),
  }, fill);
}

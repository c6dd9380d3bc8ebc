// @ts-check
// Where a step's time goes: data loading, compute, optimizer and communication, stacked per point, one group of
// bars per series, so that the part that grows with the GPUs shows. Points with a straggler (one rank much slower
// than the others) are outlined red and named below the chart.

import { COLOURS, draw } from '../charts.js';
import { byId, h, replaceChildren } from '../dom.js';
import { number } from '../format.js';
import { FLAG_RED } from './flags.js';
import { rowsOf } from './series.js';

/** @typedef {import('../types/api.js').CompareRow} CompareRow */
/** @typedef {import('./series.js').Series} Series */

export const PARTS = [
  { key: 'data', label: 'data loading', colour: COLOURS[4] },
  { key: 'compute', label: 'compute', colour: COLOURS[0] },
  { key: 'optimizer', label: 'optimizer', colour: COLOURS[2] },
  { key: 'comm', label: 'communication', colour: COLOURS[1] },
];

/**
 * A point's bar: each part's median over its repeats, `n` of which had a breakdown (a run's breakdown is its median
 * epoch's; both by the server), and its runs with a straggler.
 * @typedef {{ series: string, gpus: number, n: number, stragglers: CompareRow[], parts: Record<string, number | null> }} Bar
 */

/**
 * One bar per point that has a breakdown.
 * @param {Series[]} series
 * @returns {Bar[]}
 */
export function bars(series) {
  return series.flatMap((s) => (s.analysis?.points ?? []).map((point) => {
    const { time_breakdown: breakdown, time_breakdown_n: n } = point.medians;
    const stragglers = rowsOf(s, point).filter((row) => row.flags.some((flag) => flag.code === 'straggler'));
    return {
      series: s.name, gpus: point.gpus, n, stragglers,
      parts: Object.fromEntries(PARTS.map((part) => [part.key, breakdown[part.key] ?? null])),
    };
  }).filter((bar) => bar.n));
}

/**
 * The chart and, below it, the points with a straggler, in `root` (the dashboard).
 * @param {ParentNode} root
 * @param {Series[]} series
 */
export function drawBreakdown(root, series) {
  const shown = bars(series);
  // Two levels on the x axis: the series, then its GPU counts, so that each series' bars stand together.
  const x = [shown.map((bar) => bar.series), shown.map((bar) => `${bar.gpus} GPU${bar.gpus === 1 ? '' : 's'}`)];
  const outline = {
    color: shown.map((bar) => (bar.stragglers.length ? FLAG_RED : 'rgba(0,0,0,0)')),
    width: shown.map((bar) => (bar.stragglers.length ? 3 : 0)),
  };
  const traces = shown.length ? PARTS.map((part) => ({
    type: 'bar', name: part.label, x, y: shown.map((bar) => bar.parts[part.key] ?? 0),
    marker: { color: part.colour, line: outline },
    text: shown.map((bar) => `${part.label}: ${number(bar.parts[part.key], 3)} s per step (median of ${bar.n})`
      + (bar.stragglers.length ? '<br>⚠ straggler' : '')),
    hovertemplate: '%{text}<extra>%{x}</extra>', textposition: 'none',
  })) : [];
  draw(byId(root, 'chart-breakdown'), traces, {
    barmode: 'stack',
    xaxis: { type: 'multicategory', title: { text: '' } },
    yaxis: { title: { text: 'seconds per step' }, rangemode: 'tozero' },
  }, 'No run printed where its step time goes');
  drawStragglers(byId(root, 'straggler-notes'), shown);
}

/**
 * @param {HTMLElement} notes
 * @param {Bar[]} shown
 */
function drawStragglers(notes, shown) {
  const items = shown.flatMap((bar) => bar.stragglers.map((row) => {
    const flag = row.flags.find((f) => f.code === 'straggler');
    const spread = row.step_time_slowest_s && row.step_time_fastest_s
      ? ` Slowest rank ${number(row.step_time_slowest_s)} s per step, fastest ${number(row.step_time_fastest_s)} s.` : '';
    return h('li', {}, `${bar.series} at ${bar.gpus} GPUs, run ${row.run_id}: ${flag?.message}${spread}`);
  }));
  replaceChildren(notes, items.length ? [h('p', { class: 'hint' }, 'Outlined red: a point with a straggler.'), h('ul', {}, items)] : []);
}

// @ts-check
// Time to accuracy as the charts draw it, built from the scaling answer's `time_to_target` of each series (and the
// compare rows' target columns): time to target against GPUs, effective beside throughput speed-up, epochs to
// target against the global batch. The server scores every point (olympic or mean, intervals, the runs that did not
// reach); this only turns its answer into traces and words, and never drops a point that has no score: its count of
// runs that did not reach the target is said on the chart and below it.

import { plotText } from '../charts.js';
import { number } from '../format.js';
import { hoverFlags, markers } from './flags.js';
import { errorBars, idealLine, interval } from './scaling.js';

/** @typedef {import('../types/api.js').CompareRow} CompareRow */
/** @typedef {import('../types/api.js').Target} Target */
/** @typedef {import('../types/api.js').TargetPoint} TargetPoint */
/** @typedef {import('../types/api.js').TimeToTarget} TimeToTarget */
/** @typedef {import('../charts.js').Trace} Trace */
/** @typedef {import('./series.js').Series} Series */
/** @typedef {number | null | undefined} Figure */

/**
 * A series' answer scored by time to its target, or null where it has no target.
 * @param {Series} series
 * @returns {TimeToTarget | null}
 */
export const targetOf = (series) => series.analysis?.time_to_target ?? null;

/**
 * Whether the figures have a target at all: a series scored by one, or a row that says whether it reached one.
 * Without one, nothing of time to accuracy shows.
 * @param {CompareRow[]} rows
 * @param {Series[]} series
 */
export function hasTarget(rows, series) {
  return series.some((s) => targetOf(s) !== null) || rows.some((row) => row.target_reached !== null);
}

/**
 * A target in words: "val_accuracy ≥ 0.95".
 * @param {Target} target
 */
export function targetWords(target) {
  return target.at_least !== null ? `${target.metric} ≥ ${number(target.at_least, 6)}` : `${target.metric} ≤ ${number(target.at_most, 6)}`;
}

/**
 * The series' targets in words, one when they share it (an experiment has one; a selection may mix several).
 * @param {Series[]} series
 */
export function targetsWords(series) {
  const words = [...new Set(series.flatMap((s) => { const t = targetOf(s); return t ? [targetWords(t.target)] : []; }))];
  return words.length === 1 ? words[0] : words.length ? 'each series\u2019 target' : 'the target';
}

/**
 * What a point's runs that have no time to target are, as the label beside the point: "" where every run reached.
 * @param {TargetPoint} point
 */
export function missingLabel(point) {
  const parts = [];
  if (point.not_reached) parts.push(`${point.not_reached} of ${point.runs} not reached`);
  if (point.unfinished) parts.push(`${point.unfinished} still running`);
  return parts.join(', ');
}

/**
 * The sentences below the time chart for points with no score (no run reached the target, or an olympic score
 * would keep a run that did not): such a point cannot be drawn, and is named here instead of vanishing.
 * @param {Series[]} series
 * @returns {string[]}
 */
export function unscoredNotes(series) {
  return series.flatMap((s) => (targetOf(s)?.points ?? [])
    .filter((point) => point.time_to_target_s === null)
    .map((point) => `${s.name} at ${point.gpus} GPU${point.gpus === 1 ? '' : 's'}: no time to target`
      + ` (${point.reached} of ${point.runs} ${point.runs === 1 ? 'run' : 'runs'} reached it`
      + `${point.unfinished ? `, ${point.unfinished} still running` : ''}).`));
}

/** @param {TargetPoint} point */
const scoring = (point) => (point.scoring === 'olympic'
  ? `olympic mean of ${point.n} (fastest and slowest dropped)` : `mean of ${point.n} ${point.n === 1 ? 'run' : 'runs'}`);

/**
 * One trace of a series' points: `value` picks the figure and its interval; points without the figure are left
 * out of the trace (unscoredNotes names them). Each point is labelled with its runs that did not reach.
 * `convergence`: the trace is of the target, so its points carry their flags and their runs that did not reach (a
 * throughput speed-up beside it is of the time per epoch, which neither concerns).
 * @param {Series} series
 * @param {{ name?: string, x?: (point: TargetPoint) => Figure, value: (point: TargetPoint) => { y: Figure, low: Figure, high: Figure },
 *   hover: (point: TargetPoint, y: number, low: Figure, high: Figure) => string, dash?: string, convergence?: boolean }} how
 * @returns {Trace}
 */
function pointsTrace(series, { name = series.name, x = (point) => point.gpus, value, hover, dash = 'solid', convergence = true }) {
  const shown = (targetOf(series)?.points ?? []).flatMap((point) => {
    const { y, low, high } = value(point);
    const at = x(point);
    return y === null || y === undefined || at === null || at === undefined ? [] : [{ point, at, y, low, high }];
  });
  const y = shown.map((item) => item.y);
  const flags = shown.map(({ point }) => (convergence ? point.flags : []));
  return {
    name, legendgroup: series.name, type: 'scatter', mode: convergence ? 'lines+markers+text' : 'lines+markers',
    x: shown.map((item) => item.at), y,
    error_y: errorBars(y, shown.map((item) => item.low), shown.map((item) => item.high)),
    // The label beside each point: its runs that did not reach (plotly reads it as markup: made text); the last
    // point's to its left, within the plot.
    text: shown.map(({ point }) => (convergence ? plotText(missingLabel(point)) : '')),
    textposition: shown.map((_, i) => (i === shown.length - 1 && i > 0 ? 'top left' : 'top center')),
    textfont: { color: series.colour, size: 11 }, cliponaxis: false,
    customdata: shown.map(({ point, y: figure, low, high }, i) => hover(point, figure, low, high)
      + `${point.run_ids.length ? `<br>runs ${point.run_ids.map(plotText).join(', ')}` : ''}${hoverFlags(flags[i])}`),
    hovertemplate: '%{customdata}<extra>%{fullData.name}</extra>',
    line: { color: series.colour, dash }, marker: markers(flags, series.colour),
  };
}

/**
 * Time to target against GPUs, one trace per series with a target: the score of each point with its 95 % interval.
 * @param {Series[]} series
 * @returns {Trace[]}
 */
export function timeTraces(series) {
  return series.filter((s) => targetOf(s)).map((s) => pointsTrace(s, {
    value: (p) => ({ y: p.time_to_target_s, low: p.ci_low_s, high: p.ci_high_s }),
    hover: (p, y, low, high) => `${number(y, 4)} s to the target with ${p.gpus} GPUs${interval(low, high, ' s')}`
      + `<br>${scoring(p)}; ${p.reached} of ${p.runs} reached${p.unfinished ? `, ${p.unfinished} still running` : ''}`,
  }));
}

/**
 * Effective speed-up (time to target) and throughput speed-up (time per epoch) of each series on one chart, with
 * the ideal from its baseline: the gap between the two is what the larger batch costs in epochs.
 * @param {Series[]} series
 * @returns {Trace[]}
 */
export function speedupTraces(series) {
  return series.flatMap((s) => {
    const answer = targetOf(s);
    if (!answer) return [];
    const baseline = answer.baseline_gpus;
    const gpus = [...new Set(answer.points.map((p) => p.gpus))].sort((a, b) => a - b);
    return [
      pointsTrace(s, {
        name: `${s.name}: effective (time to target)`,
        value: (p) => ({ y: p.effective_speedup, low: p.effective_speedup_ci_low, high: p.effective_speedup_ci_high }),
        hover: (p, y, low, high) => `effective speed-up ${number(y, 4)} with ${p.gpus} GPUs${interval(low, high)}`
          + `<br>statistical efficiency ${number(p.statistical_efficiency)}`,
      }),
      pointsTrace(s, {
        name: `${s.name}: throughput (time per epoch)`, dash: 'dash', convergence: false,
        value: (p) => ({ y: p.throughput_speedup, low: null, high: null }),
        hover: (p, y) => `throughput speed-up ${number(y, 4)} with ${p.gpus} GPUs`,
      }),
      ...(baseline ? [idealLine(s, `${s.name}: ideal`, gpus, gpus.map((g) => g / baseline))] : []),
    ];
  });
}

/**
 * Epochs to target against the global batch (the critical-batch view), one trace per series: where the epochs
 * start to grow with the batch, a larger batch stops paying for itself.
 * @param {Series[]} series
 * @returns {Trace[]}
 */
export function epochsTraces(series) {
  return series.filter((s) => targetOf(s)).map((s) => pointsTrace(s, {
    x: (p) => p.global_batch_size,
    value: (p) => ({ y: p.epochs_to_target, low: p.epochs_ci_low, high: p.epochs_ci_high }),
    hover: (p, y, low, high) => `${number(y, 3)} epochs to the target at a global batch of ${p.global_batch_size}`
      + ` (${p.gpus} GPUs)${interval(low, high)}<br>mean over the ${p.reached} ${p.reached === 1 ? 'run' : 'runs'} that reached it`,
  }));
}

/**
 * The global batch sizes to mark on the epochs chart's axis.
 * @param {Series[]} series
 */
export function batchAxis(series) {
  const batches = [...new Set(series.flatMap((s) => (targetOf(s)?.points ?? []).map((p) => p.global_batch_size))
    .filter((b) => b !== null))].sort((a, b) => Number(a) - Number(b));
  return { title: { text: 'global batch (samples per optimizer step)' }, type: 'log', tickvals: batches, ticktext: batches.map(String) };
}

/**
 * A row's target columns in the table: reached (and whether it stopped there), epochs, seconds and effective
 * speed-up; "—" where a figure is missing.
 * @param {CompareRow} row
 */
export function targetCells(row) {
  const reached = row.target_reached === null ? '—'
    : row.target_reached ? (row.stopped_at_target ? 'yes, stopped there' : 'yes') : 'no';
  return {
    reached, epochs: number(row.epochs_to_target), seconds: number(row.time_to_target_s), effective: number(row.effective_speedup),
  };
}

// The scaling charts: the compared time, speed-up and efficiency of each series' points (means over repeats with
// their 95 % intervals), the ideal from the series' baseline, and the laws the server fitted. The server computes
// every figure (points, baseline, fits); this draws them and never recomputes a rule of its own.

import { draw, minimumSpan } from '../charts.js';
import { h, replaceChildren } from '../dom.js';
import { number } from '../format.js';
import { hoverFlags, markers } from './flags.js';

export function median(values) {
  const sorted = values.filter((value) => value !== null && value !== undefined && Number.isFinite(value)).sort((a, b) => a - b);
  if (!sorted.length) return null;
  const middle = Math.floor(sorted.length / 2);
  return sorted.length % 2 ? sorted[middle] : (sorted[middle - 1] + sorted[middle]) / 2;
}

// A series' rows by GPU count, in order: the repeats of one point together.
export function rowsByGpus(rows) {
  const groups = new Map();
  for (const row of [...rows].sort((a, b) => a.gpus - b.gpus)) {
    if (!groups.has(row.gpus)) groups.set(row.gpus, []);
    groups.get(row.gpus).push(row);
  }
  return groups;
}

const flagsOf = (rows) => rows.flatMap((row) => row.flags ?? []);

// The points of a series: the scaling endpoint's where it answered, else the point figures every row carries.
// Either way a point also carries its runs' own flags (an oversubscribed run makes its point suspect).
export function pointsOf(series) {
  const groups = rowsByGpus(series.rows);
  if (series.analysis) {
    return series.analysis.points.map((point) => {
      const rows = groups.get(point.gpus) ?? [];
      return { ...point, runs: rows.map((row) => row.run_id), flags: [...(point.flags ?? []), ...flagsOf(rows)] };
    });
  }
  return [...groups.entries()].map(([gpus, rows]) => {
    const first = rows[0];
    return {
      gpus, runs: rows.map((row) => row.run_id), flags: flagsOf(rows),
      mean: first.point_mean_s ?? median(rows.map((row) => row.mean_epoch_time_s)),
      ci_low: first.point_ci_low_s ?? null, ci_high: first.point_ci_high_s ?? null, n: first.point_n || rows.length,
      speedup: first.speedup, speedup_ci_low: first.speedup_ci_low ?? null, speedup_ci_high: first.speedup_ci_high ?? null,
      efficiency: first.efficiency,
    };
  }).filter((point) => point.mean !== null && point.mean !== undefined);
}

// What a series' figures follow: its scaling mode, the time its points compare and its baseline's GPU count.
export function modeOf(series) {
  const first = series.rows[0] ?? {};
  const scaling = series.analysis?.scaling ?? first.scaling ?? 'strong';
  return {
    scaling,
    measure: series.analysis?.measure ?? (scaling === 'weak' ? 'step_time_s' : 'epoch_time_s'),
    baseline: series.analysis?.baseline_gpus ?? series.rows.find((row) => row.baseline_gpus)?.baseline_gpus ?? null,
  };
}

// Asymmetric error bars from an interval around each value; none where a point has no interval (one repeat).
function errorBars(values, lows, highs) {
  if (!lows.some((low, i) => low !== null && low !== undefined && highs[i] !== null && highs[i] !== undefined)) return undefined;
  return {
    type: 'data', symmetric: false, visible: true, thickness: 1.5, width: 4,
    array: values.map((value, i) => (highs[i] === null || highs[i] === undefined ? 0 : Math.max(0, highs[i] - value))),
    arrayminus: values.map((value, i) => (lows[i] === null || lows[i] === undefined ? 0 : Math.max(0, value - lows[i]))),
  };
}

function interval(low, high, unit = '') {
  return low === null || low === undefined || high === null || high === undefined
    ? '' : `, 95 % interval ${number(low)}–${number(high)}${unit}`;
}

// One trace of a series' points: `value` picks the figure and its interval from a point.
function pointTrace(series, points, value, unit) {
  const shown = points.map((point) => ({ point, ...value(point) })).filter(({ y }) => y !== null && y !== undefined);
  const y = shown.map((item) => item.y);
  const marker = markers(shown.map(({ point }) => point.flags), series.colour);
  return {
    name: series.name, legendgroup: series.name, mode: 'lines+markers', type: 'scatter',
    x: shown.map(({ point }) => point.gpus), y,
    error_y: errorBars(y, shown.map((item) => item.low), shown.map((item) => item.high)),
    text: shown.map(({ point, y: figure, low, high }) => `${number(figure, 4)}${unit} with ${point.gpus} GPUs${interval(low, high, unit)}`
      + `<br>n = ${point.n} ${point.n === 1 ? 'run' : 'runs'}${point.runs.length ? ` (${point.runs.join(', ')})` : ''}${hoverFlags(point.flags)}`),
    hovertemplate: '%{text}<extra>%{fullData.name}</extra>',
    line: { color: series.colour }, marker,
  };
}

// The GPU counts to mark on an axis: those measured, and powers of two across any predicted range.
export function gpuAxis(counts, upTo = 0) {
  const ticks = new Set(counts);
  for (let g = 1; g <= upTo; g *= 2) if (g >= Math.min(...counts)) ticks.add(g);
  const sorted = [...ticks].sort((a, b) => a - b);
  return { title: { text: 'GPUs' }, type: 'log', tickvals: sorted, ticktext: sorted.map(String) };
}

const idealLine = (series, name, x, y) => ({
  name, legendgroup: series.name, mode: 'lines', hoverinfo: 'skip', x, y,
  line: { color: series.colour, dash: 'dot', width: 1.5 },
});

const LAWS = { amdahl: { label: 'Amdahl fit', dash: 'dash' }, usl: { label: 'USL fit', dash: 'dashdot' } };

function fitTraces(series) {
  const predicted = series.analysis?.predicted ?? [];
  return Object.entries(LAWS).map(([law, look]) => {
    const points = predicted.filter((point) => point.law === law).sort((a, b) => a.gpus - b.gpus);
    if (!points.length) return null;
    return {
      name: `${series.name}: ${look.label}`, legendgroup: series.name, mode: 'lines',
      x: points.map((point) => point.gpus), y: points.map((point) => point.speedup),
      hovertemplate: `${look.label}: speed-up %{y:.3g} with %{x} GPUs<extra>${series.name}</extra>`,
      line: { color: series.colour, dash: look.dash, width: 1.5 }, opacity: 0.8,
    };
  }).filter(Boolean);
}

// "strong scaling", "weak scaling", or both where a selection mixes them.
export function modeWords(series) {
  const modes = [...new Set(series.map((s) => modeOf(s).scaling))].sort();
  if (!modes.length) return '';
  if (modes.length > 1) return 'strong and weak scaling, per series';
  return modes[0] === 'weak'
    ? 'weak scaling: the batch per GPU stays fixed and the global batch grows with the GPUs'
    : 'strong scaling: every run trains the same global batch';
}

function timeTitle(series) {
  const measures = new Set(series.map((s) => modeOf(s).measure));
  if (measures.size > 1) return 'seconds (per epoch: strong; per step: weak)';
  return measures.has('step_time_s') ? 'seconds per step' : 'seconds per epoch';
}

export function drawScaling(series, allGpus) {
  const points = new Map(series.map((s) => [s, pointsOf(s)]));
  const predictedMax = Math.max(0, ...series.flatMap((s) => (s.analysis?.predicted ?? []).map((p) => p.gpus)));
  const x = gpuAxis(allGpus);
  const wide = gpuAxis(allGpus, predictedMax);

  const baselineOf = (s) => {
    const { baseline } = modeOf(s);
    return points.get(s).find((point) => point.gpus === baseline) ?? null;
  };
  const times = series.flatMap((s) => {
    const base = baselineOf(s);
    const gpus = points.get(s).map((point) => point.gpus);
    const weak = modeOf(s).scaling === 'weak';
    return [
      pointTrace(s, points.get(s), (p) => ({ y: p.mean, low: p.ci_low, high: p.ci_high }), ' s'),
      // Strong: the baseline's time shared out over the GPUs; weak: the baseline's time, unchanged.
      base && idealLine(s, `${s.name}: ideal`, gpus, gpus.map((g) => (weak ? base.mean : (base.mean * base.gpus) / g))),
    ].filter(Boolean);
  });
  const timeValues = times.filter((t) => !t.hoverinfo).flatMap((t) => t.y); // the points, not the ideal
  draw('chart-epoch-time', times, {
    xaxis: x, yaxis: { title: { text: timeTitle(series) }, type: 'log', range: minimumSpan(timeValues, { log: true }) },
  });

  draw('chart-speedup', series.flatMap((s) => {
    const { baseline } = modeOf(s);
    const gpus = [...new Set([...points.get(s).map((p) => p.gpus), ...(s.analysis?.predicted ?? []).map((p) => p.gpus)])]
      .sort((a, b) => a - b);
    return [
      pointTrace(s, points.get(s), (p) => ({ y: p.speedup, low: p.speedup_ci_low, high: p.speedup_ci_high }), ''),
      baseline && idealLine(s, `${s.name}: ideal`, gpus, gpus.map((g) => g / baseline)),
      ...fitTraces(s),
    ].filter(Boolean);
  }), { xaxis: wide, yaxis: { title: { text: 'speed-up' }, rangemode: 'tozero' } });

  // The efficiency's interval is the speed-up's, over the same ratio of GPUs that makes efficiency of speed-up.
  const ratio = (s, p) => (modeOf(s).baseline ? modeOf(s).baseline / p.gpus : null);
  const scaled = (s, p, value) => (value === null || value === undefined || ratio(s, p) === null ? null : value * ratio(s, p));
  draw('chart-efficiency', [
    ...series.map((s) => pointTrace(s, points.get(s), (p) => ({
      y: p.efficiency, low: scaled(s, p, p.speedup_ci_low), high: scaled(s, p, p.speedup_ci_high),
    }), '')),
    { name: 'ideal', mode: 'lines', x: x.tickvals, y: x.tickvals.map(() => 1), hoverinfo: 'skip', line: { color: '#555', dash: 'dot', width: 1.5 } },
  ], { xaxis: x, yaxis: { title: { text: 'efficiency' }, rangemode: 'tozero' } });

  for (const id of ['mode-epoch-time', 'mode-speedup', 'mode-efficiency']) {
    const element = document.getElementById(id);
    if (element) element.textContent = series.length ? ` (${modeWords(series).split(':')[0]})` : '';
  }
  const description = document.getElementById('scaling-mode');
  if (description) description.textContent = series.length ? `These figures follow ${modeWords(series)}.` : '';
  drawFitNotes(series);
}

function fitSentence(fits) {
  if (!fits) return '';
  if (fits.refused) return `No law fitted: ${fits.refused}`;
  const parts = [];
  if (fits.amdahl) parts.push(`Amdahl: serial fraction ${number(fits.amdahl.serial_fraction)} (r² ${number(fits.amdahl.r2)}).`);
  if (fits.usl) {
    const peak = fits.usl.peak_gpus ? `, slower beyond about ${number(fits.usl.peak_gpus, 2)} GPUs` : ', no peak';
    parts.push(`USL: contention σ ${number(fits.usl.sigma)}, coherency κ ${number(fits.usl.kappa)} (r² ${number(fits.usl.r2)})${peak}.`);
  }
  return parts.join(' ');
}

// Below the speed-up chart: each series' recommendation and the parameters of its fits, or why none was fitted.
function drawFitNotes(series) {
  const notes = document.getElementById('fit-notes');
  if (!notes) return;
  const analysed = series.filter((s) => s.analysis);
  if (!analysed.length) {
    replaceChildren(notes, series.length ? h('p', { class: 'hint' }, 'No fitted laws: the server gave no scaling analysis of these runs.') : null);
    return;
  }
  replaceChildren(notes, analysed.map((s) => h('p', { class: 'fit', dataset: { series: s.name } },
    h('strong', {}, `${s.name}: `), h('span', { class: 'recommendation' }, s.analysis.recommendation ?? ''), ' ',
    h('span', { class: 'fit-parameters' }, fitSentence(s.analysis.fits)))));
}

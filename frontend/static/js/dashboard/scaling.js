// @ts-check
// The scaling charts: the compared time, speed-up and efficiency of each series' points (means over repeats with
// their 95 % intervals), the ideal from the series' baseline, and the laws the server fitted. The server computes
// every figure (points, baseline, fits); this draws them and never recomputes a rule of its own.

import { draw, minimumSpan, plotText } from '../charts.js';
import { byId, h, optionalById, replaceChildren } from '../dom.js';
import { number } from '../format.js';
import { hoverFlags, markers } from './flags.js';
import { rowsOf } from './series.js';

/** @typedef {import('../types/api.js').CompareRow} CompareRow */
/** @typedef {import('../types/api.js').Flag} Flag */
/** @typedef {import('../types/api.js').ScalingPoint} ScalingPoint */
/** @typedef {import('../types/api.js').ScalingSeries} ScalingSeries */
/** @typedef {import('../types/api.js').ScalingFits} ScalingFits */
/** @typedef {import('../types/api.js').ModelPoint} ModelPoint */
/** @typedef {import('../types/api.js').FabricFitPublic} FabricFitPublic */
/** @typedef {import('../charts.js').Trace} Trace */
/** @typedef {import('../charts.js').Layout} Layout */
/** @typedef {import('./series.js').Series} Series */

/** A point of the scaling answer with its runs, and their own flags beside the point's. @typedef {ScalingPoint & { runs: string[] }} Point */

/** @param {CompareRow[]} rows */
const flagsOf = (rows) => rows.flatMap((row) => row.flags);

/**
 * The points of a series, as the scaling answer gives them. A point also carries its runs' own flags (an
 * oversubscribed run makes its point suspect).
 * @param {Series} series
 * @returns {Point[]}
 */
export function pointsOf(series) {
  return (series.analysis?.points ?? []).map((point) => {
    const rows = rowsOf(series, point);
    return { ...point, runs: rows.map((row) => row.run_id), flags: [...point.flags, ...flagsOf(rows)] };
  });
}

/** @typedef {{ scaling: ScalingSeries['scaling'], measure: ScalingSeries['measure'], baseline: number | null }} Mode */

/**
 * What a series' figures follow: its scaling mode, the time its points compare and its baseline's GPU count, as the
 * scaling answer says (a series it did not have yet: its rows' mode, and no baseline).
 * @param {Series} series
 * @returns {Mode}
 */
export function modeOf(series) {
  const { analysis } = series;
  if (analysis) return { scaling: analysis.scaling, measure: analysis.measure, baseline: analysis.baseline_gpus };
  const scaling = series.rows[0]?.scaling ?? 'strong';
  return { scaling, measure: scaling === 'weak' ? 'step_time_s' : 'epoch_time_s', baseline: null };
}

/** @typedef {number | null | undefined} Figure */

/**
 * Asymmetric error bars from an interval around each value; none where a point has no interval (one repeat).
 * @param {number[]} values
 * @param {Figure[]} lows
 * @param {Figure[]} highs
 */
export function errorBars(values, lows, highs) {
  if (!lows.some((low, i) => low !== null && low !== undefined && highs[i] !== null && highs[i] !== undefined)) return undefined;
  return {
    type: 'data', symmetric: false, visible: true, thickness: 1.5, width: 4,
    array: values.map((value, i) => { const high = highs[i]; return high === null || high === undefined ? 0 : Math.max(0, high - value); }),
    arrayminus: values.map((value, i) => { const low = lows[i]; return low === null || low === undefined ? 0 : Math.max(0, value - low); }),
  };
}

/**
 * @param {Figure} low
 * @param {Figure} high
 * @param {string} [unit]
 */
export function interval(low, high, unit = '') {
  return low === null || low === undefined || high === null || high === undefined
    ? '' : `, 95 % interval ${number(low)}–${number(high)}${unit}`;
}

/**
 * One trace of a series' points: `value` picks the figure and its interval from a point.
 * @param {Series} series
 * @param {Point[]} points
 * @param {(point: Point) => { y: Figure, low: Figure, high: Figure }} value
 * @param {string} unit
 * @returns {Trace}
 */
function pointTrace(series, points, value, unit) {
  const shown = points.map((point) => ({ point, ...value(point) }))
    .flatMap(({ y, ...item }) => (y === null || y === undefined ? [] : [{ ...item, y }]));
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

/**
 * The GPU counts to mark on an axis: those measured, and powers of two across any predicted range.
 * @param {number[]} counts
 * @param {number} [upTo]
 */
export function gpuAxis(counts, upTo = 0) {
  const ticks = new Set(counts);
  for (let g = 1; g <= upTo; g *= 2) if (g >= Math.min(...counts)) ticks.add(g);
  const sorted = [...ticks].sort((a, b) => a - b);
  return { title: { text: 'GPUs' }, type: 'log', tickvals: sorted, ticktext: sorted.map(String) };
}

/**
 * @param {Series} series
 * @param {string} name
 * @param {number[]} x
 * @param {number[]} y
 * @returns {Trace}
 */
export const idealLine = (series, name, x, y) => ({
  name, legendgroup: series.name, mode: 'lines', hoverinfo: 'skip', x, y,
  line: { color: series.colour, dash: 'dot', width: 1.5 },
});

const LAWS = { amdahl: { label: 'Amdahl fit', dash: 'dash' }, usl: { label: 'USL fit', dash: 'dashdot' } };

/**
 * Whether the server says a law describes the points it was fitted to: one that does not is not drawn.
 * @param {ScalingFits | undefined} fits
 * @param {string} law
 */
export function describes(fits, law) {
  const fitted = law === 'amdahl' ? fits?.amdahl : law === 'usl' ? fits?.usl : null;
  return Boolean(fitted?.describes_points);
}

/**
 * The curves of the laws that describe the series' points.
 * @param {Series} series
 * @returns {Trace[]}
 */
function fitTraces(series) {
  const predicted = series.analysis?.predicted ?? [];
  return Object.entries(LAWS).map(([law, look]) => {
    const points = predicted.filter((point) => point.law === law).sort((a, b) => a.gpus - b.gpus);
    if (!points.length || !describes(series.analysis?.fits, law)) return null;
    return {
      name: `${series.name}: ${look.label}`, legendgroup: series.name, mode: 'lines',
      x: points.map((point) => point.gpus), y: points.map((point) => point.speedup),
      // The series' name as a text, never in the template: plotly would read it as markup and %{...} placeholders.
      text: points.map(() => plotText(series.name)),
      hovertemplate: `${look.label}: speed-up %{y:.3g} with %{x} GPUs<extra>%{text}</extra>`,
      line: { color: series.colour, dash: look.dash, width: 1.5 }, opacity: 0.8,
    };
  }).filter((trace) => trace !== null);
}

/**
 * The step model's curve of a series (GET /api/prediction): the figure `pick` takes from each predicted point, where
 * the server predicted one; null where it predicted none. Its hover says the parts the step is made of.
 * @param {Series} series
 * @param {(point: ModelPoint) => number | null} pick
 * @returns {Trace | null}
 */
export function modelTrace(series, pick) {
  const points = (series.model?.points ?? []).flatMap((point) => {
    const y = point.step_time_s === null ? null : pick(point);
    return y === null ? [] : [{ point, y }];
  });
  if (!points.length) return null;
  return {
    name: `${series.name}: step model`, legendgroup: series.name, mode: 'lines+markers',
    x: points.map(({ point }) => point.gpus), y: points.map(({ y }) => y),
    text: points.map(({ point, y }) => `${number(y, 4)} predicted with ${point.gpus} GPUs: compute ${number(point.compute_s ?? 0, 3)} s`
      + ` + communication ${number(point.comm_s ?? 0, 3)} s + bubble ${number(point.bubble_s ?? 0, 3)} s per step`
      + (point.residual === null || point.residual === undefined ? '' : `<br>measured ${number(100 * point.residual, 3)} % off`)),
    hovertemplate: '%{text}<extra>%{fullData.name}</extra>',
    line: { color: series.colour, dash: 'longdash', width: 1.5 }, marker: { size: 6, symbol: 'diamond-open' },
  };
}

/**
 * The predicted figure a series' time chart compares: its epoch time (strong) or step time (weak).
 * @param {Series} series
 * @returns {(point: ModelPoint) => number | null}
 */
const modelTime = (series) => (modeOf(series).measure === 'step_time_s' ? (p) => p.step_time_s : (p) => p.epoch_time_s);

/**
 * "strong scaling", "weak scaling", or both where a selection mixes them; after a colon, what the runs train per
 * step as the server says it (a program's batch only where it declares it), where every series says the same.
 * @param {Series[]} series
 */
export function modeWords(series) {
  const modes = [...new Set(series.map((s) => modeOf(s).scaling))].sort();
  if (!modes.length) return '';
  if (modes.length > 1) return 'strong and weak scaling, per series';
  const batches = [...new Set(series.map((s) => s.analysis?.batch ?? null))];
  const batch = batches.length === 1 ? batches[0] : null;
  return `${modes[0]} scaling${batch ? `: ${batch}` : ''}`;
}

// What each measure a series may be compared by is, in words: the server chooses it (epoch or step time where every
// run timed its epochs, else run time) and this only names it.
const MEASURES = {
  epoch_time_s: { unit: 'seconds per epoch', words: 'epoch time (the median of each run\u2019s timed epochs)' },
  step_time_s: { unit: 'seconds per step', words: 'step time (the median of each run\u2019s timed steps)' },
  run_time_s: {
    unit: 'seconds per run (start-up included)',
    words: 'run time (the wall time of each run\u2019s launches, start-up included: its program printed no epoch line)',
  },
};

/** @param {Series[]} series */
function timeTitle(series) {
  const measures = new Set(series.map((s) => modeOf(s).measure));
  if (measures.size > 1) return 'seconds (per epoch, per step or per run: see the caption)';
  const [only] = measures;
  return only ? MEASURES[only].unit : MEASURES.epoch_time_s.unit;
}

/**
 * The caption that says what the series are measured by: one sentence when they all share a measure, else per series.
 * @param {Series[]} series
 */
export function measureWords(series) {
  const measured = series.filter((s) => s.analysis);
  const measures = new Set(measured.map((s) => modeOf(s).measure));
  if (!measures.size) return '';
  const [only] = measures;
  if (measures.size === 1) return `Measured by ${MEASURES[only].words}.`;
  return `Measured by: ${measured.map((s) => `${s.name}, ${MEASURES[modeOf(s).measure].words}`).join('; ')}.`;
}

/**
 * The three scaling charts, their captions' mode and the fit notes, in `root` (the dashboard).
 * @param {ParentNode} root
 * @param {Series[]} series
 * @param {number[]} allGpus
 * @param {FabricFitPublic[]} [fits] the fabric's fits the step model used
 */
export function drawScaling(root, series, allGpus, fits = []) {
  const points = new Map(series.map((s) => [s, pointsOf(s)]));
  /** @param {Series} s */
  const pointsOfSeries = (s) => points.get(s) ?? [];
  const predictedMax = Math.max(0, ...series.flatMap((s) => (s.analysis?.predicted ?? []).map((p) => p.gpus)));
  const x = gpuAxis(allGpus);
  const wide = gpuAxis(allGpus, predictedMax);

  /** @param {Series} s */
  const baselineOf = (s) => {
    const { baseline } = modeOf(s);
    return pointsOfSeries(s).find((point) => point.gpus === baseline) ?? null;
  };
  const times = series.flatMap((s) => {
    const base = baselineOf(s);
    const gpus = pointsOfSeries(s).map((point) => point.gpus);
    const weak = modeOf(s).scaling === 'weak';
    return [
      pointTrace(s, pointsOfSeries(s), (p) => ({ y: p.mean, low: p.ci_low, high: p.ci_high }), ' s'),
      // Strong: the baseline's time shared out over the GPUs; weak: the baseline's time, unchanged.
      base && idealLine(s, `${s.name}: ideal`, gpus, gpus.map((g) => (weak ? base.mean : (base.mean * base.gpus) / g))),
      s.model?.scaling === modeOf(s).scaling ? modelTrace(s, modelTime(s)) : null,
    ].filter(isTrace);
  });
  const timeValues = times.filter((t) => !t.hoverinfo).flatMap((t) => t.y); // the points and the model, not the ideal
  draw(byId(root, 'chart-epoch-time'), times, {
    xaxis: x, yaxis: { title: { text: timeTitle(series) }, type: 'log', range: minimumSpan(timeValues, { log: true }) },
  });

  draw(byId(root, 'chart-speedup'), series.flatMap((s) => {
    const { baseline } = modeOf(s);
    const gpus = [...new Set([...pointsOfSeries(s).map((p) => p.gpus), ...(s.analysis?.predicted ?? []).map((p) => p.gpus)])]
      .sort((a, b) => a - b);
    return [
      pointTrace(s, pointsOfSeries(s), (p) => ({ y: p.speedup, low: p.speedup_ci_low, high: p.speedup_ci_high }), ''),
      baseline && idealLine(s, `${s.name}: ideal`, gpus, gpus.map((g) => g / baseline)),
      ...fitTraces(s),
      modelTrace(s, (p) => p.speedup),
    ].filter(isTrace);
  }), { xaxis: wide, yaxis: { title: { text: 'speed-up' }, rangemode: 'tozero' } });

  // The efficiency's interval is the speed-up's, over the same ratio of GPUs that makes efficiency of speed-up.
  /** @param {Series} s @param {Point} p */
  const ratio = (s, p) => {
    const { baseline } = modeOf(s);
    return baseline ? baseline / p.gpus : null;
  };
  /** @param {Series} s @param {Point} p @param {Figure} value */
  const scaled = (s, p, value) => {
    const factor = ratio(s, p);
    return value === null || value === undefined || factor === null ? null : value * factor;
  };
  draw(byId(root, 'chart-efficiency'), [
    ...series.map((s) => pointTrace(s, pointsOfSeries(s), (p) => ({
      y: p.efficiency, low: scaled(s, p, p.speedup_ci_low), high: scaled(s, p, p.speedup_ci_high),
    }), '')),
    ...series.map((s) => modelTrace(s, (p) => p.efficiency)).filter(isTrace),
    { name: 'ideal', mode: 'lines', x: x.tickvals, y: x.tickvals.map(() => 1), hoverinfo: 'skip', line: { color: '#555', dash: 'dot', width: 1.5 } },
  ], { xaxis: x, yaxis: { title: { text: 'efficiency' }, rangemode: 'tozero' } });

  for (const id of ['mode-epoch-time', 'mode-speedup', 'mode-efficiency']) {
    const element = optionalById(root, id);
    if (element) element.textContent = series.length ? ` (${modeWords(series).split(':')[0]})` : '';
  }
  const description = optionalById(root, 'scaling-mode');
  if (description) description.textContent = series.length ? `These figures follow ${modeWords(series)}.` : '';
  const measure = optionalById(root, 'scaling-measure');
  if (measure) {
    measure.textContent = measureWords(series);
    measure.dataset.measure = [...new Set(series.filter((s) => s.analysis).map((s) => modeOf(s).measure))].join(' ');
  }
  const notes = optionalById(root, 'fit-notes');
  if (notes) drawFitNotes(notes, series, fits);
}

/**
 * @param {Trace | null | 0} trace
 * @returns {trace is Trace}
 */
export const isTrace = (trace) => Boolean(trace);

/**
 * Below the speed-up chart: each series' recommendation (marked as the server gave, hedged or withheld it), the
 * server's sentence of its fits, and what its runs train per step.
 * @param {HTMLElement} notes
 * @param {Series[]} series
 * @param {FabricFitPublic[]} fits
 */
function drawFitNotes(notes, series, fits) {
  const laws = series.flatMap((s) => (s.analysis ? [s.analysis] : [])).map((analysis) => h('p', { class: 'fit', dataset: { series: analysis.series, advice: analysis.advice } },
    h('strong', {}, `${analysis.series}: `), h('span', { class: `recommendation advice-${analysis.advice}` }, analysis.recommendation), ' ',
    h('span', { class: 'fit-parameters' }, analysis.fits.summary), ' ',
    h('span', { class: 'batch' }, `Its runs: ${analysis.batch}.`)));
  const models = series.flatMap((s) => (s.model ? [s.model] : [])).map((model) => h('p', { class: 'model', dataset: { series: model.series } },
    h('strong', {}, `${model.series}, step model: `), model.basis,
    ...model.points.filter((point) => point.unavailable).map((point) => ` ${point.gpus} GPUs: ${point.unavailable}.`)));
  const fabric = fits.length ? [h('p', { class: 'fabric-fits' }, `Fabric fits: ${fabricWords(fits)}.`)] : [];
  replaceChildren(notes, [...laws, ...models, ...fabric]);
}

/**
 * The fabric's fits in words: per tier its latency and bandwidth.
 * @param {FabricFitPublic[]} fits
 */
export function fabricWords(fits) {
  return fits.map((fit) => `${fit.tier.replace('_', '-')} \u03b1 ${number(fit.alpha_s * 1e6, 3)} \u00b5s, \u03b2 ${number(fit.beta_bytes_per_s / 1e9, 3)} GB/s`).join('; ');
}

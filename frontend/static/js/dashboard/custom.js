// @ts-check
// "Your metrics": any numeric figure a program prints in its epoch records besides the standard ones (the compare
// answer's metric_names; each row's `metrics` holds its last counting epoch's, each history point its epoch's),
// chosen in a menu beside the standard epoch figures, and charted against GPUs per series and over the epochs of
// each run. The run page draws its own metrics with the same menu.

import { draw, minimumSpan } from '../charts.js';
import { byId, h, replaceChildren } from '../dom.js';
import { number } from '../format.js';
import { rowsOf } from './series.js';

/** @typedef {import('../types/api.js').CompareRow} CompareRow */
/** @typedef {import('../types/api.js').EpochPoint} EpochPoint */
/** @typedef {import('../types/api.js').ScalingPoint} ScalingPoint */
/** @typedef {Record<string, EpochPoint[]>} Histories run id -> its epochs */
/** @typedef {import('../charts.js').Trace} Trace */
/** @typedef {import('../charts.js').Layout} Layout */
/** @typedef {import('./series.js').Series} Series */
/** @typedef {'train_loss' | 'val_loss' | 'val_accuracy' | 'epoch_time_s' | 'samples_per_s'} StandardName */
/** A compare row's field, and a point's median of it. @typedef {'final_train_loss' | 'final_val_loss' | 'final_val_accuracy' | 'mean_epoch_time_s' | 'samples_per_s'} StandardField */

const MAX_CURVES = 24; // runs drawn over epochs at most, as the loss curves

/**
 * The standard figures of an epoch record, with the compare row's field that holds a run's figure of it (and the
 * scaling point's that holds their median over the point's runs).
 * @type {{ name: StandardName, label: string, row: StandardField }[]}
 */
const STANDARD = [
  { name: 'train_loss', label: 'train loss', row: 'final_train_loss' },
  { name: 'val_loss', label: 'validation loss', row: 'final_val_loss' },
  { name: 'val_accuracy', label: 'validation accuracy', row: 'final_val_accuracy' },
  { name: 'epoch_time_s', label: 'epoch time (s)', row: 'mean_epoch_time_s' },
  { name: 'samples_per_s', label: 'samples per second', row: 'samples_per_s' },
];
/** @param {string} name */
const standard = (name) => STANDARD.find((figure) => figure.name === name);

/**
 * @param {unknown} value
 * @returns {number | null}
 */
const finite = (value) => (typeof value === 'number' && Number.isFinite(value) ? value : null);

/**
 * A figure's words: a standard one's label, a program's own its name.
 * @param {string} name
 */
export function metricLabel(name) {
  return standard(name)?.label ?? name;
}

/**
 * A figure of one epoch (a history point), standard or the program's own; null where it has none.
 * @param {EpochPoint} point
 * @param {string} name
 */
export function epochValue(point, name) {
  const figure = standard(name);
  return finite(figure ? point[figure.name] : point.metrics[name]);
}

/**
 * A run's figure (a compare row): its last counting epoch's, or for the standard ones the row's own summary.
 * @param {CompareRow} row
 * @param {string} name
 */
export function rowValue(row, name) {
  const figure = standard(name);
  return finite(figure ? row[figure.row] : row.metrics[name]);
}

/**
 * A point's figure: the scaling answer's median over the point's runs of their figure; null where none has it.
 * @param {ScalingPoint} point
 * @param {string} name
 */
export function pointValue(point, name) {
  const figure = standard(name);
  return finite(figure ? point.medians[figure.row] : point.medians.metrics[name]);
}

// The menu: the program's own metrics first, then the standard figures; the chosen one stays chosen while it is
// there. Returns the chosen name.
/**
 * @param {HTMLSelectElement} select
 * @param {string[]} names
 */
export function fillMenu(select, names) {
  const kept = select.value;
  /** @param {{ name: string, label: string }[]} figures */
  const options = (figures) => figures.map((figure) => h('option', { value: figure.name }, figure.label));
  replaceChildren(select,
    h('optgroup', { label: 'Its own' }, options(names.map((name) => ({ name, label: name })))),
    h('optgroup', { label: 'Standard' }, options(STANDARD)));
  select.value = [...select.options].some((option) => option.value === kept) ? kept : names[0] ?? STANDARD[0].name;
  return select.value;
}

/**
 * The names of the program metrics found in histories (the run page has no metric_names of its own).
 * @param {EpochPoint[]} points
 */
export function namesIn(points) {
  return [...new Set(points.flatMap((point) => Object.keys(point.metrics)))].sort();
}

// ---- the dashboard's section ---------------------------------------------------------------------------------

/**
 * A series' points against GPUs: the scaling answer's median over each point's runs of their figure, with the runs
 * that have it.
 * @param {Series} series
 * @param {string} name
 * @returns {Trace}
 */
export function byGpus(series, name) {
  const points = (series.analysis?.points ?? []).map((point) => ({
    gpus: point.gpus, rows: rowsOf(series, point).filter((row) => rowValue(row, name) !== null), value: pointValue(point, name),
  })).filter((point) => point.value !== null);
  return {
    name: series.name, legendgroup: series.name, mode: 'lines+markers', line: { color: series.colour }, marker: { size: 8 },
    x: points.map((point) => point.gpus), y: points.map((point) => point.value),
    text: points.map((point) => `${number(point.value, 4)} with ${point.gpus} GPUs (${point.rows.length > 1
      ? `median of ${point.rows.length}: ` : 'run '}${point.rows.map((row) => row.run_id).join(', ')})`),
    hovertemplate: '%{text}<extra>%{fullData.name}</extra>',
  };
}

const DASHES = ['solid', 'dash', 'longdash', 'dashdot']; // the runs of one series (one colour) told apart

/**
 * @param {Series[]} series
 * @param {Histories} histories
 * @param {string} name
 * @returns {Trace[]}
 */
function overEpochs(series, histories, name) {
  return series.flatMap((s) => s.rows.map((row, index) => ({ row, s, index }))).slice(0, MAX_CURVES)
    .map(({ row, s, index }) => {
      const points = (histories[row.run_id] ?? []).filter((point) => epochValue(point, name) !== null);
      return {
        name: `${s.name}, ${row.gpus} GPUs (${row.run_id})`, legendgroup: row.run_id, mode: 'lines+markers',
        line: { color: s.colour, dash: DASHES[index % DASHES.length] },
        x: points.map((point) => point.epoch), y: points.map((point) => epochValue(point, name)),
      };
    });
}

/**
 * A y axis that does not magnify the noise between runs into a trend.
 * @param {Trace[]} traces
 * @param {string} label
 */
const yaxis = (traces, label) => ({ title: { text: label }, range: minimumSpan(traces.flatMap((trace) => trace.y)) });

/** @typedef {{ series: Series[], histories: Histories, gpuAxis: Layout }} Figures the figures last drawn */

/**
 * The section (the page's #custom-metrics), shown only when a run of the selection printed a metric of its own; its
 * menu redraws the charts with the figures last drawn.
 * @param {HTMLElement} section
 */
export function customMetrics(section) {
  /** @type {HTMLSelectElement} */
  const choice = byId(section, 'metric-choice');
  /** @type {Figures | null} */
  let latest = null;

  function drawChosen() {
    if (!latest) return;
    const { series, histories, gpuAxis } = latest;
    const name = choice.value;
    const label = metricLabel(name);
    for (const id of ['metric-gpus', 'metric-epochs']) byId(section, `mode-${id}`).textContent = `: ${label}`;
    const perGpus = series.map((s) => byGpus(s, name));
    draw(byId(section, 'chart-metric-gpus'), perGpus, { xaxis: gpuAxis, yaxis: yaxis(perGpus, label) }, 'No run has this figure yet');
    const perEpoch = overEpochs(series, histories, name);
    draw(byId(section, 'chart-metric-epochs'), perEpoch, { xaxis: { title: { text: 'epoch' }, dtick: 1 }, yaxis: yaxis(perEpoch, label) },
      'No run has this figure yet');
  }
  choice.addEventListener('change', drawChosen);

  return {
    /**
     * @param {Figures} figures
     * @param {string[]} metricNames the compare answer's: the programs' own metrics of the selection
     */
    draw(figures, metricNames) {
      section.hidden = !metricNames.length;
      if (section.hidden) return;
      latest = figures;
      fillMenu(choice, metricNames);
      drawChosen();
    },
  };
}

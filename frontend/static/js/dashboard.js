// @ts-check
// The comparison dashboard, of an experiment or of any selection of runs: the flags that say which figures not to
// trust, scaling charts, where the step time goes, what the runs cost, time to accuracy where there is a target,
// programs' own metrics, the numbers as a table, and exports. The figures come from the compare endpoint (rows,
// grouped into series, with speed-up and efficiency within the selection) and the scaling endpoint (each series'
// points over repeats and its fitted laws); dashboard/ draws them, one module per kind of chart. The page mounts it
// on its <main>.

import { finalStates, getJSON, pageData, poll, url } from './api.js';
import { addDownloads, draw, minimumSpan } from './charts.js';
import { drawBreakdown } from './dashboard/breakdown.js';
import { drawEpochTimes } from './dashboard/epochs.js';
import { customMetrics } from './dashboard/custom.js';
import { drawFlagList, rowMarker, worst } from './dashboard/flags.js';
import { drawMemory } from './dashboard/memory.js';
import { drawResources } from './dashboard/resources.js';
import { drawScaling, gpuAxis } from './dashboard/scaling.js';
import { allGpus, groupSeries } from './dashboard/series.js';
import { drawTimeToTarget } from './dashboard/target.js';
import { hasTarget, targetCells } from './dashboard/target-series.js';
import { mfuCell, utilizationText } from './dashboard/utilization.js';
import { byId, drawStateCounts, h, one, replaceChildren } from './dom.js';
import { bytes, number } from './format.js';

/** @typedef {import('./types/api.js').ComparePublic} ComparePublic */
/** @typedef {import('./types/api.js').CompareRow} CompareRow */
/** @typedef {import('./types/api.js').EpochPoint} EpochPoint */
/** @typedef {import('./types/api.js').ScalingPublic} ScalingPublic */
/** @typedef {import('./types/api.js').PredictionPublic} PredictionPublic */
/** @typedef {import('./charts.js').Trace} Trace */
/** @typedef {import('./dashboard/series.js').Series} Series */

/**
 * What one poll reads: the rows, their epochs, the scaling analysis, the rows by series and the programs' own
 * metrics.
 * @typedef {{ rows: CompareRow[], histories: Record<string, EpochPoint[]>, scaling: ScalingPublic, series: Series[],
 *   metricNames: string[], prediction: PredictionPublic }} Figures
 */

/**
 * What the page says it compares: an experiment's runs, or a selection of runs (and the experiments they are of).
 * @typedef {{ mode: 'experiment', experiments: string[] } | { mode: 'selection', experiments: string[], runs: string[] }} Page
 */

const MAX_CURVES = 24; // loss curves drawn at most: beyond, the chart is unreadable anyway

/**
 * The query that names the page's selection.
 * @param {Page} page
 */
export function selectionQuery(page) {
  return new URLSearchParams(page.mode === 'experiment'
    ? page.experiments.map((id) => ['experiment_id', id])
    : page.runs.map((id) => ['run_id', id]));
}

/**
 * @param {URLSearchParams} selection
 * @returns {Promise<Figures>}
 */
async function load(selection) {
  /** @type {[ComparePublic, ScalingPublic, PredictionPublic]} */
  const [compare, scaling, prediction] = await Promise.all([
    getJSON(`/api/compare?${selection}&history=true`), getJSON(`/api/scaling?${selection}`), getJSON(`/api/prediction?${selection}`),
  ]);
  return {
    rows: compare.data, histories: compare.histories ?? {}, scaling, series: groupSeries(compare.data, scaling, prediction),
    metricNames: compare.metric_names, prediction,
  };
}

// ---- charts ------------------------------------------------------------------------------------------------

/**
 * One figure of each run of a series against its GPUs.
 * @param {Series} series
 * @param {keyof CompareRow} key
 * @param {number} [scale]
 * @returns {Trace}
 */
function trace(series, key, scale = 1) {
  const rows = series.rows.flatMap((row) => {
    const value = row[key];
    return typeof value === 'number' ? [{ row, value }] : [];
  });
  return {
    name: series.name, legendgroup: series.name, mode: 'lines+markers',
    x: rows.map(({ row }) => row.gpus), y: rows.map(({ value }) => value / scale),
    text: rows.map(({ row }) => row.run_id), hovertemplate: '%{y:.4g} with %{x} GPUs (run %{text})<extra>%{fullData.name}</extra>',
    line: { color: series.colour }, marker: { size: 8 },
  };
}

/**
 * A chart of one figure per run against GPUs, whose axis does not zoom into the noise between runs.
 * @param {HTMLElement} element
 * @param {Series[]} series
 * @param {keyof CompareRow} key
 * @param {string} title
 * @param {{ scale?: number, tozero?: boolean }} [options]
 */
function drawPerRun(element, series, key, title, { scale = 1, tozero = false } = {}) {
  const traces = series.map((s) => trace(s, key, scale));
  const range = tozero ? undefined : minimumSpan(traces.flatMap((t) => t.y));
  draw(element, traces, { xaxis: gpuAxis(allGpus(series)), yaxis: { title: { text: title }, rangemode: tozero ? 'tozero' : undefined, range } });
}

/**
 * @param {ParentNode} root
 * @param {Figures} figures
 */
function drawCharts(root, { rows, series, prediction }) {
  drawScaling(root, series, allGpus(series), prediction.fits);
  drawBreakdown(root, series);
  drawResources(root, rows, series, gpuAxis(allGpus(series)));
  drawPerRun(byId(root, 'chart-val-loss'), series, 'final_val_loss', 'validation loss');
  drawPerRun(byId(root, 'chart-val-accuracy'), series, 'final_val_accuracy', 'validation accuracy');
  drawMemory(root, series, gpuAxis(allGpus(series)));
  drawTimeToTarget(root, rows, series);
}

/**
 * The runs whose curves are drawn (the first MAX_CURVES), each with its series and a dash that tells apart the runs
 * of one series.
 * @param {Series[]} series
 */
function curveRuns(series) {
  const shown = series.flatMap((s) => s.rows.map((row) => ({ row, s }))).slice(0, MAX_CURVES);
  return shown.map(({ row, s }, index) => ({
    row, s, name: `${s.name}, ${row.gpus} GPUs (${row.run_id})`,
    dash: ['solid', 'dash', 'longdash', 'dashdot'][shown.slice(0, index).filter((other) => other.s === s).length % 4],
  }));
}

/**
 * The loss curves of the first MAX_CURVES runs; returns how many were drawn.
 * @param {HTMLElement} element
 * @param {Figures} figures
 */
function drawCurves(element, { histories, series }) {
  const shown = curveRuns(series);
  const traces = shown.flatMap(({ row, s, name, dash }) => {
    const records = histories[row.run_id] ?? [];
    const x = records.map((record) => record.epoch);
    return [
      { name, legendgroup: row.run_id, mode: 'lines+markers', x, y: records.map((r) => r.train_loss), line: { color: s.colour, dash } },
      { name: `${name} validation`, legendgroup: row.run_id, mode: 'lines', x, y: records.map((r) => r.val_loss ?? null),
        line: { color: s.colour, dash: 'dot' }, showlegend: false },
    ];
  });
  draw(element, traces, { xaxis: { title: { text: 'epoch' }, dtick: 1 }, yaxis: { title: { text: 'loss' } } });
  return shown.length;
}

// ---- table and exports -------------------------------------------------------------------------------------

/**
 * A point's mean with the half-width of its interval, as "12.3 ± 0.4" (just the mean with one repeat).
 * @param {CompareRow} row
 */
export function meanWithInterval(row) {
  if (row.point_mean_s === null) return number(row.mean_epoch_time_s);
  const low = row.point_ci_low_s;
  const high = row.point_ci_high_s;
  if (low === null || high === null) return number(row.point_mean_s);
  return `${number(row.point_mean_s)} ± ${number((high - low) / 2, 2)}`;
}

/**
 * @param {HTMLTableSectionElement} body
 * @param {Figures} figures
 */
function drawTable(body, { rows, series }) {
  // The target's columns only where the figures have a target.
  const target = hasTarget(rows, series);
  const table = /** @type {HTMLTableElement} */ (body.closest('table'));
  for (const th of /** @type {NodeListOf<HTMLElement>} */ (table.querySelectorAll('thead .target-col'))) th.hidden = !target;
  /** @param {number | null} value @param {string} [text] @param {string | null} [title] @param {string} [kind] */
  const cell = (value, text = number(value), title = null, kind = '') => h('td', { class: `num ${kind}`.trim(), title }, text);
  /** @param {CompareRow} row */
  const speedupInterval = (row) => (row.speedup_ci_low !== null
    ? `95 % interval ${number(row.speedup_ci_low)}–${number(row.speedup_ci_high)}` : null);
  replaceChildren(body, series.flatMap((s) => s.rows.map((row) => h('tr', {
    class: worst(row.flags) === 'warning' ? 'warning' : null, dataset: { run: row.run_id, flags: String(row.flags.length) },
  },
  h('th', { scope: 'row' }, h('a', { href: url(`/runs/${row.run_id}`) }, row.run_id)),
  h('td', {}, h('span', { class: 'state', dataset: { state: row.state } }, row.state)),
  h('td', { class: 'flags' }, rowMarker(row.flags)),
  h('td', {}, s.name), cell(row.gpus), cell(row.nodes), cell(row.global_batch_size), cell(row.epochs_done),
  cell(row.mean_epoch_time_s), cell(row.run_time_s, number(row.run_time_s), null, 'run-time'),
  h('td', { class: 'num point' }, meanWithInterval(row)), cell(row.point_n || null),
  cell(row.speedup, number(row.speedup), speedupInterval(row)), cell(row.efficiency), cell(row.final_train_loss),
  cell(row.final_val_loss), cell(row.final_val_accuracy), cell(row.samples_per_s),
  cell(row.mfu ?? row.mfu_datasheet ?? null, mfuCell(row), utilizationText(row), 'mfu'),
  cell(row.peak_memory_bytes, bytes(row.peak_memory_bytes)),
  target && targetColumns(row)))));
}

/**
 * A row's cells in the target's columns.
 * @param {CompareRow} row
 */
function targetColumns(row) {
  const { reached, epochs, seconds, effective } = targetCells(row);
  const title = row.statistical_efficiency === null ? null : `statistical efficiency ${number(row.statistical_efficiency)}`;
  return [h('td', { class: 'target-reached', dataset: { reached: String(row.target_reached) } }, reached),
    h('td', { class: 'num' }, epochs), h('td', { class: 'num' }, seconds), h('td', { class: 'num effective', title }, effective)];
}

/**
 * @param {ParentNode} root
 * @param {URLSearchParams} selection
 * @param {string} exportName
 */
function setExports(root, selection, exportName) {
  /** @type {HTMLAnchorElement} */
  const csvLink = byId(root, 'export-csv');
  /** @type {HTMLAnchorElement} */
  const jsonLink = byId(root, 'export-json');
  csvLink.href = url(`/api/compare.csv?${selection}`);
  csvLink.download = `${exportName}.csv`;
  jsonLink.href = url(`/api/compare?${selection}`);
  jsonLink.download = `${exportName}.json`;
}

/**
 * Draws the dashboard in `root` (the page's <main>) and follows the runs until all their figures are final.
 * @param {HTMLElement} root
 * @returns {() => void} stops following
 */
export function mount(root) {
  const final = finalStates();
  /** @type {Page} */
  const page = pageData();
  const selection = selectionQuery(page);
  const exportName = `scalelab-${page.mode === 'experiment' ? page.experiments[0] : 'selection'}`;
  const status = byId(root, 'dash-status');
  const custom = customMetrics(byId(root, 'custom-metrics'));

  async function step() {
    const figures = await load(selection);
    drawFlagList(byId(root, 'flags'), figures.rows, figures.scaling);
    drawCharts(root, figures);
    drawTable(one(root, '#compare-table tbody'), figures);
    const curves = drawCurves(byId(root, 'chart-loss-curves'), figures);
    drawEpochTimes(byId(root, 'chart-epoch-times'), curveRuns(figures.series).map(({ row, s, name, dash }) => ({
      runId: row.run_id, name, colour: s.colour, dash, points: figures.histories[row.run_id] ?? [],
    })));
    custom.draw({ series: figures.series, histories: figures.histories, gpuAxis: gpuAxis(allGpus(figures.series)) }, figures.metricNames);
    const live = figures.rows.filter((row) => !final.has(row.state) || !row.ingest_done).length;
    const capped = figures.rows.length > curves ? ` Loss curves and epoch times of the first ${curves} runs.` : '';
    status.textContent = (live
      ? `${figures.rows.length} runs, ${live} not finished: the figures follow them.`
      : `${figures.rows.length} runs, all finished.`) + capped;
    drawStateCounts(root, figures.rows);
    byId(root, 'charts').dataset.ready = live ? 'live' : 'final';
    return live > 0;
  }

  setExports(root, selection, exportName);
  addDownloads(root, exportName);
  return poll(step, 5000, (error) => { status.textContent = `The figures cannot be read: ${error.message}`; });
}

// The comparison dashboard, of an experiment or of any selection of runs: the flags that say which figures not to
// trust, scaling charts, where the step time goes, what the runs cost, programs' own metrics, the numbers as a
// table, and exports. The
// figures come from the compare endpoint (rows, grouped into series, with speed-up and efficiency within the
// selection) and the scaling endpoint (each series' points over repeats and its fitted laws); dashboard/ draws
// them, one module per kind of chart.

import { ApiError, finalStates, getJSON, pageData, poll, url } from './api.js';
import { addDownloads, COLOURS, draw, minimumSpan } from './charts.js';
import { drawBreakdown } from './dashboard/breakdown.js';
import { drawCustom } from './dashboard/custom.js';
import { drawFlagList, rowMarker, worst } from './dashboard/flags.js';
import { drawMemory } from './dashboard/memory.js';
import { drawResources } from './dashboard/resources.js';
import { drawScaling, gpuAxis } from './dashboard/scaling.js';
import { drawStateCounts, h, replaceChildren } from './dom.js';
import { bytes, number } from './format.js';

const FINAL = finalStates();
const page = pageData();
const status = document.getElementById('dash-status');
const MAX_CURVES = 24; // loss curves drawn at most: beyond, the chart is unreadable anyway

const selection = new URLSearchParams(page.mode === 'experiment'
  ? page.experiments.map((id) => ['experiment_id', id])
  : page.runs.map((id) => ['run_id', id]));
const exportName = `scalelab-${page.mode === 'experiment' ? page.experiments[0] : 'selection'}`;

// Rows by series, each series with its colour and the scaling endpoint's analysis of it (null where none).
function groupSeries(rows, scaling) {
  const groups = new Map();
  for (const row of rows) {
    if (!groups.has(row.series)) groups.set(row.series, []);
    groups.get(row.series).push(row);
  }
  return [...groups.entries()].map(([name, members], index) => ({
    name, colour: COLOURS[index % COLOURS.length], rows: members.sort((a, b) => a.gpus - b.gpus),
    analysis: scaling?.series.find((analysis) => analysis.series === name) ?? null,
  }));
}

// The scaling analysis, or null from a server without it (404): the charts then draw the rows' own point figures.
async function loadScaling() {
  try {
    return await getJSON(`/api/scaling?${selection}`);
  } catch (error) {
    if (error instanceof ApiError && error.status === 404) return null;
    throw error;
  }
}

async function load() {
  const [compare, scaling] = await Promise.all([getJSON(`/api/compare?${selection}&history=true`), loadScaling()]);
  return {
    rows: compare.data, histories: compare.histories, scaling, series: groupSeries(compare.data, scaling),
    metricNames: compare.metric_names ?? [], // the programs' own figures (a server before them sends none)
  };
}

// ---- charts ------------------------------------------------------------------------------------------------

function trace(series, key, scale = 1) {
  const rows = series.rows.filter((row) => row[key] !== null && row[key] !== undefined);
  return {
    name: series.name, legendgroup: series.name, mode: 'lines+markers',
    x: rows.map((row) => row.gpus), y: rows.map((row) => row[key] / scale),
    text: rows.map((row) => row.run_id), hovertemplate: '%{y:.4g} with %{x} GPUs (run %{text})<extra>%{fullData.name}</extra>',
    line: { color: series.colour }, marker: { size: 8 },
  };
}

const allGpus = (series) => [...new Set(series.flatMap((s) => s.rows.map((row) => row.gpus)))].sort((a, b) => a - b);

// A chart of one figure per run against GPUs, whose axis does not zoom into the noise between runs.
function drawPerRun(id, series, key, title, { scale = 1, tozero = false } = {}) {
  const traces = series.map((s) => trace(s, key, scale));
  const range = tozero ? undefined : minimumSpan(traces.flatMap((t) => t.y));
  draw(id, traces, { xaxis: gpuAxis(allGpus(series)), yaxis: { title: { text: title }, rangemode: tozero ? 'tozero' : undefined, range } });
}

function drawCharts({ rows, series }) {
  drawScaling(series, allGpus(series));
  drawBreakdown(series);
  drawResources(rows, series, gpuAxis(allGpus(series)));
  drawPerRun('chart-val-loss', series, 'final_val_loss', 'validation loss');
  drawPerRun('chart-val-accuracy', series, 'final_val_accuracy', 'validation accuracy');
  drawMemory(series, gpuAxis(allGpus(series)));
}

function drawCurves({ histories, series }) {
  const shown = series.flatMap((s) => s.rows.map((row) => ({ row, s }))).slice(0, MAX_CURVES);
  const traces = shown.flatMap(({ row, s }, index) => {
    const records = histories[row.run_id];
    const name = `${s.name}, ${row.gpus} GPUs (${row.run_id})`;
    const x = records.map((record) => record.epoch);
    const dash = ['solid', 'dash', 'longdash', 'dashdot'][shown.slice(0, index).filter((other) => other.s === s).length % 4];
    return [
      { name, legendgroup: row.run_id, mode: 'lines+markers', x, y: records.map((r) => r.train_loss), line: { color: s.colour, dash } },
      { name: `${name} validation`, legendgroup: row.run_id, mode: 'lines', x, y: records.map((r) => r.val_loss ?? null),
        line: { color: s.colour, dash: 'dot' }, showlegend: false },
    ];
  });
  draw('chart-loss-curves', traces, { xaxis: { title: { text: 'epoch' }, dtick: 1 }, yaxis: { title: { text: 'loss' } } });
  return shown.length;
}

// ---- table and exports -------------------------------------------------------------------------------------

// A point's mean with the half-width of its interval, as "12.3 ± 0.4" (just the mean with one repeat).
function meanWithInterval(row) {
  if (row.point_mean_s === null || row.point_mean_s === undefined) return number(row.mean_epoch_time_s);
  const low = row.point_ci_low_s;
  const high = row.point_ci_high_s;
  if (low === null || low === undefined || high === null || high === undefined) return number(row.point_mean_s);
  return `${number(row.point_mean_s)} ± ${number((high - low) / 2, 2)}`;
}

function drawTable({ series }) {
  const cell = (value, text = number(value), title = null) => h('td', { class: 'num', title }, text);
  const speedupInterval = (row) => (row.speedup_ci_low !== null && row.speedup_ci_low !== undefined
    ? `95 % interval ${number(row.speedup_ci_low)}–${number(row.speedup_ci_high)}` : null);
  replaceChildren(document.querySelector('#compare-table tbody'), series.flatMap((s) => s.rows.map((row) => h('tr', {
    class: worst(row.flags) === 'warning' ? 'warning' : null, dataset: { run: row.run_id, flags: String(row.flags?.length ?? 0) },
  },
  h('th', { scope: 'row' }, h('a', { href: url(`/runs/${row.run_id}`) }, row.run_id)),
  h('td', {}, h('span', { class: 'state', dataset: { state: row.state } }, row.state)),
  h('td', { class: 'flags' }, rowMarker(row.flags)),
  h('td', {}, s.name), cell(row.gpus), cell(row.nodes), cell(row.global_batch_size), cell(row.epochs_done),
  cell(row.mean_epoch_time_s), h('td', { class: 'num point' }, meanWithInterval(row)), cell(row.point_n || null),
  cell(row.speedup, number(row.speedup), speedupInterval(row)), cell(row.efficiency), cell(row.final_train_loss),
  cell(row.final_val_loss), cell(row.final_val_accuracy), cell(row.samples_per_s),
  cell(row.peak_memory_bytes, bytes(row.peak_memory_bytes))))));
}

function setExports() {
  const csvLink = document.getElementById('export-csv');
  const jsonLink = document.getElementById('export-json');
  csvLink.href = url(`/api/compare.csv?${selection}`);
  csvLink.download = `${exportName}.csv`;
  jsonLink.href = url(`/api/compare?${selection}`);
  jsonLink.download = `${exportName}.json`;
}

async function step() {
  const figures = await load();
  drawFlagList(figures.rows, figures.scaling);
  drawCharts(figures);
  drawTable(figures);
  const curves = drawCurves(figures);
  drawCustom(figures, figures.metricNames, gpuAxis(allGpus(figures.series)));
  const live = figures.rows.filter((row) => !FINAL.has(row.state) || !row.ingest_done).length;
  const capped = figures.rows.length > curves ? ` Loss curves of the first ${curves} runs.` : '';
  status.textContent = (live
    ? `${figures.rows.length} runs, ${live} not finished: the figures follow them.`
    : `${figures.rows.length} runs, all finished.`) + capped;
  drawStateCounts(figures.rows);
  document.getElementById('charts').dataset.ready = live ? 'live' : 'final';
  return live > 0;
}

setExports();
addDownloads(exportName);
poll(step, 5000, (error) => { status.textContent = `The figures cannot be read: ${error.message}`; });

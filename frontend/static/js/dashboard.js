// The comparison dashboard, of an experiment or of any selection of runs: scaling charts, the numbers as a
// table, and exports. Everything comes from one call of the compare endpoint, which groups the runs into series
// and computes speed-up and efficiency within the selection.

import { finalStates, getJSON, pageData, poll, url } from './api.js';
import { addDownloads, COLOURS, draw } from './charts.js';
import { drawStateCounts, h, replaceChildren } from './dom.js';
import { bytes, number } from './format.js';

const FINAL = finalStates();
const page = pageData();
const status = document.getElementById('dash-status');
const MAX_CURVES = 24; // loss curves drawn at most: beyond, the chart is unreadable anyway
const MIB = 1024 * 1024;

const selection = new URLSearchParams(page.mode === 'experiment'
  ? page.experiments.map((id) => ['experiment_id', id])
  : page.runs.map((id) => ['run_id', id]));
const exportName = `scalelab-${page.mode === 'experiment' ? page.experiments[0] : 'selection'}`;

function groupSeries(rows) {
  const groups = new Map();
  for (const row of rows) {
    if (!groups.has(row.series)) groups.set(row.series, []);
    groups.get(row.series).push(row);
  }
  return [...groups.entries()].map(([name, members], index) => ({
    name, colour: COLOURS[index % COLOURS.length], rows: members.sort((a, b) => a.gpus - b.gpus),
  }));
}

async function load() {
  const compare = await getJSON(`/api/compare?${selection}&history=true`);
  return { rows: compare.data, histories: compare.histories, series: groupSeries(compare.data) };
}

// ---- charts ------------------------------------------------------------------------------------------------

function gpuAxis(rows) {
  const ticks = [...new Set(rows.map((row) => row.gpus))].sort((a, b) => a - b);
  return { title: { text: 'GPUs' }, type: 'log', tickvals: ticks, ticktext: ticks.map(String) };
}

function trace(series, key, scale = 1) {
  const rows = series.rows.filter((row) => row[key] !== null && row[key] !== undefined);
  return {
    name: series.name, legendgroup: series.name, mode: 'lines+markers',
    x: rows.map((row) => row.gpus), y: rows.map((row) => row[key] / scale),
    text: rows.map((row) => row.run_id), hovertemplate: '%{y:.4g} with %{x} GPUs (run %{text})<extra>%{fullData.name}</extra>',
    line: { color: series.colour }, marker: { size: 8 },
  };
}

function ideal(series, valueAt) {
  const timed = series.rows.filter((row) => row.mean_epoch_time_s);
  if (!timed.length) return null;
  const baseline = timed[0]; // rows are sorted by GPUs
  const gpus = [...new Set(series.rows.map((row) => row.gpus))];
  return {
    name: `${series.name}: ideal`, legendgroup: series.name, mode: 'lines', hoverinfo: 'skip',
    x: gpus, y: gpus.map((g) => valueAt(baseline, g)), line: { color: series.colour, dash: 'dot', width: 1.5 },
  };
}

function drawScaling({ rows, series }) {
  const x = gpuAxis(rows);
  draw('chart-epoch-time', series.flatMap((s) => [trace(s, 'mean_epoch_time_s'),
    ideal(s, (base, g) => (base.mean_epoch_time_s * base.gpus) / g)].filter(Boolean)),
  { xaxis: x, yaxis: { title: { text: 'seconds per epoch' }, type: 'log' } });
  draw('chart-speedup', series.flatMap((s) => [trace(s, 'speedup'), ideal(s, (base, g) => g / base.gpus)].filter(Boolean)),
    { xaxis: x, yaxis: { title: { text: 'speed-up' }, rangemode: 'tozero' } });
  const gpus = x.tickvals;
  draw('chart-efficiency', [...series.map((s) => trace(s, 'efficiency')),
    { name: 'ideal', mode: 'lines', x: gpus, y: gpus.map(() => 1), hoverinfo: 'skip', line: { color: '#555', dash: 'dot', width: 1.5 } }],
  { xaxis: x, yaxis: { title: { text: 'efficiency' }, rangemode: 'tozero' } });
  draw('chart-val-loss', series.map((s) => trace(s, 'final_val_loss')), { xaxis: x, yaxis: { title: { text: 'validation loss' } } });
  draw('chart-val-accuracy', series.map((s) => trace(s, 'final_val_accuracy')),
    { xaxis: x, yaxis: { title: { text: 'validation accuracy' } } });
  draw('chart-memory', series.map((s) => trace(s, 'peak_memory_bytes', MIB)),
    { xaxis: x, yaxis: { title: { text: 'peak memory per GPU (MiB)' }, rangemode: 'tozero' } });
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

function drawTable({ series }) {
  const cell = (value, text = number(value)) => h('td', { class: 'num' }, text);
  replaceChildren(document.querySelector('#compare-table tbody'), series.flatMap((s) => s.rows.map((row) => h('tr', {},
    h('th', { scope: 'row' }, h('a', { href: url(`/runs/${row.run_id}`) }, row.run_id)),
    h('td', {}, h('span', { class: 'state', dataset: { state: row.state } }, row.state)),
    h('td', {}, s.name), cell(row.gpus), cell(row.nodes), cell(row.global_batch_size), cell(row.epochs_done),
    cell(row.mean_epoch_time_s), cell(row.speedup), cell(row.efficiency), cell(row.final_train_loss),
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
  drawScaling(figures);
  drawTable(figures);
  const curves = drawCurves(figures);
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

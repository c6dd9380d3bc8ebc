// The comparison dashboard, of an experiment or of any selection of runs: scaling charts, the numbers as a
// table, and exports. The figures come from the compare endpoint of each experiment involved; a selection's
// speed-up and efficiency are computed again within the selection, by the server's rule.

import { finalStates, getJSON, pageData, poll, url } from './api.js';
import { addDownloads, COLOURS, draw } from './charts.js';
import { h, replaceChildren } from './dom.js';
import { bytes, number } from './format.js';

const FINAL = finalStates();
const page = pageData();
const status = document.getElementById('dash-status');
const MAX_CURVES = 24; // loss curves drawn at most: beyond, the chart is unreadable anyway
const MIB = 1024 * 1024;
const curveCache = new Map(); // run id -> epoch records, once the run's output has all been read

// A series holds every spec field fixed but these (as server/comparison.py does).
const SCALED = new Set(['gpus', 'nodes']);

function seriesKey(spec) {
  return JSON.stringify(Object.keys(spec).sort().filter((key) => !SCALED.has(key)).map((key) => [key, spec[key]]));
}

function groupSeries(rows, runs) {
  const groups = new Map();
  for (const row of rows) {
    const key = seriesKey(runs.get(row.run_id).spec);
    if (!groups.has(key)) groups.set(key, []);
    groups.get(key).push(row);
  }
  // Name a series by its strategy and whatever else tells it apart from the others.
  const specs = [...groups.values()].map((members) => runs.get(members[0].run_id).spec);
  const varying = Object.keys(specs[0] ?? {}).filter((key) => key !== 'strategy' && !SCALED.has(key) &&
    new Set(specs.map((spec) => JSON.stringify(spec[key]))).size > 1);
  return [...groups.values()].map((members, index) => {
    const spec = specs[index];
    const name = [spec.strategy, ...varying.map((key) => `${key}=${spec[key]}`)].join(', ');
    return { name, colour: COLOURS[index % COLOURS.length], rows: members.sort((a, b) => a.gpus - b.gpus) };
  });
}

// The server's rule, within a selection: against the timed run of the series with the fewest GPUs.
function rescale(series) {
  for (const { rows } of series) {
    const timed = rows.filter((row) => row.mean_epoch_time_s);
    const baseline = timed.reduce((best, row) => (!best || row.gpus < best.gpus ? row : best), null);
    for (const row of rows) {
      row.speedup = row.mean_epoch_time_s && baseline ? baseline.mean_epoch_time_s / row.mean_epoch_time_s : null;
      row.efficiency = row.speedup === null ? null : row.speedup / (row.gpus / baseline.gpus);
    }
  }
}

async function load() {
  const parts = await Promise.all(page.experiments.map(async (experiment) => {
    const id = encodeURIComponent(experiment);
    const [compare, runs] = await Promise.all([
      getJSON(`/api/experiments/${id}/compare`),
      getJSON(`/api/runs?experiment_id=${id}&limit=1000`),
    ]);
    return { compare, runs };
  }));
  const runs = new Map(parts.flatMap((part) => part.runs.data.map((run) => [run.id, run])));
  let rows = parts.flatMap((part) => part.compare.data).filter((row) => runs.has(row.run_id));
  if (page.mode === 'selection') {
    const wanted = new Set(page.runs);
    rows = rows.filter((row) => wanted.has(row.run_id)).map((row) => ({ ...row }));
  }
  const series = groupSeries(rows, runs);
  if (page.mode === 'selection') rescale(series);
  return { rows, runs, series };
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

async function epochRecords(run) {
  if (curveCache.has(run.id)) return curveCache.get(run.id);
  const metrics = await getJSON(`/api/runs/${encodeURIComponent(run.id)}/metrics?kind=epoch`);
  const latest = new Map(metrics.data.map((record) => [record.epoch, record])); // a repeated epoch: the last one
  const records = [...latest.values()].sort((a, b) => a.epoch - b.epoch);
  if (run.ingest_done) curveCache.set(run.id, records);
  return records;
}

async function drawCurves({ runs, series }) {
  const shown = series.flatMap((s) => s.rows.map((row) => ({ row, s }))).slice(0, MAX_CURVES);
  const curves = await Promise.all(shown.map(({ row }) => epochRecords(runs.get(row.run_id))));
  const traces = shown.flatMap(({ row, s }, index) => {
    const records = curves[index];
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

function csv(rows) {
  if (!rows.length) return '';
  const columns = Object.keys(rows[0]);
  const quote = (value) => {
    const text = value === null || value === undefined ? '' : String(value);
    return /[",\n\r]/.test(text) ? `"${text.replaceAll('"', '""')}"` : text;
  };
  return [columns.join(','), ...rows.map((row) => columns.map((column) => quote(row[column])).join(','))].join('\n') + '\n';
}

let blobUrls = [];
function setExports({ rows }) {
  const csvLink = document.getElementById('export-csv');
  const jsonLink = document.getElementById('export-json');
  if (page.mode === 'experiment') {
    const id = encodeURIComponent(page.experiments[0]);
    csvLink.href = url(`/api/experiments/${id}/compare.csv`);
    csvLink.download = `scalelab-${page.experiments[0]}.csv`;
    jsonLink.href = url(`/api/experiments/${id}/compare`);
    jsonLink.download = `scalelab-${page.experiments[0]}.json`;
    return;
  }
  blobUrls.forEach((blobUrl) => URL.revokeObjectURL(blobUrl));
  blobUrls = [
    URL.createObjectURL(new Blob([csv(rows)], { type: 'text/csv' })),
    URL.createObjectURL(new Blob([JSON.stringify({ data: rows, count: rows.length }, null, 1)], { type: 'application/json' })),
  ];
  [csvLink.href, jsonLink.href] = blobUrls;
  csvLink.download = 'scalelab-selection.csv';
  jsonLink.download = 'scalelab-selection.json';
}

async function step() {
  const figures = await load();
  drawScaling(figures);
  drawTable(figures);
  setExports(figures);
  const curves = await drawCurves(figures);
  const live = figures.rows.filter((row) => !FINAL.has(row.state) || !figures.runs.get(row.run_id).ingest_done).length;
  const capped = figures.rows.length > curves ? ` Loss curves of the first ${curves} runs.` : '';
  status.textContent = (live
    ? `${figures.rows.length} runs, ${live} not finished: the figures follow them.`
    : `${figures.rows.length} runs, all finished.`) + capped;
  document.getElementById('charts').dataset.ready = live ? 'live' : 'final';
  return live > 0;
}

addDownloads(`scalelab-${page.mode === 'experiment' ? page.experiments[0] : 'selection'}`);
poll(step, 5000, (error) => { status.textContent = `The figures cannot be read: ${error.message}`; });

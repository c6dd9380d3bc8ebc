// The dashboard of an inference experiment: tokens/s, latency, time to first token and memory against the
// tensor-parallel degree, one line per compile setting; the numbers; and the generations side by side.

import { finalStates, getJSON, pageData, poll, url } from './api.js';
import { addDownloads, COLOURS, draw } from './charts.js';
import { drawStateCounts, h, replaceChildren } from './dom.js';
import { bytes, number } from './format.js';

const FINAL = finalStates();
const page = pageData();
const experimentId = page.experiments[0];
const status = document.getElementById('dash-status');
const promptChoice = document.getElementById('prompt-choice');
const MIB = 1024 * 1024;
const generations = new Map(); // run id -> its generations, once complete

function layout(row) {
  return `${row.tp > 1 ? `tp=${row.tp}` : 'single'}, compile ${row.compile ? 'on' : 'off'}`;
}

// One trace per compile setting, its points ordered by TP degree.
function traces(rows, value, { dash = 'solid', suffix = '' } = {}) {
  return [false, true].map((compiled, index) => {
    const points = rows.filter((row) => row.compile === compiled && value(row) !== null).sort((a, b) => a.tp - b.tp);
    return {
      name: `compile ${compiled ? 'on' : 'off'}${suffix}`, legendgroup: `compile-${compiled}`, mode: 'lines+markers',
      x: points.map((row) => row.tp), y: points.map(value), text: points.map((row) => row.run_id),
      hovertemplate: '%{y:.4g} at TP %{x} (run %{text})<extra>%{fullData.name}</extra>',
      line: { color: COLOURS[index], dash }, marker: { size: 8 },
    };
  }).filter((trace) => trace.x.length);
}

function tpAxis(rows) {
  const ticks = [...new Set(rows.map((row) => row.tp))].sort((a, b) => a - b);
  return { title: { text: 'tensor-parallel degree' }, tickvals: ticks, ticktext: ticks.map(String) };
}

const ms = (key) => (row) => (row[key] === null ? null : row[key] * 1e3);

function drawCharts(rows) {
  const x = tpAxis(rows);
  draw('chart-tokens', traces(rows, (row) => row.tokens_per_s), { xaxis: x, yaxis: { title: { text: 'tokens/s' }, rangemode: 'tozero' } });
  draw('chart-latency', [...traces(rows, ms('latency_p50_s'), { suffix: ', p50' }),
    ...traces(rows, ms('latency_p95_s'), { dash: 'dot', suffix: ', p95' })],
  { xaxis: x, yaxis: { title: { text: 'ms per token' }, rangemode: 'tozero' } });
  draw('chart-ttft', traces(rows, ms('ttft_s')), { xaxis: x, yaxis: { title: { text: 'ms' }, rangemode: 'tozero' } });
  // Memory: every process of every run, so that a TP run's ranks each show.
  const memory = [false, true].map((compiled, index) => {
    const points = rows.filter((row) => row.compile === compiled)
      .flatMap((row) => row.memory_per_rank.map((value, rank) => ({ row, rank, value })));
    return {
      name: `compile ${compiled ? 'on' : 'off'}`, mode: 'markers', x: points.map((p) => p.row.tp),
      y: points.map((p) => p.value / MIB), text: points.map((p) => `rank ${p.rank} of run ${p.row.run_id}`),
      hovertemplate: '%{y:.0f} MiB, %{text}<extra>%{fullData.name}</extra>', marker: { size: 9, color: COLOURS[index] },
    };
  }).filter((trace) => trace.x.length);
  draw('chart-memory', memory, { xaxis: x, yaxis: { title: { text: 'peak memory per GPU (MiB)' }, rangemode: 'tozero' } });
}

function drawTable(rows) {
  const cell = (value, text = number(value)) => h('td', { class: 'num' }, text);
  const msCell = (value) => cell(value, value === null ? '' : number(value * 1e3));
  replaceChildren(document.querySelector('#inference-table tbody'), rows.map((row) => h('tr', {},
    h('th', { scope: 'row' }, h('a', { href: url(`/runs/${row.run_id}`) }, row.run_id)),
    h('td', {}, h('span', { class: 'state', dataset: { state: row.state } }, row.state)),
    cell(row.tp), h('td', {}, row.compile ? 'on' : 'off'), cell(row.tokens_per_s), cell(row.request_tokens_per_s),
    msCell(row.ttft_s), msCell(row.latency_p50_s), msCell(row.latency_p95_s), cell(row.load_time_s),
    cell(row.compile_time_s), cell(row.peak_memory_bytes, bytes(row.peak_memory_bytes)))));
}

async function loadGenerations(rows) {
  for (const row of rows) {
    if (generations.has(row.run_id) || !FINAL.has(row.state)) continue;
    const answer = await getJSON(`/api/runs/${row.run_id}/generations`);
    if (answer.complete) generations.set(row.run_id, answer.data);
  }
}

function drawPrompts() {
  const prompts = new Map();
  for (const list of generations.values()) for (const item of list) prompts.set(item.index, item.prompt);
  const chosen = promptChoice.value;
  replaceChildren(promptChoice, [...prompts.entries()].sort((a, b) => a[0] - b[0])
    .map(([index, prompt]) => h('option', { value: String(index) }, `${index + 1}: ${prompt}`)));
  if (chosen && prompts.has(Number(chosen))) promptChoice.value = chosen;
}

function drawGenerations(rows) {
  const index = Number(promptChoice.value);
  // The prompt, then what each run generated after it, marked.
  replaceChildren(document.querySelector('#generations-table tbody'), rows.filter((row) => generations.has(row.run_id))
    .map((row) => {
      const item = generations.get(row.run_id).find((generation) => generation.index === index);
      return h('tr', {}, h('th', { scope: 'row' }, row.run_id), h('td', {}, layout(row)),
        h('td', {}, h('pre', { class: 'generation' }, item ? item.prompt : '', h('mark', {}, item ? item.completion : ''))));
    }));
}

let latestRows = [];

async function step() {
  const answer = await getJSON(`/api/experiments/${encodeURIComponent(experimentId)}/inference`);
  latestRows = answer.data;
  drawCharts(latestRows);
  drawTable(latestRows);
  await loadGenerations(latestRows);
  drawPrompts();
  drawGenerations(latestRows);
  // A run has its final figures once it has ended and the monitor has read all its output (a cycle after it ends).
  const live = latestRows.filter((row) => !FINAL.has(row.state) || !row.ingest_done).length;
  status.textContent = live
    ? `${latestRows.length} runs, ${live} not finished: the figures follow them.`
    : `${latestRows.length} runs, all finished.`;
  drawStateCounts(latestRows);
  document.getElementById('charts').dataset.ready = live ? 'live' : 'final';
  return live > 0;
}

promptChoice.addEventListener('change', () => drawGenerations(latestRows));
addDownloads(`scalelab-${experimentId}`);
poll(step, 5000, (error) => { status.textContent = `The figures cannot be read: ${error.message}`; });

// @ts-check
// The dashboard of an inference experiment: tokens/s, latency, time to first token and memory against the
// tensor-parallel degree, one line per compile setting; the numbers; and the generations side by side. The page
// mounts it on its <main>.

import { finalStates, getJSON, pageData, poll, url } from './api.js';
import { addDownloads, COLOURS, draw } from './charts.js';
import { byId, drawStateCounts, h, one, replaceChildren } from './dom.js';
import { bytes, number } from './format.js';

/** @typedef {import('./types/api.js').Generation} Generation */
/** @typedef {import('./types/api.js').GenerationsPublic} GenerationsPublic */
/** @typedef {import('./types/api.js').InferencePublic} InferencePublic */
/** @typedef {import('./types/api.js').InferenceRow} InferenceRow */
/** @typedef {import('./charts.js').Trace} Trace */

const MIB = 1024 * 1024;

/**
 * A run's layout in words: "tp=2, compile on".
 * @param {InferenceRow} row
 */
export function layout(row) {
  return `${row.tp > 1 ? `tp=${row.tp}` : 'single'}, compile ${row.compile ? 'on' : 'off'}`;
}

/**
 * One trace per compile setting, its points ordered by TP degree.
 * @param {InferenceRow[]} rows
 * @param {(row: InferenceRow) => number | null} value
 * @param {{ dash?: string, suffix?: string }} [look]
 * @returns {Trace[]}
 */
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

/** @param {InferenceRow[]} rows */
function tpAxis(rows) {
  const ticks = [...new Set(rows.map((row) => row.tp))].sort((a, b) => a - b);
  return { title: { text: 'tensor-parallel degree' }, tickvals: ticks, ticktext: ticks.map(String) };
}

/** @param {'ttft_s' | 'latency_p50_s' | 'latency_p95_s'} key */
const ms = (key) => /** @param {InferenceRow} row */ (row) => {
  const seconds = row[key];
  return seconds === null ? null : seconds * 1e3;
};

/**
 * @param {ParentNode} root
 * @param {InferenceRow[]} rows
 */
function drawCharts(root, rows) {
  const x = tpAxis(rows);
  draw(byId(root, 'chart-tokens'), traces(rows, (row) => row.tokens_per_s), { xaxis: x, yaxis: { title: { text: 'tokens/s' }, rangemode: 'tozero' } });
  draw(byId(root, 'chart-latency'), [...traces(rows, ms('latency_p50_s'), { suffix: ', p50' }),
    ...traces(rows, ms('latency_p95_s'), { dash: 'dot', suffix: ', p95' })],
  { xaxis: x, yaxis: { title: { text: 'ms per token' }, rangemode: 'tozero' } });
  draw(byId(root, 'chart-ttft'), traces(rows, ms('ttft_s')), { xaxis: x, yaxis: { title: { text: 'ms' }, rangemode: 'tozero' } });
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
  draw(byId(root, 'chart-memory'), memory, { xaxis: x, yaxis: { title: { text: 'peak memory per GPU (MiB)' }, rangemode: 'tozero' } });
}

/**
 * @param {HTMLTableSectionElement} body
 * @param {InferenceRow[]} rows
 */
function drawTable(body, rows) {
  /** @param {number | null} value @param {string} [text] */
  const cell = (value, text = number(value)) => h('td', { class: 'num' }, text);
  /** @param {number | null} value */
  const msCell = (value) => cell(value, value === null ? '' : number(value * 1e3));
  replaceChildren(body, rows.map((row) => h('tr', {},
    h('th', { scope: 'row' }, h('a', { href: url(`/runs/${row.run_id}`) }, row.run_id)),
    h('td', {}, h('span', { class: 'state', dataset: { state: row.state } }, row.state)),
    cell(row.tp), h('td', {}, row.compile ? 'on' : 'off'), cell(row.tokens_per_s), cell(row.request_tokens_per_s),
    msCell(row.ttft_s), msCell(row.latency_p50_s), msCell(row.latency_p95_s), cell(row.load_time_s),
    cell(row.compile_time_s), cell(row.peak_memory_bytes, bytes(row.peak_memory_bytes)))));
}

/**
 * The generations side by side: the prompt chosen in `promptChoice`, then what each run generated after it.
 * @param {HTMLSelectElement} promptChoice
 * @param {HTMLTableSectionElement} body
 */
function generationsView(promptChoice, body) {
  /** @type {Map<string, Generation[]>} run id -> its generations, once complete */
  const generations = new Map();
  /** @type {InferenceRow[]} */
  let latestRows = [];

  /**
   * @param {InferenceRow[]} rows
   * @param {Set<string>} final
   */
  async function load(rows, final) {
    for (const row of rows) {
      if (generations.has(row.run_id) || !final.has(row.state)) continue;
      /** @type {GenerationsPublic} */
      const answer = await getJSON(`/api/runs/${row.run_id}/generations`);
      if (answer.complete) generations.set(row.run_id, answer.data);
    }
  }

  function drawPrompts() {
    /** @type {Map<number, string>} */
    const prompts = new Map();
    for (const list of generations.values()) for (const item of list) prompts.set(item.index, item.prompt);
    const chosen = promptChoice.value;
    replaceChildren(promptChoice, [...prompts.entries()].sort((a, b) => a[0] - b[0])
      .map(([index, prompt]) => h('option', { value: String(index) }, `${index + 1}: ${prompt}`)));
    if (chosen && prompts.has(Number(chosen))) promptChoice.value = chosen;
  }

  function drawGenerations() {
    const index = Number(promptChoice.value);
    // The prompt, then what each run generated after it, marked.
    replaceChildren(body, latestRows.flatMap((row) => {
      const list = generations.get(row.run_id);
      if (!list) return [];
      const item = list.find((generation) => generation.index === index);
      return [h('tr', {}, h('th', { scope: 'row' }, row.run_id), h('td', {}, layout(row)),
        h('td', {}, h('pre', { class: 'generation' }, item ? item.prompt : '', h('mark', {}, item ? item.completion : ''))))];
    }));
  }

  promptChoice.addEventListener('change', drawGenerations);
  return {
    /**
     * @param {InferenceRow[]} rows
     * @param {Set<string>} final
     */
    async draw(rows, final) {
      latestRows = rows;
      await load(rows, final);
      drawPrompts();
      drawGenerations();
    },
  };
}

/**
 * Draws the experiment's figures in `root` (the page's <main>) and follows its runs until all are final.
 * @param {HTMLElement} root
 * @returns {() => void} stops following
 */
export function mount(root) {
  const final = finalStates();
  /** @type {{ experiments: string[] }} */
  const page = pageData();
  const experimentId = page.experiments[0];
  const status = byId(root, 'dash-status');
  const generations = generationsView(byId(root, 'prompt-choice'), one(root, '#generations-table tbody'));

  async function step() {
    /** @type {InferencePublic} */
    const answer = await getJSON(`/api/experiments/${encodeURIComponent(experimentId)}/inference`);
    const rows = answer.data;
    drawCharts(root, rows);
    drawTable(one(root, '#inference-table tbody'), rows);
    await generations.draw(rows, final);
    // A run has its final figures once it has ended and the monitor has read all its output (a cycle after it ends).
    const live = rows.filter((row) => !final.has(row.state) || !row.ingest_done).length;
    status.textContent = live
      ? `${rows.length} runs, ${live} not finished: the figures follow them.`
      : `${rows.length} runs, all finished.`;
    drawStateCounts(root, rows);
    byId(root, 'charts').dataset.ready = live ? 'live' : 'final';
    return live > 0;
  }

  addDownloads(root, `scalelab-${experimentId}`);
  return poll(step, 5000, (error) => { status.textContent = `The figures cannot be read: ${error.message}`; });
}

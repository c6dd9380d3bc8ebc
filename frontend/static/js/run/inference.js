// @ts-check
// The run page's part for an inference run: its generation figures (its row of GET /api/experiments/{id}/inference,
// as the experiment's inference view shows them) and, once it has written them, each prompt with what it generated.

import { getJSON } from '../api.js';
import { byId, h, one, replaceChildren } from '../dom.js';
import { bytes, number } from '../format.js';
import { layout } from '../inference.js';

/** @typedef {import('../types/api.js').GenerationsPublic} GenerationsPublic */
/** @typedef {import('../types/api.js').InferencePublic} InferencePublic */
/** @typedef {import('../types/api.js').InferenceRow} InferenceRow */

/** @param {number | null} value */
const ms = (value) => (value === null ? '—' : `${number(value * 1e3)} ms`);
/** @param {number | null} value */
const seconds = (value) => (value === null ? '—' : `${number(value)} s`);

/**
 * Each figure of the page's #run-inference list, in words.
 * @param {InferenceRow} row
 * @returns {Record<string, string>}
 */
export function inferenceFigures(row) {
  return {
    layout: `${layout(row)}, ${row.precision}, ${row.batch_size} prompts at once`,
    tokens_per_s: number(row.tokens_per_s),
    request_tokens_per_s: number(row.request_tokens_per_s),
    ttft_s: ms(row.ttft_s),
    latency: `${ms(row.latency_p50_s)} median, ${ms(row.latency_p95_s)} at the 95th percentile`,
    load: `${seconds(row.load_time_s)}, ${seconds(row.compile_time_s)}`,
    peak_memory_bytes: `${bytes(row.peak_memory_bytes)}${row.memory_per_rank.length > 1 ? ` (ranks: ${row.memory_per_rank.map(bytes).join(', ')})` : ''}`,
  };
}

/**
 * Follows the inference run's figures in `root` (the page's <main>) until they and its generations are final.
 * @param {HTMLElement} root
 * @param {string} runId
 * @param {string} experimentId
 * @param {Set<string>} final
 * @returns {() => Promise<void>} reads and shows them once more, unless they are already final
 */
export function inferenceView(root, runId, experimentId, final) {
  const list = byId(root, 'run-inference');
  let done = false;
  return async () => {
    if (done) return;
    /** @type {InferencePublic} */
    const answer = await getJSON(`/api/experiments/${encodeURIComponent(experimentId)}/inference`);
    const row = answer.data.find((each) => each.run_id === runId);
    if (!row) return;
    for (const [name, text] of Object.entries(inferenceFigures(row))) one(list, `[data-figure="${name}"]`).textContent = text;
    const ended = final.has(row.state) && row.ingest_done;
    /** @type {GenerationsPublic | null} */
    const generations = ended ? await getJSON(`/api/runs/${encodeURIComponent(runId)}/generations`) : null;
    replaceChildren(one(root, '#generations-table tbody'), (generations?.data ?? []).map((item) => h('tr', {},
      h('td', {}, h('pre', { class: 'generation' }, item.prompt)),
      h('td', {}, h('pre', { class: 'generation' }, h('mark', {}, item.completion))))));
    byId(root, 'inference-status').textContent = !ended ? 'Not finished: its figures follow it.'
      : generations?.complete ? `Finished: ${generations.count} prompts generated.` : 'Finished; it wrote no generations.';
    done = ended;
  };
}

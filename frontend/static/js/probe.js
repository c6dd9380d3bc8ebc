// @ts-check
// The page of a fabric probe experiment: each run's shape and state (and why it failed), its tiers' bus bandwidth
// against message size drawn as the fabric page draws them (fabric.js), their fits, and a link to the fabric page
// filtered to the run's shape. The page mounts it on its <main>.

import { finalStates, getJSON, pageData, poll, url } from './api.js';
import { addDownloads } from './charts.js';
import { byId, drawStateCounts, h, one, replaceChildren } from './dom.js';
import { drawFits, drawTiers, shapeQuery } from './fabric.js';

/** @typedef {import('./types/api.js').ExperimentFabricPublic} ExperimentFabricPublic */
/** @typedef {import('./types/api.js').ProbeRunFabric} ProbeRunFabric */

// The runs whose lines a tier's chart draws at most (five collectives each): beyond, no line can be told apart.
export const DRAWN_RUNS = 8;

/**
 * A run's shape in words: "2 nodes x 2 per node".
 * @param {ProbeRunFabric} run
 */
export function shapeWords(run) {
  return `${run.nodes} ${run.nodes === 1 ? 'node' : 'nodes'} x ${run.processes_per_node} per node`;
}

/**
 * What a run has measured, in words: its tiers, or why there are none (yet).
 * @param {ProbeRunFabric} run
 * @param {Set<string>} final
 */
export function measuredWords(run, final) {
  if (run.tiers.length) return run.tiers.map((entry) => entry.shape.tier.replace('_', ' ')).join(', ');
  if (!final.has(run.state) || !run.ingest_done) return 'not yet';
  return run.state === 'completed' ? 'none: its output held no curve to fit' : 'none';
}

/**
 * Why a run did not complete: its failure kind with the evidence, or the server's message; '' for the others.
 * @param {ProbeRunFabric} run
 * @returns {[string, string]} the kind (bold on the page) and what follows it
 */
export function failureParts(run) {
  if (run.failure_kind) return [run.failure_kind.replace(/_/g, ' '), run.failure_detail ?? ''];
  if (run.state !== 'completed' && run.message) return ['', run.message];
  return ['', ''];
}

/**
 * @param {HTMLTableSectionElement} body
 * @param {ProbeRunFabric[]} runs
 * @param {Set<string>} final
 */
function drawRuns(body, runs, final) {
  replaceChildren(body, runs.map((run) => {
    const [kind, detail] = failureParts(run);
    return h('tr', { dataset: { run: run.run_id, state: run.state } },
      h('th', { scope: 'row' }, h('a', { href: url(`/runs/${encodeURIComponent(run.run_id)}`) }, run.run_id)),
      h('td', {}, h('span', { class: 'state', dataset: { state: run.state } }, run.state)),
      h('td', {}, shapeWords(run)), h('td', {}, run.partition || '—'), h('td', {}, run.backend ?? 'not measured yet'),
      h('td', { class: 'tiers' }, measuredWords(run, final)),
      h('td', { class: 'failure', dataset: { kind: run.failure_kind ?? '' } }, kind && h('strong', {}, kind), kind && detail ? ': ' : '', detail),
      h('td', {}, h('a', { class: 'fabric-link', href: url(`/fabric?${shapeQuery(run)}`) }, `${run.nodes} x ${run.processes_per_node} probes`)));
  }));
}

/**
 * Draws the experiment's probes in `root` (the page's <main>) and follows its runs until all are final.
 * @param {HTMLElement} root
 * @returns {() => void} stops following
 */
export function mount(root) {
  const final = finalStates();
  /** @type {{ experiments: string[] }} */
  const page = pageData();
  const experimentId = page.experiments[0];
  const status = byId(root, 'dash-status');

  async function step() {
    /** @type {ExperimentFabricPublic} */
    const answer = await getJSON(`/api/experiments/${encodeURIComponent(experimentId)}/fabric`);
    const runs = answer.data;
    const entries = runs.flatMap((run) => run.tiers);
    drawRuns(one(root, '#probe-runs tbody'), runs, final);
    drawTiers(root, entries, DRAWN_RUNS);
    drawFits(one(root, '#fabric-table tbody'), entries);
    // A run has its curves once it has ended and the monitor has read all its output (a cycle after it ends).
    const live = runs.filter((run) => !final.has(run.state) || !run.ingest_done).length;
    const capped = runs.length > DRAWN_RUNS ? ` The charts draw the first ${DRAWN_RUNS} runs' curves.` : '';
    status.textContent = (live
      ? `${runs.length} runs, ${live} not finished: the curves follow them.`
      : `${runs.length} runs, all finished.`) + capped;
    drawStateCounts(root, runs);
    byId(root, 'charts').dataset.ready = live ? 'live' : 'final';
    return live > 0;
  }

  addDownloads(root, `scalelab-${experimentId}`);
  return poll(step, 5000, (error) => { status.textContent = `The probes cannot be read: ${error.message}`; });
}

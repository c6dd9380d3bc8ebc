// @ts-check
// The runs page: each shown run's state, reason, job id and progress follow the server without a reload, and
// runs submitted since the page was drawn are announced. Two requests a cycle: the page's runs from the list
// endpoint, with the page's own filters, and the progress of the shown runs still live. The page mounts it on its
// <main>.

import { finalStates, getJSON, pageData, poll } from './api.js';
import { byId, one } from './dom.js';
import { progress, reason } from './format.js';

/** @typedef {import('./types/api.js').ComparePublic} ComparePublic */
/** @typedef {import('./types/api.js').RunPublic} RunPublic */
/** @typedef {import('./types/api.js').RunsPublic} RunsPublic */

/**
 * What the page says about its list: how many runs it counted, whether it is the first page (where new runs would
 * show), and its filters as the list endpoint's query.
 * @typedef {{ count: number, first_page: boolean, runs_query: string }} Page
 */

/**
 * Live until it has ended and its output has all been read (its last epochs arrive after its final state).
 * @param {HTMLElement} row
 * @param {Set<string>} final
 */
export const isLive = (row, final) => !final.has(row.dataset.state ?? '') || row.dataset.ingested !== 'true';

/**
 * The row's state, reason and job id as the list gives them; whether its state changed.
 * @param {HTMLElement} row
 * @param {RunPublic} run
 * @param {Set<string>} final
 */
function update(row, run, final) {
  const changed = row.dataset.state !== run.state;
  row.dataset.state = run.state;
  row.dataset.ingested = String(run.ingest_done);
  const badge = one(row, '.state');
  badge.dataset.state = run.state;
  badge.textContent = run.state;
  one(row, '.reason').textContent = reason(run, final);
  one(row, '.job').textContent = run.job_id ?? '';
  return changed;
}

/**
 * Follows the runs listed in `root` (the page's <main>).
 * @param {HTMLElement} root
 * @returns {() => void} stops following
 */
export function mount(root) {
  const final = finalStates();
  /** @type {Page} */
  const page = pageData();
  /** @type {Map<string, HTMLElement>} */
  const rows = new Map([...root.querySelectorAll('tr[data-run]')].map((row) => {
    const element = /** @type {HTMLElement} */ (row);
    return [element.dataset.run ?? '', element];
  }));
  const status = byId(root, 'live-status');
  const newRuns = byId(root, 'new-runs');

  /** @param {HTMLElement[]} live */
  async function showProgress(live) {
    const query = new URLSearchParams(live.map((row) => ['run_id', row.dataset.run ?? '']));
    /** @type {ComparePublic} */
    const compare = await getJSON(`/api/compare?${query}`);
    for (const figures of compare.data) {
      const row = rows.get(figures.run_id);
      if (!row) continue;
      one(row, '.progress').textContent = progress(
        figures.state, figures.epochs_done, Number(row.dataset.epochs), figures.mean_epoch_time_s);
    }
  }

  /** @param {number} count */
  function announce(count) {
    const added = count - page.count;
    newRuns.hidden = added <= 0;
    newRuns.textContent = `${added} new ${added === 1 ? 'run' : 'runs'}: show them`;
  }

  async function step() {
    const wasLive = [...rows.values()].filter((row) => isLive(row, final));
    if (!wasLive.length && !page.first_page) {
      if (rows.size) status.textContent = 'Every run shown has ended.';
      return false;
    }
    /** @type {RunsPublic} */
    const listed = await getJSON(`/api/runs?${page.runs_query}`);
    let changed = 0;
    for (const run of listed.data) {
      const row = rows.get(run.id);
      if (row && update(row, run, final)) changed += 1;
    }
    // Progress of what was live before this cycle too: a run's last epochs arrive as it ends.
    if (wasLive.length) await showProgress(wasLive);
    if (page.first_page) announce(listed.count);
    if (changed) status.textContent = `${changed} ${changed === 1 ? 'run' : 'runs'} changed state at ${new Date().toLocaleTimeString()}.`;
    else if (rows.size && !wasLive.length) status.textContent = 'Every run shown has ended.';
    return true;
  }

  return poll(step, 2000, (error) => { status.textContent = `Cannot reach the server (${error.message}); trying again.`; });
}

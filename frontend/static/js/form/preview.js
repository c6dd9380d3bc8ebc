// @ts-check
// The preview panel: what the form would create, as the server answers it (the runs, the combinations left out,
// one run's batch script, memory estimates), following the form as it changes.

import { postJSON } from '../api.js';
import { byId, h, one, replaceChildren } from '../dom.js';
import { bytes } from '../format.js';
import { clearProblems, serverProblems, showProblems } from './problems.js';
import { collect } from './request.js';

/** @typedef {import('../types/api.js').ExperimentPreview} ExperimentPreview */
/** @typedef {import('../types/api.js').MemoryEstimate} MemoryEstimate */
/** @typedef {import('../types/api.js').RunSpec} RunSpec */
/** @typedef {import('./problems.js').Problem} Problem */
/** @typedef {import('./request.js').Parts} Parts */
/** @typedef {import('./request.js').Request} Request */

/**
 * A run spec's value of a grid key: a field, or a program's parameter (params.NAME).
 * @param {RunSpec} run
 * @param {string} key
 */
const valueAt = (run, key) => (key.startsWith('params.')
  ? run.program?.params[key.slice('params.'.length)]
  : /** @type {Record<string, unknown>} */ (/** @type {unknown} */ (run))[key]);

/**
 * A run's combination of the swept values, in words.
 * @param {RunSpec} run
 * @param {Pick<Request, 'grid'>} request
 */
export function combination(run, request) {
  const keys = Object.keys(request.grid);
  return keys.length ? keys.map((key) => `${key}=${valueAt(run, key)}`).join(', ') : 'the base spec';
}

/**
 * The parts of a memory estimate: its *_bytes figures but the total, in the order the server gives them.
 * @param {MemoryEstimate | null} estimate
 * @returns {[string, number][]}
 */
export function partsOf(estimate) {
  return Object.entries(estimate ?? {})
    .filter(([key]) => key.endsWith('_bytes') && key !== 'total_bytes')
    .map(([key, value]) => [key.replace(/_bytes$/, '').replaceAll('_', ' '), value]);
}

/**
 * The preview panel of the form in `root`, following the form: at most one preview asked for at a time, the
 * answers of older ones dropped.
 * @param {ParentNode} root
 * @param {Parts} parts
 */
export function previewPanel(root, parts) {
  const status = byId(root, 'preview-status');
  const body = byId(root, 'preview-body');
  /** @type {HTMLSelectElement} */
  const runChoice = byId(root, 'preview-run');
  let index = 0; // the run whose script is shown
  let seq = 0; // the latest preview asked for: older answers are dropped
  /** @type {ReturnType<typeof setTimeout> | undefined} */
  let timer;

  /**
   * @param {ExperimentPreview} preview
   * @param {Request} request
   */
  function renderEstimates(preview, request) {
    const box = byId(root, 'estimates');
    const estimates = Array.isArray(preview.estimates) ? preview.estimates : [];
    box.hidden = !estimates.length;
    if (!estimates.length) return;
    const { name: partition, gpuMemoryGib: gib } = parts.place.chosenPartition();
    const bases = [...new Set(estimates.map((item) => item.estimate?.basis).filter(Boolean))];
    byId(root, 'estimates-note').textContent = (gib
      ? `Each GPU of partition ${partition} has ${gib} GiB; runs estimated beyond it are marked.`
      : `Partition ${partition} declares no GPU memory, so the estimates are not checked against it.`) +
      (bases.length === 1 ? ` How: ${bases[0]}.` : '');
    const partNames = [...new Set(estimates.flatMap((item) => partsOf(item.estimate).map(([name]) => name)))];
    const table = byId(root, 'estimates-table');
    replaceChildren(
      one(table, 'thead'),
      h('tr', {}, h('th', { scope: 'col' }, 'Run'), partNames.map((name) => h('th', { scope: 'col', class: 'num' }, name)),
        h('th', { scope: 'col', class: 'num' }, 'Total per GPU'), h('th', { scope: 'col' }, 'Fits?')),
    );
    replaceChildren(
      one(table, 'tbody'),
      estimates.map((item) => {
        const partsOfRun = Object.fromEntries(partsOf(item.estimate));
        const run = preview.runs[item.index];
        // A warning beside an estimate says it does not fit; without one, why there is no estimate.
        const exceeds = Boolean(item.estimate && item.warning);
        return h('tr', { class: exceeds ? 'warning' : null },
          h('th', { scope: 'row' }, `${item.index + 1}: ${run ? combination(run, request) : ''}`),
          partNames.map((name) => h('td', { class: 'num' }, bytes(partsOfRun[name]))),
          h('td', { class: 'num' }, bytes(item.estimate?.total_bytes)),
          h('td', {}, exceeds ? h('strong', {}, `⚠ ${item.warning}`) : item.warning ?? (gib ? 'yes' : '—')));
      }),
    );
  }

  /**
   * @param {ExperimentPreview} preview
   * @param {Request} request
   */
  function render(preview, request) {
    const skipped = byId(root, 'preview-skipped');
    const runs = preview.count === 1 ? 'run' : 'runs';
    status.textContent = `This experiment creates ${preview.count} ${runs}.` +
      (preview.skipped.length ? ` ${preview.skipped.length} combinations are left out:` : '');
    skipped.hidden = !preview.skipped.length;
    replaceChildren(skipped, preview.skipped.map((item) => {
      const where = Object.entries(item.combination).map(([key, value]) => `${key}=${value}`).join(', ');
      return h('li', {}, `${where || 'the base spec'}: ${item.reason}`);
    }));
    replaceChildren(runChoice, preview.runs.map((run, at) => h('option', { value: String(at) }, `${at + 1}: ${combination(run, request)}`)));
    runChoice.value = String(preview.index);
    byId(root, 'preview-script').textContent = preview.script;
    body.hidden = false;
    renderEstimates(preview, request);
  }

  /**
   * The server refused the request: the fields say why, and the preview must not show an older answer.
   * @param {Problem[]} problems
   * @param {boolean} withSummary
   */
  function showRefusal(problems, withSummary) {
    clearTimeout(timer);
    seq += 1;
    showProblems(root, problems, withSummary);
    status.textContent = `Nothing would be created: ${problems.length} ${problems.length === 1 ? 'problem' : 'problems'}, marked above.`;
    body.hidden = true;
  }

  async function preview() {
    const { request, errors } = collect(root, parts, false);
    if (errors.length) {
      showProblems(root, errors, false);
      status.textContent = 'Fix the fields marked above to see what would run.';
      body.hidden = true;
      return;
    }
    const mine = ++seq;
    status.textContent = 'Checking…';
    let answer = await postJSON(`/api/experiments/preview?index=${index}`, request);
    if (answer.status === 422 && answer.body?.detail?.some?.((/** @type {{ loc?: unknown[] }} */ item) => item.loc?.[0] === 'query') && index) {
      index = 0; // the chosen run is beyond the new grid
      answer = await postJSON('/api/experiments/preview?index=0', request);
    }
    if (mine !== seq) return; // a newer preview is on its way
    if (answer.ok) {
      clearProblems(root);
      render(answer.body, request);
    } else if (answer.status === 422) {
      showRefusal(serverProblems(root, answer.body?.detail), false);
    } else {
      status.textContent = `The preview failed: ${answer.body?.detail ?? answer.status}`;
    }
  }

  return {
    preview,
    showRefusal,

    /** @param {EventTarget | null} element */
    isRunChoice: (element) => element === runChoice,

    /** A preview once the typing has paused. */
    schedule() {
      clearTimeout(timer);
      timer = setTimeout(() => preview().catch((error) => {
        status.textContent = `The server cannot be reached: ${error.message}`;
      }), 400);
    },

    /** The script of the run chosen in the panel. */
    showChosenRun() {
      index = Number(runChoice.value);
      return preview();
    },

    /** @param {string} text */
    showStatus(text) {
      status.textContent = text;
    },
  };
}

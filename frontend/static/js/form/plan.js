// @ts-check
// Planning first: the form's request sent as a plan (POST /api/plans, as `scalelab plan` sends it), the plan's
// probes and 1-process runs followed while they run, then every grid point predicted with its step's parts, the
// recommendation, and the experiment of the recommended point submitted (POST /api/plans/{id}/experiment).

import { getJSON, poll, postJSON, url } from '../api.js';
import { byId, h, one, replaceChildren } from '../dom.js';
import { bytes, number } from '../format.js';
import { openCreated, refusal, sendRequest, unreachable } from './submit.js';

/** @typedef {import('../types/api.js').PlanPublic} PlanPublic */
/** @typedef {import('../types/api.js').PlanPoint} PlanPoint */
/** @typedef {import('../types/api.js').RunPublic} RunPublic */
/** @typedef {import('./request.js').Parts} Parts */

// How often a running plan is asked about: its runs last seconds to minutes.
const POLL_MS = 2000;

/**
 * The plan's runs, in the order it submitted them, each with what it is for and its state.
 * @param {Pick<PlanPublic, 'probe_run_ids' | 'reference_run_ids' | 'waiting_for'>} plan
 * @param {Pick<RunPublic, 'id' | 'state' | 'spec'>[]} runs the plan experiment's runs as GET /api/runs lists them
 * @returns {{ id: string, what: string, state: string, ended: boolean }[]}
 */
export function planProgress(plan, runs) {
  const byRun = new Map(runs.map((run) => [run.id, run]));
  const waiting = new Set(plan.waiting_for);
  /** @param {string} id @param {string} what */
  const item = (id, what) => ({ id, what, state: byRun.get(id)?.state ?? 'pending', ended: !waiting.has(id) });
  return [
    ...plan.probe_run_ids.map((id) => {
      const spec = byRun.get(id)?.spec ?? {};
      const shape = spec.nodes ? `: ${spec.nodes} node(s), ${spec.gpus} process(es)` : '';
      return item(id, `fabric probe${shape}`);
    }),
    ...Object.entries(plan.reference_run_ids).map(([strategy, id]) => item(id, `1-process run of ${strategy}`)),
  ];
}

/**
 * One predicted point's cells, as the result table shows them: where it is, the step and its parts, the scaling,
 * the memory and the cost; a point without a prediction says why in place of its figures.
 * @param {PlanPoint} point
 * @returns {{ where: string, cells: string[], unavailable: string | null }}
 */
export function pointCells(point) {
  const where = `${point.strategy} on ${point.gpus} GPU(s), ${point.nodes} node(s)`;
  const seconds = (/** @type {number | null} */ value) => (value === null ? '—' : `${number(value)} s`);
  return {
    where,
    cells: [
      seconds(point.step_time_s), seconds(point.compute_s), seconds(point.comm_s), seconds(point.bubble_s),
      seconds(point.epoch_time_s), number(point.speedup), number(point.efficiency, 2),
      bytes(point.memory_per_gpu_bytes), number(point.gpu_hours),
    ],
    unavailable: point.unavailable ?? null,
  };
}

const COLUMNS = ['Step', 'Compute', 'Communication (exposed)', 'Bubble', 'Epoch', 'Speed-up', 'Efficiency',
  'Memory per GPU', 'GPU-hours'];

/**
 * The plan panel of the form in `root`: its button sends the form's request as a plan.
 * @param {ParentNode} root
 * @param {Parts} parts
 * @param {ReturnType<typeof import('./preview.js').previewPanel>} preview
 */
export function planPanel(root, parts, preview) {
  const status = byId(root, 'plan-status');
  /** @type {HTMLButtonElement} */
  const button = byId(root, 'plan-button');
  /** @type {HTMLButtonElement} */
  const submitRecommended = byId(root, 'plan-submit');
  /** @type {HTMLSelectElement} */
  const goal = byId(root, 'plan-goal');
  /** @type {HTMLInputElement} */
  const efficiency = byId(root, 'plan-efficiency');
  let stop = () => {};
  /** @type {string | null} */
  let planId = null;

  /** The efficiency bound typed, or a problem at its field. */
  function readEfficiency() {
    const value = Number(efficiency.value);
    const ok = efficiency.value.trim() !== '' && Number.isFinite(value) && value > 0 && value <= 1;
    const error = byId(root, 'e-plan-efficiency');
    error.hidden = ok;
    error.textContent = ok ? '' : `must be more than 0 and at most 1, not “${efficiency.value}”`;
    if (ok) efficiency.removeAttribute('aria-invalid');
    else efficiency.setAttribute('aria-invalid', 'true');
    return ok ? value : null;
  }

  /** @param {PlanPublic} plan @param {RunPublic[]} runs */
  function showProgress(plan, runs) {
    replaceChildren(byId(root, 'plan-runs'), planProgress(plan, runs).map((run) => h('li', { dataset: { state: run.state } },
      h('a', { href: url(`/runs/${encodeURIComponent(run.id)}`) }, run.what), `: ${run.state}${run.ended ? '' : '…'}`)));
  }

  /** @param {PlanPublic} plan */
  function showResult(plan) {
    const result = byId(root, 'plan-result');
    result.hidden = false;
    const table = byId(root, 'plan-table');
    replaceChildren(one(table, 'thead'), h('tr', {}, h('th', { scope: 'col' }, 'Point'),
      COLUMNS.map((name) => h('th', { scope: 'col', class: 'num' }, name))));
    replaceChildren(one(table, 'tbody'), plan.points.map((point) => {
      const { where, cells, unavailable } = pointCells(point);
      const chosen = plan.recommendation !== null && plan.recommendation !== undefined &&
        plan.recommendation.strategy === point.strategy && plan.recommendation.gpus === point.gpus &&
        plan.recommendation.nodes === point.nodes;
      return h('tr', { class: chosen ? 'recommended' : null }, h('th', { scope: 'row' }, chosen ? `★ ${where}` : where),
        unavailable ? h('td', { colspan: String(COLUMNS.length) }, `no prediction: ${unavailable}`)
          : cells.map((cell) => h('td', { class: 'num' }, cell)));
    }));
    const fits = plan.fits.map((fit) => `${fit.tier.replace('_', '-')}: α ${number(fit.alpha_s * 1e6)} µs, β ${bytes(fit.beta_bytes_per_s)}/s`);
    byId(root, 'plan-fits').textContent = fits.length ? `Fabric fits used: ${fits.join('; ')}.` : 'No fabric fit was used (no multi-process point was predicted).';
    const cost = plan.grid_gpu_hours === null || plan.grid_gpu_hours === undefined ? ''
      : ` The whole grid would cost ${number(plan.grid_gpu_hours)} GPU-hours${plan.gpu_hours_complete ? '' : ' at least (some points have no prediction)'}` +
        (plan.recommended_gpu_hours === null || plan.recommended_gpu_hours === undefined ? '.' : `, the recommended point ${number(plan.recommended_gpu_hours)}.`);
    byId(root, 'plan-recommendation').textContent = plan.recommendation
      ? `Recommended: ${plan.recommendation.why}.${cost}`
      : `No point qualifies for the goal, so nothing is recommended.${cost}`;
    submitRecommended.hidden = !plan.recommendation;
  }

  /** @param {string} id */
  function follow(id) {
    stop();
    stop = poll(async () => {
      /** @type {PlanPublic} */
      const plan = await getJSON(`/api/plans/${encodeURIComponent(id)}`);
      const runs = /** @type {{ data: RunPublic[] }} */ (await getJSON(`/api/runs?experiment_id=${encodeURIComponent(id)}`)).data;
      showProgress(plan, runs);
      if (plan.state === 'running') {
        status.textContent = `Planning: ${plan.waiting_for.length} of its runs still to end.`;
        return true;
      }
      status.textContent = plan.state === 'ready'
        ? 'Planned: every point of the grid predicted from the runs above.'
        : `Planned, but ${plan.failed.length} of its runs did not complete: the points they serve have no prediction.`;
      showResult(plan);
      button.disabled = false;
      return false;
    }, POLL_MS, (error) => { status.textContent = `The plan cannot be read now (${error.message}); trying again…`; });
  }

  async function plan() {
    const bound = readEfficiency();
    const query = new URLSearchParams({ goal: goal.value, efficiency: String(bound) });
    button.disabled = true;
    byId(root, 'plan-result').hidden = true;
    /** @type {PlanPublic | null} */
    const created = await sendRequest({
      root, parts, preview, status, path: `/api/plans?${query}`, verb: 'planned',
      check: () => (bound === null ? 'fix the efficiency bound' : null),
    });
    if (created === null) {
      button.disabled = false;
      return;
    }
    planId = created.id;
    byId(root, 'plan-progress').hidden = false;
    status.textContent = `Planning: ${created.waiting_for.length} runs submitted.`;
    follow(created.id); // enables the button again once the plan has ended
  }

  async function submitPlanned() {
    if (planId === null) return;
    submitRecommended.disabled = true;
    const message = byId(root, 'plan-submit-status');
    message.textContent = 'Submitting the recommended experiment…';
    try {
      const answer = await postJSON(`/api/plans/${encodeURIComponent(planId)}/experiment`);
      if (answer.status === 201) {
        openCreated(answer.body, message);
        return;
      }
      message.textContent = refusal('Not submitted', answer);
    } catch (error) {
      message.textContent = unreachable(error);
    } finally {
      submitRecommended.disabled = false;
    }
  }

  button.addEventListener('click', () => { plan(); });
  submitRecommended.addEventListener('click', () => { submitPlanned(); });
}

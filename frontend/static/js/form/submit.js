// @ts-check
// Sending what the form asks for: the request once the page finds no problem with it, the server's reasons at the
// fields they name (or its other answers, said in a status line), and the runs page of an experiment it created.
// The submit button sends an experiment; plan.js sends a plan through the same steps.

import { postJSON, url } from '../api.js';
import { byId } from '../dom.js';
import { serverProblems, showProblems } from './problems.js';
import { collect } from './request.js';

/** @typedef {import('../types/api.js').ExperimentCreated} ExperimentCreated */
/** @typedef {import('./request.js').Parts} Parts */
/** @typedef {ReturnType<typeof import('./preview.js').previewPanel>} Preview */

/**
 * What the server's answer other than a success says, for a status line.
 * @param {string} not what was not done ("Not submitted")
 * @param {{ status: number, body: any }} answer
 */
export function refusal(not, answer) {
  const detail = answer.body?.detail;
  return `${not} (${answer.status}): ${typeof detail === 'string' ? detail : JSON.stringify(detail ?? 'the server failed')}`;
}

/**
 * @param {unknown} error what postJSON threw: the server did not answer
 */
export function unreachable(error) {
  return `The server cannot be reached: ${/** @type {Error} */ (error).message}`;
}

/**
 * Say that the experiment was created and open its runs page.
 * @param {ExperimentCreated} created
 * @param {HTMLElement} status
 */
export function openCreated(created, status) {
  status.textContent = `Submitted ${created.runs.length} runs; opening the runs page…`;
  window.location.assign(url(`/runs?experiment=${encodeURIComponent(created.id)}`));
}

/**
 * Send the form's request to `path` (POST) once neither the page nor `check` finds a problem with it; the body of
 * the server's 201, or null where nothing was sent or the server refused, which `status` then says (a 422 is
 * shown at the fields it names).
 * @param {{ root: ParentNode, parts: Parts, preview: Preview, status: HTMLElement, path: string,
 *   verb: 'submitted' | 'planned', check?: () => string | null }} form `check`: a problem of the panel's own
 *   inputs, said as the reason nothing was sent
 * @returns {Promise<any>}
 */
export async function sendRequest({ root, parts, preview, status, path, verb, check }) {
  const nothing = `Nothing was ${verb}`;
  const { request, errors } = collect(root, parts, true);
  const own = check?.() ?? null;
  if (errors.length) {
    showProblems(root, errors, true);
    status.textContent = `${nothing}: fix the fields marked.`;
    return null;
  }
  if (own !== null) {
    status.textContent = `${nothing}: ${own}.`;
    return null;
  }
  status.textContent = verb === 'submitted' ? 'Submitting…' : 'Submitting the plan…';
  try {
    const answer = await postJSON(path, request);
    if (answer.status === 201) return answer.body;
    if (answer.status === 422) {
      preview.showRefusal(serverProblems(root, answer.body?.detail), true);
      status.textContent = `${nothing}: fix the fields marked.`;
    } else {
      status.textContent = refusal(`Not ${verb}`, answer);
    }
  } catch (error) {
    status.textContent = unreachable(error);
  }
  return null;
}

/**
 * The form's submit handler, for the form in `root`.
 * @param {ParentNode} root
 * @param {Parts} parts
 * @param {Preview} preview
 * @returns {(event: Event) => Promise<void>}
 */
export function submitter(root, parts, preview) {
  const status = byId(root, 'submit-status');
  /** @type {HTMLButtonElement} */
  const button = byId(root, 'submit-button');
  return async (event) => {
    event.preventDefault();
    button.disabled = true;
    try {
      /** @type {ExperimentCreated | null} */
      const created = await sendRequest({ root, parts, preview, status, path: '/api/experiments', verb: 'submitted' });
      if (created !== null) openCreated(created, status);
    } finally {
      button.disabled = false;
    }
  };
}

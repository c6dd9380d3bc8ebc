// @ts-check
// Submitting: the request once the page finds no problem with it, then the runs page of the new experiment, or
// the server's reasons at the fields they name.

import { postJSON, url } from '../api.js';
import { byId } from '../dom.js';
import { serverProblems, showProblems } from './problems.js';
import { collect } from './request.js';

/** @typedef {import('../types/api.js').ExperimentCreated} ExperimentCreated */
/** @typedef {import('./request.js').Parts} Parts */

/**
 * The form's submit handler, for the form in `root`.
 * @param {ParentNode} root
 * @param {Parts} parts
 * @param {ReturnType<typeof import('./preview.js').previewPanel>} preview
 * @returns {(event: Event) => Promise<void>}
 */
export function submitter(root, parts, preview) {
  const status = byId(root, 'submit-status');
  /** @type {HTMLButtonElement} */
  const button = byId(root, 'submit-button');
  return async (event) => {
    event.preventDefault();
    const { request, errors } = collect(root, parts, true);
    if (errors.length) {
      showProblems(root, errors, true);
      status.textContent = 'Nothing was submitted: fix the fields marked.';
      return;
    }
    button.disabled = true;
    status.textContent = 'Submitting…';
    try {
      const answer = await postJSON('/api/experiments', request);
      if (answer.status === 201) {
        /** @type {ExperimentCreated} */
        const created = answer.body;
        status.textContent = `Submitted ${created.runs.length} runs; opening the runs page…`;
        window.location.assign(url(`/runs?experiment=${encodeURIComponent(created.id)}`));
        return;
      }
      if (answer.status === 422) {
        preview.showRefusal(serverProblems(root, answer.body?.detail), true);
        status.textContent = 'Nothing was submitted: fix the fields marked.';
      } else {
        status.textContent = `Not submitted (${answer.status}): ${answer.body?.detail ?? 'the server failed'}`;
      }
    } catch (error) {
      status.textContent = `The server cannot be reached: ${/** @type {Error} */ (error).message}`;
    } finally {
      button.disabled = false;
    }
  };
}

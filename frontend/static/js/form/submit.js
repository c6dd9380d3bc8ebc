// Submitting: the request once the page finds no problem with it, then the runs page of the new experiment, or
// the server's reasons at the fields they name.

import { postJSON, url } from '../api.js';
import { showRefusal } from './preview.js';
import { serverProblems, showProblems } from './problems.js';
import { collect } from './request.js';

const status = document.getElementById('submit-status');
const button = document.getElementById('submit-button');

export async function submit(event) {
  event.preventDefault();
  const { request, errors } = collect(true);
  if (errors.length) {
    showProblems(errors, true);
    status.textContent = 'Nothing was submitted: fix the fields marked.';
    return;
  }
  button.disabled = true;
  status.textContent = 'Submitting…';
  try {
    const answer = await postJSON('/api/experiments', request);
    if (answer.status === 201) {
      status.textContent = `Submitted ${answer.body.runs.length} runs; opening the runs page…`;
      window.location.assign(url(`/runs?experiment=${encodeURIComponent(answer.body.id)}`));
      return;
    }
    if (answer.status === 422) {
      showRefusal(serverProblems(answer.body?.detail), true);
      status.textContent = 'Nothing was submitted: fix the fields marked.';
    } else {
      status.textContent = `Not submitted (${answer.status}): ${answer.body?.detail ?? 'the server failed'}`;
    }
  } catch (error) {
    status.textContent = `The server cannot be reached: ${error.message}`;
  } finally {
    button.disabled = false;
  }
}

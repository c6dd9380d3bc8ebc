// @ts-check
// The new-experiment form: wires the modules of form/ to the page's events. Each of them owns its part of the
// form and its state: the settings (fields, grid) and which of them are shown (relevance), where it runs
// (profiles), what inference generates from (inference-inputs), a program run's program (program), the target
// (target), the preview, the request and its problems, submitting it, and planning it first (plan). The page
// mounts it on its <main>.

import { byId, one } from './dom.js';
import { showSweep } from './form/fields.js';
import { fillValues } from './form/grid.js';
import { inferenceInputs } from './form/inference-inputs.js';
import { planPanel } from './form/plan.js';
import { previewPanel } from './form/preview.js';
import { placeInputs } from './form/profiles.js';
import { fillProgram, refusePrograms, showProgram, showWords } from './form/program.js';
import { showRelevant } from './form/relevance.js';
import { fillRequest } from './form/request.js';
import { submitter } from './form/submit.js';
import { followMetric } from './form/target.js';

/** @typedef {import('./form/request.js').Request} Request */

/**
 * Fills the form in `root` (the page's <main>) from the request it starts from, and follows it: what is shown,
 * the preview, submitting.
 * @param {HTMLElement} root
 */
export async function mount(root) {
  /** @type {HTMLFormElement} */
  const form = one(root, '#experiment-form');
  const parts = { place: placeInputs(root), inference: inferenceInputs(root) };
  const preview = previewPanel(root, parts);

  /** @param {Event} event */
  function onChange(event) {
    const target = /** @type {HTMLElement} */ (event.target);
    if (parts.inference.isPromptsInput(target)) {
      parts.inference.readPrompts().then(preview.schedule);
      return;
    }
    if (target.id === 'f-kind') {
      parts.inference.show();
      showProgram(root);
    }
    followMetric(root, target);
    if (target.classList.contains('sweep-toggle')) {
      const field = /** @type {HTMLElement | null} */ (target.closest('.field'));
      if (field) showSweep(field);
    }
    showRelevant(root);
    if (parts.place.isProfileSelect(target)) parts.place.show();
    if (preview.isRunChoice(target)) {
      preview.showChosenRun();
      return;
    }
    preview.schedule();
  }

  /** @type {Partial<Request> & { inference?: Partial<import('./form/inference-inputs.js').Inference> }} */
  const start = JSON.parse(byId(root, 'start-request').textContent ?? '{}');
  refusePrograms(root);
  fillRequest(root, start);
  parts.inference.fill(start.inference);
  fillValues(root, start);
  fillProgram(root, start);
  form.addEventListener('input', (event) => {
    if (/** @type {HTMLElement} */ (event.target).id === 'p-command') showWords(root);
    showRelevant(root);
    if (!preview.isRunChoice(event.target)) preview.schedule();
  });
  parts.inference.show();
  showProgram(root);
  showRelevant(root);
  form.addEventListener('change', onChange);
  form.addEventListener('submit', submitter(root, parts, preview));
  byId(root, 'preview-button').addEventListener('click', () => preview.preview());
  planPanel(root, parts, preview);
  try {
    await parts.place.load(start.resources ?? {});
  } catch (error) {
    preview.showStatus(`The cluster profiles cannot be read: ${/** @type {Error} */ (error).message}`);
  }
  preview.preview();
}

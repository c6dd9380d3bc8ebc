// @ts-check
// What an inference experiment generates from: a finished training run's checkpoint, and a prompts file read in
// the page (the request carries its text).

import { byId } from '../dom.js';
import { kindChosen } from './fields.js';
import { problem } from './problems.js';

/** @typedef {import('./problems.js').Problem} Problem */
/** The request's `inference` part. @typedef {{ prompts: string, checkpoint_run?: string }} Inference */

/**
 * The inputs in `root` (the form's page), holding the chosen prompts file's text.
 * @param {ParentNode} root
 */
export function inferenceInputs(root) {
  const inputs = byId(root, 'inference-inputs');
  /** @type {HTMLSelectElement} */
  const checkpointSelect = byId(root, 'i-checkpoint_run');
  /** @type {HTMLInputElement} */
  const promptsInput = byId(root, 'i-prompts');
  const promptsStatus = byId(root, 'i-prompts-status');
  // The limit the page's hint states, from the server's, so that a file the server would refuse is not sent.
  const maxPromptsBytes = Number(promptsInput.dataset.maxKib) * 1024;
  let promptsText = ''; // the chosen file's text, or the prompts of the experiment this one starts from

  return {
    /** @param {EventTarget | null} element */
    isPromptsInput: (element) => element === promptsInput,

    /** Shown only for an inference experiment. */
    show() {
      inputs.hidden = kindChosen(inputs) !== 'inference';
    },

    async readPrompts() {
      const file = promptsInput.files?.[0];
      promptsText = '';
      if (!file) {
        promptsStatus.textContent = '';
      } else if (file.size > maxPromptsBytes) {
        promptsStatus.textContent = `${file.name} is larger than ${maxPromptsBytes / 1024} KiB: it cannot be sent.`;
      } else {
        promptsText = await file.text();
        const count = promptsText.split(/\r?\n/).filter((line) => line.trim()).length;
        promptsStatus.textContent = `${file.name}: ${count} ${count === 1 ? 'prompt' : 'prompts'}.`;
      }
    },

    /**
     * The request's `inference` part; a submitted one needs prompts, a preview does not.
     * @param {boolean} forSubmit
     * @param {Problem[]} errors
     * @returns {Inference}
     */
    read(forSubmit, errors) {
      /** @type {Inference} */
      const inference = { prompts: promptsText };
      if (checkpointSelect.value) inference.checkpoint_run = checkpointSelect.value;
      if (!promptsText && forSubmit) errors.push(problem('e-i-prompts', 'i-prompts', 'Prompts file', 'choose a prompts file'));
      return inference;
    },

    /** @param {Partial<Inference> | undefined} start the inference of the experiment this one starts from */
    fill(start) {
      if (!start) return;
      // A clone keeps its source's prompts until another file is chosen.
      promptsText = start.prompts ?? '';
      if (start.checkpoint_run) checkpointSelect.value = start.checkpoint_run;
      if (promptsText) promptsStatus.textContent = 'The prompts of the experiment this one starts from.';
    },
  };
}

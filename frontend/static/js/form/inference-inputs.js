// What an inference experiment generates from: a finished training run's checkpoint, and a prompts file read in
// the page (the request carries its text).

import { problem } from './problems.js';

const inputs = document.getElementById('inference-inputs');
const checkpointSelect = document.getElementById('i-checkpoint_run');
const promptsInput = document.getElementById('i-prompts');
const promptsStatus = document.getElementById('i-prompts-status');
// The limit the page's hint states, from the server's, so that a file the server would refuse is not sent.
const maxPromptsBytes = Number(promptsInput.dataset.maxKib) * 1024;
let promptsText = ''; // the chosen file's text, or the prompts of the experiment this one starts from

export const isPromptsInput = (element) => element === promptsInput;

// Shown only for an inference experiment.
export function showInference() {
  inputs.hidden = document.getElementById('f-kind')?.value !== 'inference';
}

export async function readPrompts() {
  const file = promptsInput.files[0];
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
}

// The request's `inference` part; a submitted one needs prompts, a preview does not.
export function readInference(forSubmit, errors) {
  const inference = { prompts: promptsText };
  if (checkpointSelect.value) inference.checkpoint_run = checkpointSelect.value;
  if (!promptsText && forSubmit) errors.push(problem('e-i-prompts', 'i-prompts', 'Prompts file', 'choose a prompts file'));
  return inference;
}

export function fillInference(start) {
  if (!start) return;
  // A clone keeps its source's prompts until another file is chosen.
  promptsText = start.prompts ?? '';
  if (start.checkpoint_run) checkpointSelect.value = start.checkpoint_run;
  if (promptsText) promptsStatus.textContent = 'The prompts of the experiment this one starts from.';
}

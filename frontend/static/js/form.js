// The new-experiment form: wires the modules of form/ to the page's events. Each of them owns its part of the
// form and its state: the settings (fields, grid) and which of them are shown (relevance), where it runs
// (profiles), what inference generates from (inference-inputs), a program run's program (program), the preview,
// the request and its problems, and submitting it.

import { showSweep } from './form/fields.js';
import { fillValues } from './form/grid.js';
import { fillInference, isPromptsInput, readPrompts, showInference } from './form/inference-inputs.js';
import { isRunChoice, preview, schedulePreview, showChosenRun, showStatus } from './form/preview.js';
import { isProfileSelect, loadProfiles, showProfile } from './form/profiles.js';
import { fillProgram, showProgram, showWords } from './form/program.js';
import { showRelevant } from './form/relevance.js';
import { fillRequest } from './form/request.js';
import { submit } from './form/submit.js';

const form = document.getElementById('experiment-form');

function onChange(event) {
  const target = event.target;
  if (isPromptsInput(target)) {
    readPrompts().then(schedulePreview);
    return;
  }
  if (target.id === 'f-kind') {
    showInference();
    showProgram();
  }
  if (target.classList.contains('sweep-toggle')) showSweep(target.closest('.field'));
  showRelevant();
  if (isProfileSelect(target)) showProfile();
  if (isRunChoice(target)) {
    showChosenRun();
    return;
  }
  schedulePreview();
}

async function main() {
  const start = JSON.parse(document.getElementById('start-request').textContent);
  fillRequest(start);
  fillInference(start.inference);
  fillValues(start);
  fillProgram(start);
  form.addEventListener('input', (event) => {
    if (event.target.id === 'p-command') showWords();
    showRelevant();
    if (!isRunChoice(event.target)) schedulePreview();
  });
  showInference();
  showProgram();
  showRelevant();
  form.addEventListener('change', onChange);
  form.addEventListener('submit', submit);
  document.getElementById('preview-button').addEventListener('click', () => preview());
  try {
    await loadProfiles(start.resources ?? {});
  } catch (error) {
    showStatus(`The cluster profiles cannot be read: ${error.message}`);
  }
  preview();
}

main();

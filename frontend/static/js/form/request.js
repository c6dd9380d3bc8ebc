// The request as POST /api/experiments takes it, read from the whole form, with the problems found before
// asking the server.

import { sent } from './fields.js';
import { readValues } from './grid.js';
import { readInference } from './inference-inputs.js';
import { problem } from './problems.js';
import { readProgram } from './program.js';
import { readPlace } from './profiles.js';

const form = document.getElementById('experiment-form');

// {request, errors}. A preview needs no name.
export function collect(forSubmit) {
  const errors = [];
  let name = form.elements.name.value.trim();
  if (!name && forSubmit) errors.push(problem('e-x-name', 'x-name', 'Name', 'give the experiment a name'));
  if (!name && !forSubmit) name = 'unnamed';
  const request = { name, on_invalid: form.elements.on_invalid.value, base: {}, grid: {}, resources: {} };
  readWhole(request, errors);
  readValues(request, errors);
  readPlace(request.resources, errors);
  if (request.base.kind === 'inference') request.inference = readInference(forSubmit, errors);
  if (request.base.kind === 'program') readProgram(request, errors);
  return { request, errors };
}

// The settings of the whole experiment: isolation (left out for the server's default), repeats and scaling mode
// (a program's batch is its own: weak scaling, which sets the worker's global batch, does not apply to it).
function readWhole(request, errors) {
  if (form.elements.isolation.value) request.isolation = form.elements.isolation.value;
  if (sent(form.elements.scaling.closest('.field'))) request.scaling = form.elements.scaling.value;
  const text = form.elements.repeats.value.trim();
  const repeats = Number(text);
  const { min, max } = form.elements.repeats;
  if (text === '') return; // the server's default: one run per combination
  if (!Number.isInteger(repeats)) errors.push(problem('e-x-repeats', 'x-repeats', 'Repeats', `must be a whole number, not ${text}`));
  else if (repeats < Number(min) || repeats > Number(max)) {
    errors.push(problem('e-x-repeats', 'x-repeats', 'Repeats', `must be from ${min} to ${max}, not ${repeats}`));
  } else request.repeats = repeats;
}

// The name and the whole-experiment settings of the request a new experiment starts from.
export function fillRequest(start) {
  form.elements.name.value = start.name ?? '';
  if (start.on_invalid) form.elements.on_invalid.value = start.on_invalid;
  form.elements.isolation.value = start.isolation ?? '';
  form.elements.repeats.value = String(start.repeats ?? 1);
  form.elements.scaling.value = start.scaling ?? 'strong';
}

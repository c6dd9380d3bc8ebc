// The request as POST /api/experiments takes it, read from the whole form, with the problems found before
// asking the server.

import { readValues } from './grid.js';
import { readInference } from './inference-inputs.js';
import { problem } from './problems.js';
import { readPlace } from './profiles.js';

const form = document.getElementById('experiment-form');

// {request, errors}. A preview needs no name.
export function collect(forSubmit) {
  const errors = [];
  let name = form.elements.name.value.trim();
  if (!name && forSubmit) errors.push(problem('e-x-name', 'x-name', 'Name', 'give the experiment a name'));
  if (!name && !forSubmit) name = 'unnamed';
  const request = { name, on_invalid: form.elements.on_invalid.value, base: {}, grid: {}, resources: {} };
  readValues(request, errors);
  readPlace(request.resources, errors);
  if (request.base.kind === 'inference') request.inference = readInference(forSubmit, errors);
  return { request, errors };
}

// The name and the choice for invalid combinations of the request a new experiment starts from.
export function fillRequest(start) {
  form.elements.name.value = start.name ?? '';
  if (start.on_invalid) form.elements.on_invalid.value = start.on_invalid;
}

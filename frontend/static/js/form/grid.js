// The settings together: which of them the request carries in its base, its grid and its resources, and the form
// filled from a request (the experiment a new one starts from).

import { describe, problemAt, read, sent, setSweep, setValue } from './fields.js';

const valueFields = [...document.querySelectorAll('#experiment-form .field[data-kind]')];

export function fieldNamed(name, fixedIn) {
  return valueFields.find((field) => field.dataset.field === name && (!fixedIn || field.dataset.fixed === fixedIn));
}

// Each field's value into `request` (its base, grid and resources), and the problems found into `errors`. A value
// equal to its default is left out, so that the server's default applies; a field with nowhere to be fixed is sent
// only when swept; a field the chosen kind does not read is not sent.
export function readValues(request, errors) {
  for (const field of valueFields.filter(sent)) {
    const spec = describe(field);
    const got = read(field);
    if (got.error) errors.push(problemAt(field, true, got.error));
    else if (got.swept) request.grid[spec.name] = got.value;
    else if ('value' in got && got.value !== spec.fallback && spec.fixed) request[spec.fixed][spec.name] = got.value;
  }
}

export function fillValues(start) {
  for (const [name, value] of Object.entries(start.base ?? {})) {
    const field = fieldNamed(name, 'base');
    if (field) setValue(field, value);
  }
  for (const [name, value] of Object.entries(start.resources ?? {})) {
    const field = fieldNamed(name, 'resources');
    if (field) setValue(field, value);
  }
  for (const [name, values] of Object.entries(start.grid ?? {})) {
    const field = fieldNamed(name);
    if (field && Array.isArray(values)) setSweep(field, values);
  }
}

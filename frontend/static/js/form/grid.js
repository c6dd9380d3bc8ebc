// @ts-check
// The settings together: which of them the request carries in its base, its grid and its resources, and the form
// filled from a request (the experiment a new one starts from).

import { describe, problemAt, read, sent, setSweep, setValue } from './fields.js';

/** @typedef {import('./problems.js').Problem} Problem */
/** @typedef {import('./request.js').Request} Request */

/**
 * The value fields of the form in `root`.
 * @param {ParentNode} root
 * @returns {HTMLElement[]}
 */
const valueFields = (root) => [.../** @type {NodeListOf<HTMLElement>} */ (root.querySelectorAll('#experiment-form .field[data-kind]'))];

/**
 * The value field of a setting (fixed in `fixedIn`, where given: base or resources).
 * @param {ParentNode} root
 * @param {string} name
 * @param {string} [fixedIn]
 */
export function fieldNamed(root, name, fixedIn) {
  return valueFields(root).find((field) => field.dataset.field === name && (!fixedIn || field.dataset.fixed === fixedIn));
}

/**
 * Each field's value into `request` (its base, grid and resources), and the problems found into `errors`. A value
 * equal to its default is left out, so that the server's default applies; a field with nowhere to be fixed is sent
 * only when swept; a field the chosen kind does not read is not sent.
 * @param {ParentNode} root
 * @param {Request} request
 * @param {Problem[]} errors
 */
export function readValues(root, request, errors) {
  for (const field of valueFields(root).filter(sent)) {
    const spec = describe(field);
    const got = read(field);
    if (got.error) errors.push(problemAt(field, true, got.error));
    else if (got.swept) request.grid[spec.name ?? ''] = got.value;
    else if ('value' in got && got.value !== spec.fallback && spec.fixed) {
      request[/** @type {'base' | 'resources'} */ (spec.fixed)][spec.name ?? ''] = got.value;
    }
  }
}

/**
 * The fields set as a request has them.
 * @param {ParentNode} root
 * @param {Partial<Request>} start
 */
export function fillValues(root, start) {
  for (const [name, value] of Object.entries(start.base ?? {})) {
    const field = fieldNamed(root, name, 'base');
    if (field) setValue(field, value);
  }
  for (const [name, value] of Object.entries(start.resources ?? {})) {
    const field = fieldNamed(root, name, 'resources');
    if (field) setValue(field, value);
  }
  for (const [name, values] of Object.entries(start.grid ?? {})) {
    const field = fieldNamed(root, name);
    if (field && Array.isArray(values)) setSweep(field, values);
  }
}

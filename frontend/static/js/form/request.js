// @ts-check
// The request as POST /api/experiments takes it, read from the whole form, with the problems found before
// asking the server.

import { one } from '../dom.js';
import { sent } from './fields.js';
import { readValues } from './grid.js';
import { problem } from './problems.js';
import { readProgram } from './program.js';
import { fillTarget, readTarget } from './target.js';

/** @typedef {import('./problems.js').Problem} Problem */
/** @typedef {import('./inference-inputs.js').Inference} Inference */

/**
 * The request, as the form builds it: the whole experiment's settings, the base spec, the swept values by key, the
 * place, an inference experiment's inputs, and the target (time to accuracy).
 * @typedef {{ name: string, on_invalid: string, on_failure: string, on_hang: string, base: Record<string, any>, grid: Record<string, unknown[]>,
 *   resources: Record<string, any>, isolation?: string, scaling?: string, repeats?: number, inference?: Inference,
 *   target?: import('./target.js').Target }} Request
 */

/**
 * The parts of the form that hold state of their own: the place (the server's profiles) and the inference inputs
 * (the prompts file's text).
 * @typedef {{ place: ReturnType<typeof import('./profiles.js').placeInputs>,
 *   inference: ReturnType<typeof import('./inference-inputs.js').inferenceInputs> }} Parts
 */

/**
 * A control of the form by name.
 * @param {HTMLFormElement} form
 * @param {string} name
 */
const control = (form, name) => /** @type {HTMLInputElement | HTMLSelectElement} */ (form.elements.namedItem(name));

/**
 * {request, errors}. A preview needs no name.
 * @param {ParentNode} root the form's page
 * @param {Parts} parts
 * @param {boolean} forSubmit
 * @returns {{ request: Request, errors: Problem[] }}
 */
export function collect(root, parts, forSubmit) {
  /** @type {HTMLFormElement} */
  const form = one(root, '#experiment-form');
  /** @type {Problem[]} */
  const errors = [];
  let name = control(form, 'name').value.trim();
  if (!name && forSubmit) errors.push(problem('e-x-name', 'x-name', 'Name', 'give the experiment a name'));
  if (!name && !forSubmit) name = 'unnamed';
  /** @type {Request} */
  const request = {
    name,
    on_invalid: control(form, 'on_invalid').value,
    on_failure: control(form, 'on_failure').value,
    on_hang: control(form, 'on_hang').value,
    base: {},
    grid: {},
    resources: {},
  };
  readWhole(form, request, errors);
  readValues(root, request, errors);
  readTarget(root, request, errors);
  parts.place.read(request.resources, errors);
  if (request.base.kind === 'inference') request.inference = parts.inference.read(forSubmit, errors);
  if (request.base.kind === 'program') readProgram(root, request, errors);
  return { request, errors };
}

/**
 * The settings of the whole experiment: isolation (left out for the server's default), repeats and scaling mode
 * (a program's batch is its own: weak scaling, which sets the worker's global batch, does not apply to it).
 * @param {HTMLFormElement} form
 * @param {Request} request
 * @param {Problem[]} errors
 */
function readWhole(form, request, errors) {
  const isolation = control(form, 'isolation').value;
  if (isolation) request.isolation = isolation;
  const scaling = control(form, 'scaling');
  const scalingField = /** @type {HTMLElement | null} */ (scaling.closest('.field'));
  if (scalingField && sent(scalingField)) request.scaling = scaling.value;
  const repeatsInput = /** @type {HTMLInputElement} */ (control(form, 'repeats'));
  const text = repeatsInput.value.trim();
  const repeats = Number(text);
  const { min, max } = repeatsInput;
  if (text === '') return; // the server's default: one run per combination
  if (!Number.isInteger(repeats)) errors.push(problem('e-x-repeats', 'x-repeats', 'Repeats', `must be a whole number, not ${text}`));
  else if (repeats < Number(min) || repeats > Number(max)) {
    errors.push(problem('e-x-repeats', 'x-repeats', 'Repeats', `must be from ${min} to ${max}, not ${repeats}`));
  } else request.repeats = repeats;
}

/**
 * The name and the whole-experiment settings of the request a new experiment starts from.
 * @param {ParentNode} root
 * @param {Partial<Request>} start
 */
export function fillRequest(root, start) {
  /** @type {HTMLFormElement} */
  const form = one(root, '#experiment-form');
  control(form, 'name').value = start.name ?? '';
  if (start.on_invalid) control(form, 'on_invalid').value = start.on_invalid;
  control(form, 'on_failure').value = start.on_failure ?? 'stop_series';
  control(form, 'on_hang').value = start.on_hang ?? 'cancel';
  control(form, 'isolation').value = start.isolation ?? '';
  control(form, 'repeats').value = String(start.repeats ?? 1);
  control(form, 'scaling').value = start.scaling ?? 'strong';
  fillTarget(root, start);
}

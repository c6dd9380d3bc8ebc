// @ts-check
// The experiment's target in the "Time to accuracy" group: the metric (the worker's, chosen; a program's, typed),
// whether it must be at least or at most the bound, and the bound. It goes at the request's top level
// (`target: {metric, at_least | at_most}`), not in its base or grid: one experiment has one target. The rest of the
// group (stop at the target, the learning-rate rule, warm-up epochs) are spec fields, read as every other one.

import { byId, optionalById } from '../dom.js';
import { isProgram, kindReads, problemAt } from './fields.js';
import { fieldNamed } from './grid.js';

/** @typedef {import('./problems.js').Problem} Problem */
/** @typedef {'at_least' | 'at_most'} Direction */
/** The request's target. @typedef {{ metric: string, at_least?: number, at_most?: number }} Target */

// The figure an accuracy target bounds is a fraction (contract.target's check of val_accuracy, said before asking).
const ACCURACY = 'val_accuracy';

/**
 * The direction a metric's target usually has: a loss or an error is got under (at most), anything else (an
 * accuracy, a score) reached (at least).
 * @param {string} metric
 * @returns {Direction}
 */
export function defaultDirection(metric) {
  return /(loss|error|perplexity|wer|cer|mse|mae|rmse)/.test(metric) ? 'at_most' : 'at_least';
}

/**
 * {value} or {error} for the bound typed for `metric`.
 * @param {string} metric
 * @param {string} text
 * @returns {{ value?: number, error?: string }}
 */
export function parseBound(metric, text) {
  if (text.trim() === '') return { error: `enter the ${metric} to reach` };
  const value = Number(text);
  if (!Number.isFinite(value)) return { error: `“${text}” is not a number` };
  if (metric === ACCURACY && !(value > 0 && value <= 1)) {
    return { error: `accuracy is a fraction from 0 to 1, not ${value}: 0.95 is 95 %` };
  }
  return { value };
}

/**
 * @param {ParentNode} root
 * @param {string} id
 */
const input = (root, id) => /** @type {HTMLInputElement | HTMLSelectElement} */ (byId(root, id));

/**
 * The metric's control of the chosen kind: typed for a program, chosen for the built-in worker.
 * @param {ParentNode} root
 */
const metricId = (root) => (isProgram(byId(root, 't-metric')) ? 't-metric_name' : 't-metric');

/**
 * Where a problem with the target is shown: at its metric (also for a problem with the target as a whole, which
 * names its metric), or at its bound.
 * @param {ParentNode} root
 * @param {string | undefined} part the part of the target the problem names: metric, at_least, at_most or none
 * @returns {Problem}
 */
export function targetProblem(root, part) {
  const id = part === 'at_least' || part === 'at_most' ? 't-bound' : metricId(root);
  const label = optionalById(root, id)?.closest('.field')?.querySelector('label')?.textContent ?? 'Target';
  return { errorId: `e-${id}`, controlId: id, label, message: '' };
}

/**
 * The target into `request.target` where the kind chosen reads one and a metric is given, its problems into
 * `errors`.
 * @param {ParentNode} root
 * @param {{ target?: Target, base: Record<string, any>, grid: Record<string, unknown[]> }} request
 * @param {Problem[]} errors
 */
export function readTarget(root, request, errors) {
  const id = metricId(root);
  const control = input(root, id);
  const field = /** @type {HTMLElement} */ (control.closest('.field'));
  if (!kindReads(field)) return;
  const metric = control.value.trim();
  const boundText = input(root, 't-bound').value;
  if (!metric) {
    if (boundText.trim()) errors.push({ ...targetProblem(root, 'metric'), message: 'choose the metric the bound is for' });
    const stops = request.base.stop_at_target === true || (request.grid.stop_at_target ?? []).includes(true);
    const stop = fieldNamed(root, 'stop_at_target', 'base');
    if (stops && stop) errors.push(problemAt(stop, request.grid.stop_at_target !== undefined, 'needs a target: choose its metric and bound'));
    return;
  }
  const pattern = /** @type {HTMLInputElement} */ (control).dataset.pattern;
  if (pattern && !new RegExp(pattern).test(metric)) {
    errors.push({ ...targetProblem(root, 'metric'), message: `“${metric}” is not a metric name: lowercase letters, digits and _, starting with a letter` });
    return;
  }
  const bound = parseBound(metric, boundText);
  if (bound.error !== undefined || bound.value === undefined) {
    errors.push({ ...targetProblem(root, 'at_least'), message: bound.error ?? 'enter a number' });
    return;
  }
  request.target = { metric, [/** @type {Direction} */ (input(root, 't-direction').value)]: bound.value };
}

/**
 * The direction that follows a metric newly chosen or typed (`element`, the control changed), where it is one.
 * @param {ParentNode} root
 * @param {EventTarget | null} element
 */
export function followMetric(root, element) {
  if (!(element instanceof HTMLElement) || !['t-metric', 't-metric_name'].includes(element.id)) return;
  const metric = /** @type {HTMLInputElement} */ (element).value.trim();
  if (metric) input(root, 't-direction').value = defaultDirection(metric);
}

/**
 * The target of the request a new experiment starts from.
 * @param {ParentNode} root
 * @param {{ target?: { metric: string, at_least?: number | null, at_most?: number | null } | null }} start
 */
export function fillTarget(root, start) {
  const target = start.target;
  if (!target) return;
  const select = /** @type {HTMLSelectElement} */ (input(root, 't-metric'));
  if ([...select.options].some((option) => option.value === target.metric)) select.value = target.metric;
  input(root, 't-metric_name').value = target.metric;
  const atMost = target.at_most !== null && target.at_most !== undefined;
  input(root, 't-direction').value = atMost ? 'at_most' : 'at_least';
  input(root, 't-bound').value = String(atMost ? target.at_most : target.at_least ?? '');
}

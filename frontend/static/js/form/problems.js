// @ts-check
// Problems with the request, each shown at the field it names, and in a summary when submitting: those found in
// the page, and those of the API's 422 answers.

import { byId, h, one, optionalById, replaceChildren } from '../dom.js';
import { problemAt } from './fields.js';
import { fieldNamed } from './grid.js';
import { targetProblem } from './target.js';

/**
 * A problem with the request: the ids of its error line and of the control it marks (none: it marks none), the
 * name of what it concerns, and what is wrong.
 * @typedef {{ errorId: string, controlId: string | null, label: string, message: string }} Problem
 */

/**
 * A problem not tied to one value field.
 * @param {string} errorId
 * @param {string | null} controlId
 * @param {string} fieldLabel
 * @param {string} [message]
 * @returns {Problem}
 */
export function problem(errorId, controlId, fieldLabel, message = '') {
  return { errorId, controlId, label: fieldLabel, message };
}

// The request's settings of the whole experiment, each with its own field (x-NAME) at the top of the form.
const WHOLE = new Set(['name', 'on_invalid', 'on_failure', 'on_hang', 'isolation', 'repeats', 'scaling']);

/**
 * @param {ParentNode} root
 * @param {string} controlId
 * @param {string} fallback
 */
const labelOf = (root, controlId, fallback) => root.querySelector(`label[for="${controlId}"]`)?.textContent ?? fallback;

/**
 * Where a 422's `loc` points in the form of `root`: ["body", "base", "epochs"], ["body", "grid"],
 * ["body", "resources", ...], ["body", "base", "program", "workdir"], ["body", "grid", "params.lr"].
 * @param {ParentNode} root
 * @param {unknown} detail the answer's detail: FastAPI's list of errors, or a sentence
 * @returns {Problem[]}
 */
export function serverProblems(root, detail) {
  if (!Array.isArray(detail)) return [problem('e-grid', null, '', String(detail ?? 'the request was refused'))];
  return detail.map((item) => {
    /** @type {(string | number)[]} */
    const loc = item.loc ?? [];
    const message = String(item.msg ?? '').replace(/^Value error, /, '');
    const [, section, name, key] = loc.map(String);
    const exists = (/** @type {string} */ id) => optionalById(root, id) !== null;
    let target = problem('e-grid', null, '');
    if (section === 'target') {
      // ["body", "target", "metric"]: the metric, as the planner refuses one the runs cannot report; ["body",
      // "target"]: the target as a whole (its metric's name, or its bound).
      target = targetProblem(root, name);
    } else if (WHOLE.has(section)) {
      target = problem(`e-x-${section}`, `x-${section}`, labelOf(root, `x-${section}`, section));
    } else if (section === 'base' && name === 'program') {
      // A part of the program (["body", "base", "program", "workdir"]), or the program as a whole.
      target = exists(`e-p-${key}`) ? problem(`e-p-${key}`, `p-${key}`, labelOf(root, `p-${key}`, key))
        : problem('e-p-', null, 'Program');
    } else if (section === 'grid' && String(name).startsWith('params.')) {
      target = problem('e-p-params', 'p-params', labelOf(root, 'p-params', 'Parameters'));
    } else if ((section === 'base' || section === 'grid') && name !== undefined && fieldNamed(root, name)) {
      target = problemAt(/** @type {HTMLElement} */ (fieldNamed(root, name)), section === 'grid');
    } else if (section === 'inference' && exists(`e-i-${name}`)) {
      const control = name === 'checkpoint_path' ? 'i-checkpoint_run' : `i-${name}`;
      target = problem(`e-i-${name}`, control, labelOf(root, control, name));
    } else if (section === 'resources' && name === 'sbatch_options' && exists(`e-o-${key}`)) {
      target = problem(`e-o-${key}`, `o-${key}`, `--${key}`);
    } else if (section === 'resources' && name === 'sbatch_options') {
      target = problem('e-o-', null, 'sbatch options');
    } else if (section === 'resources' && name !== undefined) {
      const field = fieldNamed(root, name, 'resources');
      if (field) target = problemAt(field, false);
      else if (exists(`e-r-${name}`)) target = problem(`e-r-${name}`, `r-${name}`, labelOf(root, `r-${name}`, name));
    }
    const where = target.errorId === 'e-grid' && loc.length > 2 ? `${loc.slice(1).join('.')}: ` : '';
    return { ...target, message: where + message };
  });
}

/**
 * Every problem shown in the form of `root` taken away.
 * @param {ParentNode} root
 */
export function clearProblems(root) {
  const form = one(root, '#experiment-form');
  for (const element of /** @type {NodeListOf<HTMLElement>} */ (form.querySelectorAll('.error'))) {
    element.hidden = true;
    element.textContent = '';
  }
  for (const control of form.querySelectorAll('[aria-invalid]')) control.removeAttribute('aria-invalid');
  form.querySelectorAll('.field.invalid').forEach((field) => field.classList.remove('invalid'));
}

/**
 * The problems at their fields, and with `withSummary` in the summary above the form, which takes the focus.
 * @param {ParentNode} root
 * @param {Problem[]} problems
 * @param {boolean} withSummary
 */
export function showProblems(root, problems, withSummary) {
  clearProblems(root);
  for (const item of problems) {
    /** @type {HTMLElement} */
    const element = optionalById(root, item.errorId) ?? byId(root, 'e-grid');
    element.hidden = false;
    element.append(h('span', {}, item.message));
    const control = item.controlId && optionalById(root, item.controlId);
    if (control) {
      control.setAttribute('aria-invalid', 'true');
      control.closest('.field')?.classList.add('invalid');
    }
  }
  const summary = byId(root, 'error-summary');
  summary.hidden = !(withSummary && problems.length);
  if (!summary.hidden) {
    replaceChildren(
      one(summary, 'ul'),
      problems.map((item) => {
        const text = item.label ? `${item.label}: ${item.message}` : item.message;
        return h('li', {}, item.controlId ? h('a', { href: `#${item.controlId}` }, text) : text);
      }),
    );
    summary.focus();
  }
}

// Problems with the request, each shown at the field it names, and in a summary when submitting: those found in
// the page, and those of the API's 422 answers.

import { h, replaceChildren } from '../dom.js';
import { problemAt } from './fields.js';
import { fieldNamed } from './grid.js';

const form = document.getElementById('experiment-form');
const summary = document.getElementById('error-summary');

// A problem not tied to one value field: the ids of its error line and of the control it marks.
export function problem(errorId, controlId, fieldLabel, message) {
  return { errorId, controlId, label: fieldLabel, message };
}

// The request's settings of the whole experiment, each with its own field (x-NAME) at the top of the form.
const WHOLE = new Set(['name', 'on_invalid', 'isolation', 'repeats', 'scaling']);

const labelOf = (controlId, fallback) => document.querySelector(`label[for="${controlId}"]`)?.textContent ?? fallback;

// Where a 422's `loc` points in this form: ["body", "base", "epochs"], ["body", "grid"], ["body", "resources", ...],
// ["body", "base", "program", "workdir"], ["body", "grid", "params.lr"].
export function serverProblems(detail) {
  if (!Array.isArray(detail)) return [problem('e-grid', null, '', String(detail ?? 'the request was refused'))];
  return detail.map((item) => {
    const loc = item.loc ?? [];
    const message = String(item.msg ?? '').replace(/^Value error, /, '');
    const [, section, name, key] = loc;
    let target = problem('e-grid', null, '');
    if (WHOLE.has(section)) {
      target = problem(`e-x-${section}`, `x-${section}`, labelOf(`x-${section}`, section));
    } else if (section === 'base' && name === 'program') {
      // A part of the program (["body", "base", "program", "workdir"]), or the program as a whole.
      target = document.getElementById(`e-p-${key}`) ? problem(`e-p-${key}`, `p-${key}`, labelOf(`p-${key}`, key))
        : problem('e-p-', null, 'Program');
    } else if (section === 'grid' && String(name).startsWith('params.')) {
      target = problem('e-p-params', 'p-params', labelOf('p-params', 'Parameters'));
    } else if ((section === 'base' || section === 'grid') && name !== undefined && fieldNamed(name)) {
      target = problemAt(fieldNamed(name), section === 'grid');
    } else if (section === 'inference' && document.getElementById(`e-i-${name}`)) {
      const control = name === 'checkpoint_path' ? 'i-checkpoint_run' : `i-${name}`;
      target = problem(`e-i-${name}`, control, labelOf(control, name));
    } else if (section === 'resources' && name === 'sbatch_options' && document.getElementById(`e-o-${key}`)) {
      target = problem(`e-o-${key}`, `o-${key}`, `--${key}`);
    } else if (section === 'resources' && name === 'sbatch_options') {
      target = problem('e-o-', null, 'sbatch options');
    } else if (section === 'resources' && name !== undefined) {
      const field = fieldNamed(name, 'resources');
      if (field) target = problemAt(field, false);
      else if (document.getElementById(`e-r-${name}`)) target = problem(`e-r-${name}`, `r-${name}`, labelOf(`r-${name}`, name));
    }
    const where = target.errorId === 'e-grid' && loc.length > 2 ? `${loc.slice(1).join('.')}: ` : '';
    return { ...target, message: where + message };
  });
}

export function clearProblems() {
  for (const element of form.querySelectorAll('.error')) {
    element.hidden = true;
    element.textContent = '';
  }
  for (const control of form.querySelectorAll('[aria-invalid]')) control.removeAttribute('aria-invalid');
  form.querySelectorAll('.field.invalid').forEach((field) => field.classList.remove('invalid'));
}

export function showProblems(problems, withSummary) {
  clearProblems();
  for (const item of problems) {
    const element = document.getElementById(item.errorId) ?? document.getElementById('e-grid');
    element.hidden = false;
    element.append(h('span', {}, item.message));
    const control = item.controlId && document.getElementById(item.controlId);
    if (control) {
      control.setAttribute('aria-invalid', 'true');
      control.closest('.field')?.classList.add('invalid');
    }
  }
  summary.hidden = !(withSummary && problems.length);
  if (!summary.hidden) {
    replaceChildren(
      summary.querySelector('ul'),
      problems.map((item) => {
        const text = item.label ? `${item.label}: ${item.message}` : item.message;
        return h('li', {}, item.controlId ? h('a', { href: `#${item.controlId}` }, text) : text);
      }),
    );
    summary.focus();
  }
}

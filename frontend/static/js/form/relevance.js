// @ts-check
// Which settings the form shows: those the chosen kind of run and strategies read (a training run no inference
// setting, DDP no pipeline or tensor-parallel setting), those that hold a value of their own, and all of them on
// request. Hiding a setting never changes the request: form/grid.js sends what the user set, shown or not.

import { byId, one } from '../dom.js';
import { describe, kindReads, read, sent } from './fields.js';
import { fieldNamed } from './grid.js';

/**
 * The strategies the request asks for: the swept ones, or the fixed one.
 * @param {ParentNode} root
 * @returns {string[]}
 */
function strategiesChosen(root) {
  const field = fieldNamed(root, 'strategy', 'base');
  if (!field) return [];
  const got = read(field);
  if (!('value' in got)) return [];
  return got.swept ? got.value : [got.value];
}

/**
 * Whether the chosen kind reads the setting, and one of the chosen strategies does where only some strategies
 * read it (data-strategies, from contract.spec.STRATEGY_FIELDS).
 * @param {HTMLElement} field
 * @param {string[]} strategies
 */
function applies(field, strategies) {
  const readBy = (field.dataset.strategies ?? '').split(' ').filter(Boolean);
  return kindReads(field) && (!readBy.length || strategies.some((strategy) => readBy.includes(strategy)));
}

/**
 * A setting swept, set to another value than its default, or marked with a problem stays in view wherever it goes.
 * @param {HTMLElement} field
 */
function holdsOwnValue(field) {
  if (field.classList.contains('invalid')) return true;
  if (!field.dataset.kind) return false; // a setting of the whole experiment (scaling), read by every kind but one
  const got = read(field);
  return Boolean(got.error) || got.swept || ('value' in got && got.value !== describe(field).fallback);
}

/**
 * Shows the settings that apply, in the form of `root`, and says how many are hidden.
 * @param {ParentNode} root
 */
export function showRelevant(root) {
  const form = one(root, '#experiment-form');
  /** @type {HTMLInputElement} */
  const showAll = byId(root, 'show-all-fields');
  const strategies = strategiesChosen(root);
  let hidden = 0;
  for (const field of /** @type {NodeListOf<HTMLElement>} */ (form.querySelectorAll('.field[data-kinds]'))) {
    // A setting a program does not read is not sent either: showing it would only mislead, even on request.
    const shown = sent(field) && (showAll.checked || applies(field, strategies) || holdsOwnValue(field));
    field.hidden = !shown;
    if (!shown && sent(field)) hidden += 1;
  }
  // A group whose every setting is hidden goes too (Inference for a training run, most of them for a program).
  for (const group of /** @type {NodeListOf<HTMLElement>} */ (form.querySelectorAll('fieldset.group'))) {
    const fields = /** @type {HTMLElement[]} */ ([...group.querySelectorAll(':scope > .fields > .field[data-field]')]);
    if (fields.some((field) => field.dataset.kinds)) group.hidden = fields.every((field) => field.hidden);
  }
  byId(root, 'hidden-fields').textContent = hidden
    ? `${hidden} ${hidden === 1 ? 'setting' : 'settings'} that this experiment's kind and strategies do not read ${hidden === 1 ? 'is' : 'are'} hidden.`
    : '';
}

// Which settings the form shows: those the chosen kind of run and strategies read (a training run no inference
// setting, DDP no pipeline or tensor-parallel setting), those that hold a value of their own, and all of them on
// request. Hiding a setting never changes the request: form/grid.js sends what the user set, shown or not.

import { describe, kindReads, read, sent } from './fields.js';
import { fieldNamed } from './grid.js';

const form = document.getElementById('experiment-form');
const showAll = document.getElementById('show-all-fields');
const hiddenCount = document.getElementById('hidden-fields');
const settings = [...form.querySelectorAll('.field[data-kinds]')];

// The strategies the request asks for: the swept ones, or the fixed one.
function strategiesChosen() {
  const got = read(fieldNamed('strategy', 'base'));
  if (!('value' in got)) return [];
  return got.swept ? got.value : [got.value];
}

// Whether the chosen kind reads the setting, and one of the chosen strategies does where only some strategies
// read it (data-strategies, from contract.spec.STRATEGY_FIELDS).
function applies(field, strategies) {
  const readBy = (field.dataset.strategies ?? '').split(' ').filter(Boolean);
  return kindReads(field) && (!readBy.length || strategies.some((strategy) => readBy.includes(strategy)));
}

// A setting swept, set to another value than its default, or marked with a problem stays in view wherever it goes.
function holdsOwnValue(field) {
  if (field.classList.contains('invalid')) return true;
  if (!field.dataset.kind) return false; // a setting of the whole experiment (scaling), read by every kind but one
  const got = read(field);
  return Boolean(got.error) || got.swept || ('value' in got && got.value !== describe(field).fallback);
}

export function showRelevant() {
  const strategies = strategiesChosen();
  let hidden = 0;
  for (const field of settings) {
    // A setting a program does not read is not sent either: showing it would only mislead, even on request.
    const shown = sent(field) && (showAll.checked || applies(field, strategies) || holdsOwnValue(field));
    field.hidden = !shown;
    if (!shown && sent(field)) hidden += 1;
  }
  // A group whose every setting is hidden goes too (Inference for a training run, most of them for a program).
  for (const group of form.querySelectorAll('fieldset.group')) {
    const fields = [...group.querySelectorAll(':scope > .fields > .field[data-field]')];
    if (fields.some((field) => field.dataset.kinds)) group.hidden = fields.every((field) => field.hidden);
  }
  hiddenCount.textContent = hidden
    ? `${hidden} ${hidden === 1 ? 'setting' : 'settings'} that this experiment's kind and strategies do not read ${hidden === 1 ? 'is' : 'are'} hidden.`
    : '';
}

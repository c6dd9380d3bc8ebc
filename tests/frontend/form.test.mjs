// @ts-check
// What the new-experiment form reads from what was typed (frontend/static/js/form/): values within a field's
// bounds, a program's command, environment and parameters, the preview's words for a run, and a target's bound.

import assert from 'node:assert/strict';
import { test } from 'node:test';

import { parse } from '../../frontend/static/js/form/fields.js';
import { combination, partsOf } from '../../frontend/static/js/form/preview.js';
import { joinWords, parseBatch, parseEnv, parseParams, splitWords, valueText } from '../../frontend/static/js/form/program.js';
import { defaultDirection, parseBound } from '../../frontend/static/js/form/target.js';
import { refusal } from '../../frontend/static/js/sharing.js';

const BOUNDS = { min: null, max: null, xmin: null };

test('a value is read as its field\'s kind, within its bounds', () => {
  assert.deepEqual(parse({ ...BOUNDS, kind: 'int', min: 1 }, '4'), { value: 4 });
  assert.deepEqual(parse({ ...BOUNDS, kind: 'int' }, '4.5'), { error: '“4.5” is not a whole number' });
  assert.deepEqual(parse({ ...BOUNDS, kind: 'int', min: 1 }, '0'), { error: 'must be at least 1, not 0' });
  assert.deepEqual(parse({ ...BOUNDS, kind: 'float', xmin: 0 }, '0'), { error: 'must be more than 0, not 0' });
  assert.deepEqual(parse({ ...BOUNDS, kind: 'float', max: 1 }, '2'), { error: 'must be at most 1, not 2' });
  assert.deepEqual(parse({ ...BOUNDS, kind: 'float' }, ''), { error: '“” is not a number' });
  assert.deepEqual(parse({ ...BOUNDS, kind: 'bool' }, 'true'), { value: true });
  assert.deepEqual(parse({ ...BOUNDS, kind: 'choice' }, 'ddp'), { value: 'ddp' });
});

test('a command is split into words as a shell would, and joined back', () => {
  assert.deepEqual(splitWords(`python train.py --name 'a b' "c \\"d\\"" e\\ f`), { words: ['python', 'train.py', '--name', 'a b', 'c "d"', 'e f'] });
  assert.deepEqual(splitWords("python ''"), { words: ['python', ''] });
  assert.match(splitWords('python train.py > log').error ?? '', /“>” is not acted on/);
  assert.equal(splitWords("python 'train.py").error, 'a single quote is not closed');
  const words = ['python', 'a b', "it's"];
  assert.deepEqual(splitWords(joinWords(words)), { words });
});

test('environment lines and parameters, fixed or swept, with the line of each problem', () => {
  assert.deepEqual(parseEnv('# comment\nA=1\n\nB=x=y', '^[A-Za-z_][A-Za-z0-9_]*$'), { env: { A: '1', B: 'x=y' } });
  assert.deepEqual(parseEnv('A=1\nA=2', '^[A-Z]+$'), { error: 'line 2: A is set twice' });
  assert.deepEqual(parseParams('lr = 0.05, 0.1\nopt = adam\ntag = "3", "a,b"\namp = true', '^[a-z][a-z0-9_]*$'),
    { fixed: { opt: 'adam', amp: true }, swept: { lr: [0.05, 0.1], tag: ['3', 'a,b'] } });
  assert.deepEqual(parseParams('lr = 1, 1', '^[a-z]+$'), { error: 'line 1: lr lists 1 twice' });
  assert.equal(valueText('3'), '"3"');
  assert.equal(valueText('adam'), 'adam');
  assert.equal(valueText(0.1), '0.1');
});

test('the preview names a run by its swept values and an estimate by its parts', () => {
  const run = /** @type {import('../../frontend/static/js/types/api.js').RunSpec} */ (/** @type {unknown} */ (
    { strategy: 'ddp', gpus: 2, program: { params: { lr: 0.1 } } }));
  assert.equal(combination(run, { grid: { strategy: [], 'params.lr': [] } }), 'strategy=ddp, params.lr=0.1');
  assert.equal(combination(run, { grid: {} }), 'the base spec');
  const estimate = /** @type {import('../../frontend/static/js/types/api.js').MemoryEstimate} */ (/** @type {unknown} */ (
    { parameters_bytes: 10, optimizer_state_bytes: 20, total_bytes: 30, basis: 'sums' }));
  assert.deepEqual(partsOf(estimate), [['parameters', 10], ['optimizer state', 20]]);
});

test('a refused sharing change says what the server refused', () => {
  assert.equal(refusal([{ msg: 'not a group' }, { msg: 'too long' }], 422), 'not a group; too long');
  assert.equal(refusal('no such experiment', 404), 'no such experiment');
  assert.equal(refusal(undefined, 500), '500');
});

test("a program's batch is typed as what it counts, then its size or the parameter that holds it", () => {
  const name = '^[a-z][a-z0-9_]{0,39}$';
  assert.deepEqual(parseBatch('', name), {});
  assert.deepEqual(parseBatch(' global 256 ', name), { batch: { per: 'global', size: 256 } });
  assert.deepEqual(parseBatch('process batch_size', name), { batch: { per: 'process', param: 'batch_size' } });
  assert.match(parseBatch('256', name).error ?? '', /global 256, or process batch_size/);
  assert.match(parseBatch('each 32', name).error ?? '', /what it counts/);
  assert.match(parseBatch('global 0', name).error ?? '', /at least 1/);
  assert.match(parseBatch('process Batch-Size', name).error ?? '', /neither a whole number nor a parameter/);
});

test('a target\'s direction follows its metric: a loss or an error got under, anything else reached', () => {
  assert.equal(defaultDirection('val_accuracy'), 'at_least');
  assert.equal(defaultDirection('val_loss'), 'at_most');
  assert.equal(defaultDirection('train_loss'), 'at_most');
  assert.equal(defaultDirection('top5_error'), 'at_most');
  assert.equal(defaultDirection('bleu'), 'at_least');
});

test('a target\'s bound is a number, and an accuracy\'s a fraction', () => {
  assert.deepEqual(parseBound('val_accuracy', '0.95'), { value: 0.95 });
  assert.deepEqual(parseBound('val_accuracy', '1'), { value: 1 });
  assert.match(parseBound('val_accuracy', '95').error ?? '', /0\.95 is 95 %/);
  assert.match(parseBound('val_accuracy', '0').error ?? '', /fraction/);
  assert.deepEqual(parseBound('val_loss', '2.5'), { value: 2.5 });
  assert.match(parseBound('val_loss', '').error ?? '', /enter the val_loss to reach/);
  assert.match(parseBound('val_loss', 'abc').error ?? '', /not a number/);
});

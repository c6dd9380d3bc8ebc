// @ts-check
// What the "Rerun the failed" form sends and says (frontend/static/js/reruns.js).

import assert from 'node:assert/strict';
import { test } from 'node:test';

import { changes, rerunText } from '../../frontend/static/js/reruns.js';

test('changes are FIELD=VALUE items, their values JSON where they read as JSON, else text', () => {
  assert.deepEqual(changes('activation_checkpointing=true, global_batch_size=32'), {
    activation_checkpointing: true,
    global_batch_size: 32,
  });
  assert.deepEqual(changes('precision=bf16\nseed = 3\n'), { precision: 'bf16', seed: 3 });
  assert.deepEqual(changes('lr=null'), { lr: null });
  assert.deepEqual(changes(''), {});
});

test("a JSON list's commas stay in its value, and an item that is not FIELD=VALUE is named", () => {
  assert.deepEqual(changes('values=[1, 2], epochs=2'), { values: [1, 2], epochs: 2 });
  assert.throws(() => changes('epochs'), /"epochs": give FIELD=VALUE/);
  assert.throws(() => changes('base.epochs=2'), /"base.epochs=2": give FIELD=VALUE/);
});

test('the answer names each new run and the run it repeats', () => {
  assert.equal(rerunText({ data: [{ id: 'b', rerun_of: 'a' }] }), '1 run submitted: b (a rerun of a).');
  assert.equal(
    rerunText({ data: [{ id: 'b', rerun_of: 'a' }, { id: 'd', rerun_of: 'c' }] }),
    '2 runs submitted: b (a rerun of a), d (a rerun of c).',
  );
});

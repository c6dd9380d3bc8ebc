// @ts-check
// What the form's plan panel shows (frontend/static/js/form/plan.js): the plan's runs with what each is for and
// its state, and each predicted point's step with its parts, or why it has none.

import assert from 'node:assert/strict';
import { test } from 'node:test';

import { planProgress, pointCells } from '../../frontend/static/js/form/plan.js';
import { planPoint } from './fixtures.mjs';

test('the plan\'s runs: its probes, then its 1-process runs, each with its state and whether it has ended', () => {
  const plan = { probe_run_ids: ['p1'], reference_run_ids: { ddp: 'r1', fsdp: 'r2' }, waiting_for: ['r1', 'r2'] };
  const runs = [
    { id: 'p1', state: /** @type {const} */ ('completed'), spec: { kind: 'probe', nodes: 2, gpus: 4 } },
    { id: 'r1', state: /** @type {const} */ ('running'), spec: {} },
  ];
  assert.deepEqual(planProgress(plan, runs), [
    { id: 'p1', what: 'fabric probe: 2 node(s), 4 process(es)', state: 'completed', ended: true },
    { id: 'r1', what: '1-process run of ddp', state: 'running', ended: false },
    { id: 'r2', what: '1-process run of fsdp', state: 'pending', ended: false },
  ]);
});

test('a predicted point shows its step and the parts it adds up from; one without a prediction says why', () => {
  const { where, cells, unavailable } = pointCells(planPoint({
    gpus: 4, nodes: 2, step_time_s: 0.25, compute_s: 0.05, comm_s: 0.2, bubble_s: 0, epoch_time_s: 25, speedup: 1.6,
    efficiency: 0.4, memory_per_gpu_bytes: 2048, gpu_hours: 0.5,
  }));
  assert.equal(where, 'ddp on 4 GPU(s), 2 node(s)');
  assert.deepEqual(cells, ['0.25 s', '0.05 s', '0.2 s', '0 s', '25 s', '1.6', '0.4', '2 KiB', '0.5']);
  assert.equal(unavailable, null);
  const none = pointCells(planPoint({ step_time_s: null, compute_s: null, comm_s: null, bubble_s: null,
    epoch_time_s: null, speedup: null, efficiency: null, gpu_hours: null, unavailable: 'its 1-process run failed' }));
  assert.equal(none.unavailable, 'its 1-process run failed');
  assert.equal(none.cells[0], '—');
});

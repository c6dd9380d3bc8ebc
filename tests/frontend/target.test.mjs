// @ts-check
// Time to accuracy as the dashboard draws it (frontend/static/js/dashboard/target-series.js): the traces built from
// the scaling answer's time_to_target, the runs that did not reach counted beside their points, and nothing without
// a target.

import assert from 'node:assert/strict';
import { test } from 'node:test';

import { gather } from '../../frontend/static/js/dashboard/flags.js';
import {
  batchAxis, epochsTraces, hasTarget, missingLabel, speedupTraces, targetCells, targetsWords, targetWords, timeTraces,
  unscoredNotes,
} from '../../frontend/static/js/dashboard/target-series.js';
import { compareRow, flag, scalingSeries, targetPoint, timeToTarget } from './fixtures.mjs';

/** @typedef {import('../../frontend/static/js/dashboard/series.js').Series} Series */
/** @typedef {import('../../frontend/static/js/types/api.js').TimeToTarget} TimeToTarget */

/**
 * A series of the dashboard with this time-to-target answer (none: no target).
 * @param {Partial<TimeToTarget> | null} answer
 * @param {string} [name]
 * @returns {Series}
 */
const series = (answer, name = 'ddp') => ({
  name, colour: '#0072B2', rows: [compareRow({ series: name })],
  analysis: scalingSeries({ series: name, time_to_target: answer ? timeToTarget(answer) : null }),
});

// Weak scaling of 1, 2 and 4 GPUs, 5 repeats each: 4 GPUs needs more epochs, and one of its runs never reached.
const points = [
  targetPoint({ gpus: 1, global_batch_size: 64, runs: 5, reached: 5, n: 3, scoring: 'olympic', time_to_target_s: 40,
    epochs_to_target: 4, effective_speedup: 1, throughput_speedup: 1, run_ids: ['a', 'b'] }),
  targetPoint({ gpus: 2, global_batch_size: 128, runs: 3, reached: 3, n: 3, time_to_target_s: 24, ci_low_s: 22, ci_high_s: 27,
    epochs_to_target: 5, epochs_ci_low: 4, epochs_ci_high: 6, effective_speedup: 40 / 24, effective_speedup_ci_low: 1.4,
    effective_speedup_ci_high: 1.9, throughput_speedup: 1.9 }),
  targetPoint({ gpus: 4, global_batch_size: 256, runs: 3, reached: 2, not_reached: 1, n: 2, time_to_target_s: 20, ci_low_s: 15,
    ci_high_s: 25, epochs_to_target: 8, effective_speedup: 2, throughput_speedup: 3.6, flags: [flag('slower_convergence')] }),
];

test('nothing of time to accuracy shows without a target, in the series or the rows', () => {
  assert.equal(hasTarget([compareRow({})], [series(null)]), false);
  assert.equal(hasTarget([compareRow({})], [series({ points })]), true);
  // A live run's row says it has not reached the target before the scaling answer scores it.
  assert.equal(hasTarget([compareRow({ target_reached: false })], [series(null)]), true);
  assert.deepEqual(timeTraces([series(null)]), []);
  assert.deepEqual(speedupTraces([series(null)]), []);
  assert.deepEqual(epochsTraces([series(null)]), []);
});

test('time to target against GPUs: each point\'s score with its interval, and its runs that did not reach beside it', () => {
  const [trace] = timeTraces([series({ points })]);
  assert.deepEqual(trace.x, [1, 2, 4]);
  assert.deepEqual(trace.y, [40, 24, 20]);
  assert.deepEqual(trace.error_y.array, [0, 3, 5]);
  assert.deepEqual(trace.error_y.arrayminus, [0, 2, 5]);
  assert.deepEqual(trace.text, ['', '', '1 of 3 not reached']);
  assert.match(trace.customdata[0], /olympic mean of 3 \(fastest and slowest dropped\); 5 of 5 reached/);
  assert.match(trace.customdata[0], /runs a, b/);
  assert.match(trace.customdata[2], /95 % interval 15–25 s/);
  assert.match(trace.customdata[2], /⚠ warning: slower_convergence happened/);
  // The flagged point stands out as the other charts' flagged points do.
  assert.deepEqual(trace.marker.symbol, ['circle', 'circle', 'circle-open']);
});

test('a point no run reached is never dropped silently: it is named with its count', () => {
  const none = targetPoint({ gpus: 8, runs: 3, reached: 0, not_reached: 2, unfinished: 1, n: 0, scoring: null, time_to_target_s: null,
    epochs_to_target: null, effective_speedup: null });
  const answer = series({ points: [...points, none] });
  assert.deepEqual(timeTraces([answer])[0].x, [1, 2, 4]);
  assert.deepEqual(unscoredNotes([answer]), ['ddp at 8 GPUs: no time to target (0 of 3 runs reached it, 1 still running).']);
  assert.equal(missingLabel(none), '2 of 3 not reached, 1 still running');
  assert.deepEqual(unscoredNotes([series({ points })]), []);
});

test('effective and throughput speed-up on one chart, with the ideal from the baseline', () => {
  const traces = speedupTraces([series({ points, baseline_gpus: 1 })]);
  assert.deepEqual(traces.map((t) => t.name), ['ddp: effective (time to target)', 'ddp: throughput (time per epoch)', 'ddp: ideal']);
  const [effective, throughput, ideal] = traces;
  assert.deepEqual(effective.y, [1, 40 / 24, 2]);
  assert.deepEqual(effective.error_y.array.map((/** @type {number} */ v) => Number(v.toFixed(3))), [0, 0.233, 0]);
  assert.deepEqual(throughput.y, [1, 1.9, 3.6]);
  assert.equal(throughput.line.dash, 'dash');
  assert.equal(throughput.error_y, undefined);
  assert.deepEqual(ideal.y, [1, 2, 4]);
  // Without a baseline, no ideal to draw.
  assert.equal(speedupTraces([series({ points, baseline_gpus: null })]).length, 2);
});

test('epochs to target against the global batch, with their intervals (the critical-batch view)', () => {
  const [trace] = epochsTraces([series({ points })]);
  assert.deepEqual(trace.x, [64, 128, 256]);
  assert.deepEqual(trace.y, [4, 5, 8]);
  assert.deepEqual(trace.error_y.array, [0, 1, 0]);
  assert.deepEqual(batchAxis([series({ points })]).tickvals, [64, 128, 256]);
  assert.match(batchAxis([]).title.text, /global batch/);
});

test('the target in words, one for a selection that shares it', () => {
  assert.equal(targetWords({ metric: 'val_accuracy', at_least: 0.95, at_most: null }), 'val_accuracy ≥ 0.95');
  assert.equal(targetWords({ metric: 'val_loss', at_least: null, at_most: 0.2 }), 'val_loss ≤ 0.2');
  assert.equal(targetsWords([series({ points }), series({ points }, 'fsdp')]), 'val_accuracy ≥ 0.9');
  const other = series({ points, target: { metric: 'val_loss', at_least: null, at_most: 0.2 } }, 'fsdp');
  assert.equal(targetsWords([series({ points }), other]), 'each series’ target');
});

test('a row\'s target columns say reached, stopped there or not, and its figures', () => {
  assert.deepEqual(targetCells(compareRow({ target_reached: true, stopped_at_target: true, epochs_to_target: 3, time_to_target_s: 12.34,
    effective_speedup: 1.5 })), { reached: 'yes, stopped there', epochs: '3', seconds: '12.3', effective: '1.5' });
  assert.equal(targetCells(compareRow({ target_reached: false })).reached, 'no');
  assert.deepEqual(targetCells(compareRow({})), { reached: '—', epochs: '—', seconds: '—', effective: '—' });
});

test('the flags of points scored by time to target are listed with the point they concern', () => {
  const scaling = { experiment_id: null, series: [scalingSeries({ time_to_target: timeToTarget({ points }) })], flags: [] };
  assert.deepEqual(gather([], scaling), [{ flag: flag('slower_convergence'), points: [{ series: 'ddp', gpus: 4, runs: [] }] }]);
});

test('the throughput speed-up beside the effective one carries neither the target\'s flags nor its not-reached labels', () => {
  const [effective, throughput] = speedupTraces([series({ points })]);
  assert.deepEqual(effective.marker.symbol, ['circle', 'circle', 'circle-open']);
  assert.deepEqual(throughput.marker.symbol, ['circle', 'circle', 'circle']);
  assert.deepEqual(throughput.text, ['', '', '']);
  assert.doesNotMatch(throughput.customdata[2], /slower_convergence/);
  // The last point's label to its left, within the plot.
  assert.deepEqual(effective.textposition, ['top center', 'top center', 'top left']);
});

// @ts-check
// The regression section's pure helpers (frontend/static/js/regression.js): a point's ratio in words, the overlay's
// two traces per series with each later point's verdict as its label, and the history's traces over time.

import assert from 'node:assert/strict';
import { test } from 'node:test';

import { historyTraces, overlayTraces, ratioWords } from '../../frontend/static/js/regression.js';

/** @typedef {import('../../frontend/static/js/types/api.js').RegressionPoint} RegressionPoint */
/** @typedef {import('../../frontend/static/js/types/api.js').RegressionPublic} RegressionPublic */
/** @typedef {import('../../frontend/static/js/types/api.js').ReferenceHistory} ReferenceHistory */

/**
 * @param {Partial<RegressionPoint>} fields
 * @returns {RegressionPoint}
 */
function point(fields) {
  return {
    series: 'ddp', gpus: 1, measure: 'epoch_time_s', reference_mean_s: 10, reference_n: 3, later_mean_s: 15, later_n: 3,
    ratio: 1.5, ci_low: 1.4, ci_high: 1.6, verdict: 'regressed', reference_flags: [], hedge: null, flags: [],
    reference_run_ids: [], later_run_ids: [], ...fields,
  };
}

test('a ratio reads with its interval, or says why it has none', () => {
  assert.equal(ratioWords(point({})), '1.5x [1.4, 1.6]');
  assert.match(ratioWords(point({ ci_low: null, ci_high: null })), /no interval/);
  assert.match(ratioWords(point({ ratio: null })), /no ratio/);
});

test('the overlay draws the reference and this experiment per series, labelled with each verdict', () => {
  const answer = /** @type {RegressionPublic} */ ({
    reference_id: 'abc', points: [point({}), point({ gpus: 2, reference_mean_s: 5, later_mean_s: 5.1, verdict: 'indistinguishable', ratio: 1.02 })],
  });
  const [reference, later] = overlayTraces(answer);
  assert.equal(reference.name, 'ddp: reference abc');
  assert.deepEqual([reference.x, reference.y], [[1, 2], [10, 5]]);
  assert.deepEqual(later.text, ['regressed 1.5x', 'indistinguishable 1.02x']);
});

test('the history is one trace per series and GPU count, over time, with asymmetric intervals', () => {
  const entry = (/** @type {string} */ at, /** @type {RegressionPoint[]} */ points) => ({
    experiment_id: at, name: at, created_at: at, role: 'later', verdict: 'regressed', points, image: null,
    image_digest: 'sha256:1', torch_version: '2.5', worker_version: null, source_revision: null, nodes: [],
  });
  const history = /** @type {ReferenceHistory} */ (/** @type {unknown} */ ({
    entries: [entry('2026-01-01', [point({ ratio: 1, ci_low: 0.9, ci_high: 1.1 })]), entry('2026-02-01', [point({}), point({ gpus: 2, ratio: null })])],
  }));
  const traces = historyTraces(history);
  assert.deepEqual(traces.map((trace) => trace.name), ['ddp at 1 GPUs', 'ddp at 2 GPUs']);
  assert.deepEqual(traces[0].y, [1, 1.5]);
  assert.deepEqual(traces[0].error_y.arrayminus.map((/** @type {number} */ v) => Number(v.toFixed(3))), [0.1, 0.1]);
  assert.deepEqual(traces[1].x, []); // a point with no ratio is not drawn
});

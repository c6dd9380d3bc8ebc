// @ts-check
// The fabric page's curves (frontend/static/js/fabric.js): a line per collective of a tier's newest probes.

import assert from 'node:assert/strict';
import { test } from 'node:test';

import { shapeName, tierTraces } from '../../frontend/static/js/fabric.js';

/** @typedef {import('../../frontend/static/js/types/api.js').FabricEntry} FabricEntry */

/**
 * @param {string} runId
 * @param {string} tier
 * @param {{ preflight?: boolean }} [options]
 * @returns {FabricEntry}
 */
function entry(runId, tier, { preflight = false } = {}) {
  /** @param {string} collective @param {number} nbytes */
  const point = (collective, nbytes) => ({
    collective, ranks: 2, nbytes, seconds: nbytes / 1e9, algbw_bytes_per_s: 1e9, busbw_bytes_per_s: 1e9 * Math.log2(nbytes),
  });
  return /** @type {FabricEntry} */ ({
    shape: { profile: 'p', partition: 'q', nodes: 2, processes_per_node: 2, backend: 'gloo', tier },
    preflight, ranks: 2, alpha_s: 1e-5, beta_bytes_per_s: 1e9, run_id: runId, measured_at: '2026-11-29T03:00:00',
    degraded: null,
    points: [point('all_reduce', 4096), point('all_reduce', 1024), point('broadcast', 1024)],
  });
}

test('a tier draws a line per collective of its probes, sizes in order, pre-flights and the other tier left out', () => {
  const entries = [entry('a', 'intra_node'), entry('b', 'inter_node'), entry('c', 'intra_node', { preflight: true })];
  const traces = tierTraces(entries, 'intra_node');
  assert.deepEqual(traces.map((trace) => trace.name), ['all_reduce, 2 x 2, gloo (run a)', 'broadcast, 2 x 2, gloo (run a)']);
  assert.deepEqual(traces[0].x, [1024, 4096]);
  assert.deepEqual(traces[0].y, [10, 12]);
  assert.equal(shapeName(entries[2]), '2 x 2, gloo pre-flight (run c)');
});

test('only the newest three probes of a tier are drawn', () => {
  const entries = ['a', 'b', 'c', 'd'].map((runId) => entry(runId, 'inter_node'));
  const runs = new Set(tierTraces(entries, 'inter_node').map((trace) => trace.legendgroup));
  assert.deepEqual([...runs], ['a', 'b', 'c']);
});

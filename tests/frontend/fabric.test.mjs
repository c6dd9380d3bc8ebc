// @ts-check
// The fabric page's curves (frontend/static/js/fabric.js): a line per collective of a tier's newest probes; the
// filters its address names, and the fabric_degraded verdict in words.

import assert from 'node:assert/strict';
import { test } from 'node:test';

import { degradedText, filtersOf, filterWords, fitErrorWords, shapeName, shapeQuery, tierTraces } from '../../frontend/static/js/fabric.js';
import { fabricEntry, probeRun } from './fixtures.mjs';

/** @typedef {import('../../frontend/static/js/types/api.js').FabricEntry} FabricEntry */
/** @typedef {import('../../frontend/static/js/types/api.js').Collective} Collective */
/** @typedef {import('../../frontend/static/js/types/api.js').Tier} Tier */

/**
 * @param {string} runId
 * @param {Tier} tier
 * @param {{ preflight?: boolean }} [options]
 * @returns {FabricEntry}
 */
function entry(runId, tier, { preflight = false } = {}) {
  /** @param {Collective} collective @param {number} nbytes */
  const point = (collective, nbytes) => ({
    collective, ranks: 2, nbytes, seconds: nbytes / 1e9, algbw_bytes_per_s: 1e9, busbw_bytes_per_s: 1e9 * Math.log2(nbytes),
  });
  return fabricEntry({
    shape: { profile: 'p', partition: 'q', nodes: 2, processes_per_node: 2, backend: 'gloo', tier },
    preflight, run_id: runId,
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

test('as many probes as asked are drawn, a page of one experiment drawing all its runs', () => {
  const entries = ['a', 'b', 'c', 'd'].map((runId) => entry(runId, 'inter_node'));
  assert.equal(new Set(tierTraces(entries, 'inter_node', 8).map((trace) => trace.legendgroup)).size, 4);
});

test("a run's shape is the fabric page's query; what is not known yet filters nothing", () => {
  const measured = probeRun({ profile: 'twonode', partition: 'debug', backend: 'gloo' });
  assert.equal(shapeQuery(measured).toString(), 'profile=twonode&partition=debug&nodes=2&processes_per_node=2&backend=gloo');
  assert.equal(shapeQuery(probeRun({ profile: '', partition: '', nodes: 1 })).toString(), 'nodes=1&processes_per_node=2');
});

test("the page's address filters by a shape's fields only, and says so in words", () => {
  const filters = filtersOf('?nodes=2&processes_per_node=2&backend=gloo&preflight=true&partition=');
  assert.equal(filters.toString(), 'nodes=2&processes_per_node=2&backend=gloo');
  assert.equal(filterWords(filters), '2 node(s) x 2 per node, gloo');
  assert.equal(filterWords(filtersOf('?profile=twonode&nodes=2')), 'profile twonode, 2 node(s) x any per node');
  assert.equal(filtersOf('').size, 0);
});

test('only a pre-flight is judged degraded; a probe run is what it is judged against', () => {
  assert.equal(degradedText(fabricEntry({ preflight: true, degraded: 'busbw 1 GB/s, expected 4-5' })), 'busbw 1 GB/s, expected 4-5');
  assert.equal(degradedText(fabricEntry({ preflight: true })), 'no');
  assert.equal(degradedText(fabricEntry({})), 'not judged (a probe run)');
});

test("a fit's error is a percentage, marked poor beyond the 20 % the model is expected to miss by", () => {
  assert.equal(fitErrorWords(0.053), '5.3 %');
  assert.equal(fitErrorWords(0.2), '20 %');
  assert.equal(fitErrorWords(0.563), '56.3 % (poor)');
});

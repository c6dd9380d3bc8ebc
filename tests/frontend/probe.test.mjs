// @ts-check
// A probe experiment's page (frontend/static/js/probe.js): each run's shape, what it measured, and why it failed.

import assert from 'node:assert/strict';
import { test } from 'node:test';

import { failureParts, measuredWords, shapeWords } from '../../frontend/static/js/probe.js';
import { fabricEntry, probeRun } from './fixtures.mjs';

const FINAL = new Set(['completed', 'failed', 'cancelled', 'timeout']);

test("a run's shape in words", () => {
  assert.equal(shapeWords(probeRun({})), '2 nodes x 2 per node');
  assert.equal(shapeWords(probeRun({ nodes: 1, processes_per_node: 4 })), '1 node x 4 per node');
});

test('what a run measured: its tiers, not yet while it runs or is read, and none once it ended without a curve', () => {
  const both = [fabricEntry({}), fabricEntry({ shape: { ...fabricEntry({}).shape, tier: 'inter_node' } })];
  assert.equal(measuredWords(probeRun({ state: 'completed', ingest_done: true, tiers: both }), FINAL), 'intra node, inter node');
  assert.equal(measuredWords(probeRun({ state: 'running' }), FINAL), 'not yet');
  assert.equal(measuredWords(probeRun({ state: 'completed', ingest_done: false }), FINAL), 'not yet');
  assert.equal(measuredWords(probeRun({ state: 'completed', ingest_done: true }), FINAL), 'none: its output held no curve to fit');
  assert.equal(measuredWords(probeRun({ state: 'failed', ingest_done: true }), FINAL), 'none');
});

test("a failed run says its failure kind and the evidence, else the server's message; a completed run nothing", () => {
  const failed = probeRun({ state: 'failed', failure_kind: 'launcher_error', failure_detail: 'srun: error: no step' });
  assert.deepEqual(failureParts(failed), ['launcher error', 'srun: error: no step']);
  assert.deepEqual(failureParts(probeRun({ state: 'submit_failed', message: 'sbatch: invalid partition' })), ['', 'sbatch: invalid partition']);
  assert.deepEqual(failureParts(probeRun({ state: 'completed', message: 'requeued once' })), ['', '']);
});

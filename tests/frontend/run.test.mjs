// @ts-check
// A run's page by its kind (frontend/static/js/run/): a fabric probe's status line, an inference run's figures.

import assert from 'node:assert/strict';
import { test } from 'node:test';

import { inferenceFigures } from '../../frontend/static/js/run/inference.js';
import { probeStatus } from '../../frontend/static/js/run/probe.js';
import { fabricEntry, inferenceRow, probeRun } from './fixtures.mjs';

const FINAL = new Set(['completed', 'failed', 'cancelled', 'timeout']);

test("a probe run's curves follow it until it has ended and its output is read, then say which tiers it measured", () => {
  assert.equal(probeStatus(probeRun({ state: 'running' }), FINAL), 'Not finished: its curves follow it.');
  assert.equal(probeStatus(probeRun({ state: 'completed', ingest_done: false }), FINAL), 'Not finished: its curves follow it.');
  const both = [fabricEntry({}), fabricEntry({ shape: { ...fabricEntry({}).shape, tier: 'inter_node' } })];
  assert.equal(probeStatus(probeRun({ state: 'completed', ingest_done: true, tiers: both }), FINAL),
    'Finished; tiers measured: intra node, inter node.');
  assert.equal(probeStatus(probeRun({ state: 'failed', ingest_done: true }), FINAL), 'Finished; tiers measured: none.');
});

test("an inference run's figures in words: times in ms, each rank's memory where there are several, a dash for none", () => {
  const single = inferenceFigures(inferenceRow({}));
  assert.equal(single.layout, 'single, compile off, fp32, 2 prompts at once');
  assert.equal(single.tokens_per_s, '121');
  assert.equal(single.ttft_s, '12.5 ms');
  assert.equal(single.latency, '8 ms median, 12.3 ms at the 95th percentile');
  assert.equal(single.load, '1.5 s, —');
  assert.equal(single.peak_memory_bytes, '2 MiB');
  const tp = inferenceFigures(inferenceRow({ tp: 2, compile: true, memory_per_rank: [1024, 2048], ttft_s: null }));
  assert.equal(tp.layout, 'tp=2, compile on, fp32, 2 prompts at once');
  assert.equal(tp.ttft_s, '—');
  assert.equal(tp.peak_memory_bytes, '2 MiB (ranks: 1 KiB, 2 KiB)');
});

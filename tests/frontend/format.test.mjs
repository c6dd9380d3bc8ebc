// @ts-check
// Numbers, sizes, durations and progress as the pages write them (frontend/static/js/format.js).

import assert from 'node:assert/strict';
import { test } from 'node:test';

import { bytes, duration, energy, number, percent, progress, reason, utcDate } from '../../frontend/static/js/format.js';

test('numbers keep three significant digits, whole numbers all of theirs, and a missing one is a dash', () => {
  assert.equal(number(0.123456), '0.123');
  assert.equal(number(123456), '123456');
  assert.equal(number(1.23456, 5), '1.2346');
  assert.equal(number(null), '—');
  assert.equal(number(undefined), '—');
  assert.equal(number(Number.NaN), '—');
});

test('sizes, durations, shares and energy in the unit that keeps them short', () => {
  assert.equal(bytes(512), '512 B');
  assert.equal(bytes(1536), '1.5 KiB');
  assert.equal(bytes(3 * 1024 ** 3), '3 GiB');
  assert.equal(duration(42.4), '42 s');
  assert.equal(duration(-1), '0 s');
  assert.equal(duration(600), '10 min');
  assert.equal(duration(3 * 3600 + 5 * 60), '3 h 5 min');
  assert.equal(percent(0.5), '50 %');
  assert.equal(percent(87.5, true), '87.5 %');
  assert.equal(energy(2500), '2.5 kJ');
  assert.equal(energy(12), '12 J');
  assert.equal(energy(null), '—');
});

test('times without a zone are read as UTC', () => {
  assert.equal(utcDate('2024-01-02T03:04:05').toISOString(), '2024-01-02T03:04:05.000Z');
  assert.equal(utcDate('2024-01-02T03:04:05+01:00').toISOString(), '2024-01-02T02:04:05.000Z');
});

test('progress says the epoch and the time left while running, the epochs done after', () => {
  assert.equal(progress('running', 1, 4, 10), 'epoch 2 of 4, about 30 s left');
  assert.equal(progress('running', 0, 4, null), 'epoch 1 of 4');
  assert.equal(progress('completed', 4, 4, 10), '4 of 4 epochs');
  assert.equal(progress('pending', 0, 4, null), '');
  assert.equal(progress('running', 1, null, 10), '1 epoch done'); // a program's: no planned count
});

test('the reason of a run: waiting for a slot, Slurm\'s while queued, the message once it failed', () => {
  const final = new Set(['completed', 'failed']);
  const run = {
    state: /** @type {const} */ ('pending'), waiting: false, scheduler_reason: 'Resources', message: null, waiting_for: null,
  };
  assert.equal(reason(run, final), 'Slurm: Resources');
  // Slurm's "Dependency", as the server words it: the training run an inference run waits for.
  const training = 'waiting for training run abc to end';
  assert.equal(reason({ ...run, scheduler_reason: 'Dependency', waiting_for: training }, final), training);
  // Why it waits, as the server said it: never a max_concurrent that the request did not set.
  const turns = 'waiting for its turn: the experiment\'s runs are exclusive and share this cluster\'s nodes, so they run one at a time';
  assert.equal(reason({ ...run, waiting: true, message: turns }, final), turns);
  assert.equal(reason({ ...run, waiting: true }, final), "waits for its turn among the experiment's runs");
  assert.equal(reason({ ...run, state: 'failed', message: 'out of memory' }, final), 'out of memory');
  assert.equal(reason({ ...run, state: 'completed', message: 'a warning' }, final), '');
  assert.equal(reason({ ...run, scheduler_reason: 'None' }, final), '');
});

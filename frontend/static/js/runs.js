// The runs page: each shown run's state, reason, job id and progress follow the server without a reload.
// One request for the runs and one for the progress of each experiment that has a shown run still live.

import { finalStates, getJSON, poll } from './api.js';
import { progress, reason } from './format.js';

const FINAL = finalStates();
const rows = new Map([...document.querySelectorAll('tr[data-run]')].map((row) => [row.dataset.run, row]));
const status = document.getElementById('live-status');

// Live until it has ended and its output has all been read (its last epochs arrive after its final state).
const isLive = (row) => !FINAL.has(row.dataset.state) || row.dataset.ingested !== 'true';

function update(row, run, figures) {
  const changed = row.dataset.state !== run.state;
  row.dataset.state = run.state;
  row.dataset.ingested = String(run.ingest_done);
  const badge = row.querySelector('.state');
  badge.dataset.state = run.state;
  badge.textContent = run.state;
  row.querySelector('.reason').textContent = reason(run, FINAL);
  row.querySelector('.job').textContent = run.job_id ?? '';
  row.querySelector('.progress').textContent = progress(
    run.state, figures?.epochs_done ?? 0, Number(row.dataset.epochs), figures?.mean_epoch_time_s);
  return changed;
}

async function step() {
  const experiments = new Set([...rows.values()].filter(isLive).map((row) => row.dataset.experiment));
  if (!experiments.size) {
    if (rows.size) status.textContent = 'Every run shown has ended.';
    return false;
  }
  let changed = 0;
  for (const experiment of experiments) {
    const id = encodeURIComponent(experiment);
    const [runs, compare] = await Promise.all([
      getJSON(`/api/runs?experiment_id=${id}&limit=1000`),
      getJSON(`/api/experiments/${id}/compare`),
    ]);
    const figures = new Map(compare.data.map((row) => [row.run_id, row]));
    for (const run of runs.data) {
      const row = rows.get(run.id);
      if (row && update(row, run, figures.get(run.id))) changed += 1;
    }
  }
  if (changed) status.textContent = `${changed} ${changed === 1 ? 'run' : 'runs'} changed state at ${new Date().toLocaleTimeString()}.`;
  return true;
}

poll(step, 2000, (error) => { status.textContent = `Cannot reach the server (${error.message}); trying again.`; });

// The runs page: each shown run's state, reason, job id and progress follow the server without a reload, and
// runs submitted since the page was drawn are announced. Two requests a cycle: the page's runs from the list
// endpoint, with the page's own filters, and the progress of the shown runs still live.

import { finalStates, getJSON, pageData, poll } from './api.js';
import { progress, reason } from './format.js';

const FINAL = finalStates();
const page = pageData();
const rows = new Map([...document.querySelectorAll('tr[data-run]')].map((row) => [row.dataset.run, row]));
const status = document.getElementById('live-status');
const newRuns = document.getElementById('new-runs');

// Live until it has ended and its output has all been read (its last epochs arrive after its final state).
const isLive = (row) => !FINAL.has(row.dataset.state) || row.dataset.ingested !== 'true';

function update(row, run) {
  const changed = row.dataset.state !== run.state;
  row.dataset.state = run.state;
  row.dataset.ingested = String(run.ingest_done);
  const badge = row.querySelector('.state');
  badge.dataset.state = run.state;
  badge.textContent = run.state;
  row.querySelector('.reason').textContent = reason(run, FINAL);
  row.querySelector('.job').textContent = run.job_id ?? '';
  return changed;
}

async function showProgress(live) {
  const query = new URLSearchParams(live.map((row) => ['run_id', row.dataset.run]));
  const compare = await getJSON(`/api/compare?${query}`);
  for (const figures of compare.data) {
    const row = rows.get(figures.run_id);
    row.querySelector('.progress').textContent = progress(
      figures.state, figures.epochs_done, Number(row.dataset.epochs), figures.mean_epoch_time_s);
  }
}

function announce(count) {
  const added = count - page.count;
  newRuns.hidden = added <= 0;
  newRuns.textContent = `${added} new ${added === 1 ? 'run' : 'runs'}: show them`;
}

async function step() {
  const wasLive = [...rows.values()].filter(isLive);
  if (!wasLive.length && !page.first_page) {
    if (rows.size) status.textContent = 'Every run shown has ended.';
    return false;
  }
  const listed = await getJSON(`/api/runs?${page.runs_query}`);
  let changed = 0;
  for (const run of listed.data) {
    const row = rows.get(run.id);
    if (row && update(row, run)) changed += 1;
  }
  // Progress of what was live before this cycle too: a run's last epochs arrive as it ends.
  if (wasLive.length) await showProgress(wasLive);
  if (page.first_page) announce(listed.count);
  if (changed) status.textContent = `${changed} ${changed === 1 ? 'run' : 'runs'} changed state at ${new Date().toLocaleTimeString()}.`;
  else if (rows.size && !wasLive.length) status.textContent = 'Every run shown has ended.';
  return true;
}

poll(step, 2000, (error) => { status.textContent = `Cannot reach the server (${error.message}); trying again.`; });

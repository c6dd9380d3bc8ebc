// The run page: state, curves, output and history follow the run until it has ended and all its output is read.

import { finalStates, getJSON, pageData, poll, postJSON } from './api.js';
import { addDownloads, COLOURS, draw } from './charts.js';
import { h, replaceChildren } from './dom.js';
import { progress, reason, utcDate } from './format.js';
import { epochValue, fillMenu, metricLabel, namesIn } from './dashboard/custom.js';
import { showFlags, showResources } from './run/trust.js';

const FINAL = finalStates();
const { run_id: runId, epochs } = pageData();
const base = `/api/runs/${encodeURIComponent(runId)}`;
const logElement = document.getElementById('log');
const follow = document.getElementById('log-follow');
const LOG_KEEP = 256 * 1024; // characters of output kept on the page
const LOG_TAIL = 64 * 1024; // bytes read at first: the end of a long output

let logOffset = null;
let logComplete = false;
let eventCount = document.querySelectorAll('#events-table tbody tr').length;

function drawCurves(kept) {
  const x = kept.map((point) => point.epoch);
  const series = (key) => kept.map((point) => point[key] ?? null);
  const epochAxis = { title: { text: 'epoch' }, dtick: 1 };
  draw('chart-run-loss', [
    { name: 'train loss', x, y: series('train_loss'), mode: 'lines+markers', line: { color: COLOURS[0] } },
    { name: 'validation loss', x, y: series('val_loss'), mode: 'lines+markers', line: { color: COLOURS[1], dash: 'dash' } },
  ], { xaxis: epochAxis, yaxis: { title: { text: 'loss' } } });
  draw('chart-run-accuracy', [
    { name: 'validation accuracy', x, y: series('val_accuracy'), mode: 'lines+markers', line: { color: COLOURS[2] } },
  ], { xaxis: epochAxis, yaxis: { title: { text: 'accuracy' }, rangemode: 'tozero' } });
}

// The program's own metrics over the epochs, one at a time as the menu chooses; shown once it has printed one.
const metricChoice = document.getElementById('run-metric-choice');
let keptPoints = [];

function drawMetric() {
  const name = metricChoice.value;
  const points = keptPoints.filter((point) => epochValue(point, name) !== null);
  draw('chart-run-metric', [{ name: metricLabel(name), mode: 'lines+markers', line: { color: COLOURS[4] },
    x: points.map((point) => point.epoch), y: points.map((point) => epochValue(point, name)) }],
  { xaxis: { title: { text: 'epoch' }, dtick: 1 }, yaxis: { title: { text: metricLabel(name) } } }, 'Not printed yet');
}

function drawMetrics(kept) {
  const names = namesIn(kept);
  document.getElementById('run-metric-figure').hidden = !names.length;
  if (!names.length) return;
  keptPoints = kept;
  fillMenu(metricChoice, names);
  drawMetric();
}

metricChoice.addEventListener('change', drawMetric);

function showRun(run, figures) {
  const badge = document.getElementById('run-state');
  badge.dataset.state = run.state;
  badge.textContent = run.state;
  document.getElementById('run-reason').textContent = reason(run, FINAL);
  document.getElementById('run-job').textContent = run.job_id ?? '—';
  document.getElementById('run-scheduler-state').textContent =
    (run.scheduler_state ?? '—') + (run.exit_code ? `, exit ${run.exit_code}` : '');
  document.getElementById('run-progress').textContent =
    progress(run.state, figures.epochs_done, epochs, figures.mean_epoch_time_s) || '—';
  // A completed run's message is a warning (a program that printed no epoch record), not a reason it failed.
  const warning = document.getElementById('run-warning');
  warning.hidden = !(run.state === 'completed' && run.message);
  warning.textContent = warning.hidden ? '' : run.message;
}

async function readLog() {
  if (logOffset === null) {
    const first = await getJSON(`${base}/log?offset=0&limit=1024`);
    logOffset = first.size > LOG_TAIL ? first.size - LOG_TAIL : 0;
    if (logOffset) logElement.textContent = '… (the output before this is left out; see the whole output)\n';
  }
  for (let reads = 0; reads < 8; reads += 1) {
    const piece = await getJSON(`${base}/log?offset=${logOffset}&limit=65536`);
    logOffset = piece.next_offset;
    logComplete = piece.complete;
    if (!piece.text) break;
    const text = logElement.textContent + piece.text;
    logElement.textContent = text.length > LOG_KEEP ? text.slice(-LOG_KEEP) : text;
    if (piece.next_offset >= piece.size) break;
  }
  if (follow.checked) logElement.scrollTop = logElement.scrollHeight;
}

async function readEvents() {
  const events = await getJSON(`${base}/events`);
  if (events.count === eventCount) return;
  eventCount = events.count;
  const clock = (iso) => utcDate(iso).toISOString().slice(11, 19);
  replaceChildren(document.querySelector('#events-table tbody'), events.data.map((event) => h('tr', {},
    h('td', {}, clock(event.at)), h('td', {}, event.kind),
    h('td', {}, (event.state ?? '') + (event.scheduler_state ? ` (${event.scheduler_state})` : '')),
    h('td', {}, event.job_id ?? ''), h('td', {}, event.detail ?? ''))));
}

async function step() {
  const run = await getJSON(base);
  // The epochs that count (after a restart or a resume) and their figures, by the server's one rule; asked for
  // after the run, so that once the run says all its output is read, these hold all of it.
  const compare = await getJSON(`/api/compare?run_id=${encodeURIComponent(runId)}&history=true`);
  showRun(run, compare.data[0]);
  showFlags(compare.data[0].flags);
  showResources(compare.data[0].resources ?? null, FINAL.has(run.state));
  drawCurves(compare.histories[runId]);
  drawMetrics(compare.histories[runId] ?? []);
  await Promise.all([readLog(), readEvents()]);
  // Go on until the run has ended, its records are all read and the output is complete.
  return !(FINAL.has(run.state) && run.ingest_done && logComplete);
}

for (const button of document.querySelectorAll('button[data-action]')) {
  button.addEventListener('click', async () => {
    const status = document.getElementById('action-status');
    button.disabled = true;
    const answer = await postJSON(`${base}/${button.dataset.action}`);
    status.textContent = answer.ok
      ? (button.dataset.action === 'cancel' ? 'Cancelling: the state follows once Slurm has ended the job.' : 'Submitted again.')
      : `Refused (${answer.status}): ${answer.body?.detail ?? ''}`;
    if (answer.ok && button.dataset.action === 'resubmit') window.location.reload();
    // "Run again" made a new run: its page is where to follow it.
    if (answer.ok && button.dataset.action === 'rerun') window.location.assign(encodeURIComponent(answer.body.id)); // beside this page: runs/ID
  });
}

addDownloads(`scalelab-run-${runId}`);
poll(step, 2000, (error) => {
  document.getElementById('action-status').textContent = `Cannot reach the server (${error.message}); trying again.`;
});

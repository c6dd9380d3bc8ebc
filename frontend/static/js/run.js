// The run page: state, curves, output and history follow the run until it has ended and all its output is read.

import { finalStates, getJSON, pageData, poll, postJSON } from './api.js';
import { addDownloads, COLOURS, draw } from './charts.js';
import { h, replaceChildren } from './dom.js';
import { progress, reason } from './format.js';

const FINAL = finalStates();
const { run_id: runId, epochs } = pageData();
const base = `/api/runs/${encodeURIComponent(runId)}`;
const logElement = document.getElementById('log');
const follow = document.getElementById('log-follow');
const LOG_KEEP = 256 * 1024; // characters of output kept on the page
const LOG_TAIL = 64 * 1024; // bytes read at first: the end of a long output

const records = [];
let logOffset = null;
let logComplete = false;
let eventCount = document.querySelectorAll('#events-table tbody tr').length;

// The epochs the run stands on now: a new start of the worker begins again, a resume brings back the epochs its
// checkpoint holds (the latest record of each), as the server's summary does.
function currentEpochs() {
  const latest = new Map();
  let shown = new Map();
  for (const record of records) {
    if (record.kind === 'start') shown = new Map();
    else if (record.kind === 'resume') shown = new Map([...latest].filter(([epoch]) => epoch <= record.epoch));
    else if (record.kind === 'epoch') {
      latest.set(record.epoch, record);
      shown.set(record.epoch, record);
    }
  }
  return [...shown.values()].sort((a, b) => a.epoch - b.epoch);
}

function meanEpochTime(kept) {
  if (!kept.length) return null;
  const later = kept.length > 1 ? kept.slice(1) : kept; // the first epoch pays for warm-up
  return later.reduce((sum, record) => sum + record.epoch_time_s, 0) / later.length;
}

function drawCurves(kept) {
  const x = kept.map((record) => record.epoch);
  const series = (key) => kept.map((record) => record[key] ?? null);
  const epochAxis = { title: { text: 'epoch' }, dtick: 1 };
  draw('chart-run-loss', [
    { name: 'train loss', x, y: series('train_loss'), mode: 'lines+markers', line: { color: COLOURS[0] } },
    { name: 'validation loss', x, y: series('val_loss'), mode: 'lines+markers', line: { color: COLOURS[1], dash: 'dash' } },
  ], { xaxis: epochAxis, yaxis: { title: { text: 'loss' } } });
  draw('chart-run-accuracy', [
    { name: 'validation accuracy', x, y: series('val_accuracy'), mode: 'lines+markers', line: { color: COLOURS[2] } },
  ], { xaxis: epochAxis, yaxis: { title: { text: 'accuracy' }, rangemode: 'tozero' } });
}

function showRun(run, kept) {
  const badge = document.getElementById('run-state');
  badge.dataset.state = run.state;
  badge.textContent = run.state;
  document.getElementById('run-reason').textContent = reason(run, FINAL);
  document.getElementById('run-job').textContent = run.job_id ?? '—';
  document.getElementById('run-scheduler-state').textContent =
    (run.scheduler_state ?? '—') + (run.exit_code ? `, exit ${run.exit_code}` : '');
  document.getElementById('run-progress').textContent =
    progress(run.state, kept.length, epochs, meanEpochTime(kept)) || '—';
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
  const clock = (iso) => new Date(/[zZ]|[+-]\d\d:\d\d$/.test(iso) ? iso : `${iso}Z`).toISOString().slice(11, 19);
  replaceChildren(document.querySelector('#events-table tbody'), events.data.map((event) => h('tr', {},
    h('td', {}, clock(event.at)), h('td', {}, event.kind),
    h('td', {}, (event.state ?? '') + (event.scheduler_state ? ` (${event.scheduler_state})` : '')),
    h('td', {}, event.job_id ?? ''), h('td', {}, event.detail ?? ''))));
}

async function step() {
  const [run, metrics] = await Promise.all([
    getJSON(base),
    getJSON(`${base}/metrics?skip=${records.length}`),
  ]);
  records.push(...metrics.data);
  const kept = currentEpochs();
  showRun(run, kept);
  drawCurves(kept);
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

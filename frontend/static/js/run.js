// @ts-check
// The run page: state, what it measured (a training run's curves, a fabric probe's busbw curves and fits, an
// inference run's figures and generations), output and history follow the run until it has ended and all its output
// is read. The page mounts it on its <main>.

import { finalStates, getJSON, pageData, poll, postJSON } from './api.js';
import { addDownloads, COLOURS, draw } from './charts.js';
import { epochValue, fillMenu, metricLabel, namesIn } from './dashboard/custom.js';
import { drawEpochTimes } from './dashboard/epochs.js';
import { utilizationText } from './dashboard/utilization.js';
import { byId, h, one, replaceChildren } from './dom.js';
import { progress, reason, utcDate } from './format.js';
import { hasHang, showHang } from './run/hang.js';
import { inferenceView } from './run/inference.js';
import { probeView } from './run/probe.js';
import { showFlags, showResources } from './run/trust.js';

/** @typedef {import('./types/api.js').ComparePublic} ComparePublic */
/** @typedef {import('./types/api.js').CompareRow} CompareRow */
/** @typedef {import('./types/api.js').EpochPoint} EpochPoint */
/** @typedef {import('./types/api.js').RunEventsPublic} RunEventsPublic */
/** @typedef {import('./types/api.js').RunLog} RunLog */
/** @typedef {import('./types/api.js').RunPublic} RunPublic */
/** @typedef {import('./types/api.js').RunStacks} RunStacks */

const LOG_KEEP = 256 * 1024; // characters of output kept on the page
const LOG_TAIL = 64 * 1024; // bytes read at first: the end of a long output

/**
 * The loss and accuracy curves of the run's counting epochs.
 * @param {ParentNode} root
 * @param {EpochPoint[]} kept
 */
function drawCurves(root, kept) {
  const x = kept.map((point) => point.epoch);
  /** @param {'train_loss' | 'val_loss' | 'val_accuracy'} key */
  const series = (key) => kept.map((point) => point[key] ?? null);
  const epochAxis = { title: { text: 'epoch' }, dtick: 1 };
  draw(byId(root, 'chart-run-loss'), [
    { name: 'train loss', x, y: series('train_loss'), mode: 'lines+markers', line: { color: COLOURS[0] } },
    { name: 'validation loss', x, y: series('val_loss'), mode: 'lines+markers', line: { color: COLOURS[1], dash: 'dash' } },
  ], { xaxis: epochAxis, yaxis: { title: { text: 'loss' } } });
  draw(byId(root, 'chart-run-accuracy'), [
    { name: 'validation accuracy', x, y: series('val_accuracy'), mode: 'lines+markers', line: { color: COLOURS[2] } },
  ], { xaxis: epochAxis, yaxis: { title: { text: 'accuracy' }, rangemode: 'tozero' } });
}

/**
 * The program's own metrics over the epochs, one at a time as the menu chooses; shown once it has printed one.
 * @param {HTMLElement} figure the page's #run-metric-figure
 */
function metricsChart(figure) {
  /** @type {HTMLSelectElement} */
  const choice = byId(figure, 'run-metric-choice');
  /** @type {EpochPoint[]} */
  let keptPoints = [];

  function drawMetric() {
    const name = choice.value;
    const points = keptPoints.filter((point) => epochValue(point, name) !== null);
    draw(byId(figure, 'chart-run-metric'), [{ name: metricLabel(name), mode: 'lines+markers', line: { color: COLOURS[4] },
      x: points.map((point) => point.epoch), y: points.map((point) => epochValue(point, name)) }],
    { xaxis: { title: { text: 'epoch' }, dtick: 1 }, yaxis: { title: { text: metricLabel(name) } } }, 'Not printed yet');
  }
  choice.addEventListener('change', drawMetric);

  /** @param {EpochPoint[]} kept */
  return (kept) => {
    const names = namesIn(kept);
    figure.hidden = !names.length;
    if (!names.length) return;
    keptPoints = kept;
    fillMenu(choice, names);
    drawMetric();
  };
}

/**
 * A training run's curves: loss, accuracy, each epoch's time and the program's own metrics.
 * @param {HTMLElement} root
 * @param {string} runId
 * @returns {(kept: EpochPoint[]) => Promise<void>}
 */
function trainingView(root, runId) {
  const drawMetrics = metricsChart(byId(root, 'run-metric-figure'));
  return async (kept) => {
    drawCurves(root, kept);
    drawEpochTimes(byId(root, 'chart-run-epoch-times'), [{ runId, name: `run ${runId}`, colour: COLOURS[0], points: kept }]);
    drawMetrics(kept);
  };
}

/**
 * @param {ParentNode} root
 * @param {RunPublic} run
 * @param {CompareRow} figures
 * @param {number | null} epochs the epochs the run's spec asks for (none: a program's)
 * @param {Set<string>} final
 */
function showRun(root, run, figures, epochs, final) {
  const badge = byId(root, 'run-state');
  badge.dataset.state = run.state;
  badge.textContent = run.state;
  byId(root, 'run-reason').textContent = reason(run, final);
  byId(root, 'run-job').textContent = run.job_id ?? '—';
  byId(root, 'run-scheduler-state').textContent =
    (run.scheduler_state ?? '—') + (run.exit_code ? `, exit ${run.exit_code}` : '');
  byId(root, 'run-progress').textContent =
    progress(run.state, figures.epochs_done, epochs, figures.mean_epoch_time_s) || '—';
  // A completed run's message is a warning (a program that printed no epoch record), not a reason it failed.
  const warning = byId(root, 'run-warning');
  warning.hidden = !(run.state === 'completed' && run.message);
  warning.textContent = warning.hidden ? '' : run.message;
}

/**
 * The run's output as it grows: the end of a long one first, then each new piece, the page keeping LOG_KEEP
 * characters at most.
 * @param {string} base the run's API path
 * @param {HTMLElement} logElement
 * @param {HTMLInputElement} follow
 */
function logReader(base, logElement, follow) {
  /** @type {number | null} */
  let logOffset = null;
  let complete = false;
  return {
    get complete() {
      return complete;
    },
    async read() {
      if (logOffset === null) {
        /** @type {RunLog} */
        const first = await getJSON(`${base}/log?offset=0&limit=1024`);
        logOffset = first.size > LOG_TAIL ? first.size - LOG_TAIL : 0;
        if (logOffset) logElement.textContent = '… (the output before this is left out; see the whole output)\n';
      }
      for (let reads = 0; reads < 8; reads += 1) {
        /** @type {RunLog} */
        const piece = await getJSON(`${base}/log?offset=${logOffset}&limit=65536`);
        logOffset = piece.next_offset;
        complete = piece.complete;
        if (!piece.text) break;
        const text = logElement.textContent + piece.text;
        logElement.textContent = text.length > LOG_KEEP ? text.slice(-LOG_KEEP) : text;
        if (piece.next_offset >= piece.size) break;
      }
      if (follow.checked) logElement.scrollTop = logElement.scrollHeight;
    },
  };
}

/**
 * The run's course, redrawn when it has more events than the table shows.
 * @param {string} base
 * @param {HTMLTableSectionElement} body
 */
function eventsReader(base, body) {
  let eventCount = body.querySelectorAll('tr').length;
  /** @param {string} iso */
  const clock = (iso) => utcDate(iso).toISOString().slice(11, 19);
  return async () => {
    /** @type {RunEventsPublic} */
    const events = await getJSON(`${base}/events`);
    if (events.count === eventCount) return;
    eventCount = events.count;
    replaceChildren(body, events.data.map((event) => h('tr', {},
      h('td', {}, clock(event.at)), h('td', {}, event.kind),
      h('td', {}, (event.state ?? '') + (event.scheduler_state ? ` (${event.scheduler_state})` : '')),
      h('td', {}, event.job_id ?? ''), h('td', {}, event.detail ?? ''))));
  };
}

/**
 * The buttons that act on the run (cancel, submit again, run again), with what the server answered.
 * @param {ParentNode} root
 * @param {string} base
 */
function bindActions(root, base) {
  const status = byId(root, 'action-status');
  for (const element of root.querySelectorAll('button[data-action]')) {
    const button = /** @type {HTMLButtonElement} */ (element);
    button.addEventListener('click', async () => {
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
}

/**
 * Follows the run in `root` (the page's <main>) until it has ended and all its output is read.
 * @param {HTMLElement} root
 * @returns {() => void} stops following
 */
export function mount(root) {
  const final = finalStates();
  /** @type {{ run_id: string, experiment_id: string, kind: string, epochs: number | null }} */
  const { run_id: runId, experiment_id: experimentId, kind, epochs } = pageData();
  const base = `/api/runs/${encodeURIComponent(runId)}`;
  const trust = byId(root, 'trust');
  // What the run measured, by its kind: the page has the part for it (run.html). MFU and throughput are a training
  // run's (the worker's or a program's): a probe or an inference run has no sentence about them.
  const trains = kind !== 'probe' && kind !== 'inference';
  const drawMeasured = kind === 'probe' ? probeView(root, runId, final)
    : kind === 'inference' ? inferenceView(root, runId, experimentId, final)
      : trainingView(root, runId);
  const log = logReader(base, byId(root, 'log'), byId(root, 'log-follow'));
  const readEvents = eventsReader(base, one(root, '#events-table tbody'));

  async function step() {
    /** @type {RunPublic} */
    const run = await getJSON(base);
    // The epochs that count (after a restart or a resume) and their figures, by the server's one rule; asked for
    // after the run, so that once the run says all its output is read, these hold all of it.
    /** @type {ComparePublic} */
    const compare = await getJSON(`/api/compare?run_id=${encodeURIComponent(runId)}&history=true`);
    const [figures] = compare.data;
    const kept = compare.histories?.[runId] ?? [];
    showRun(root, run, figures, epochs, final);
    showFlags(trust, figures.flags);
    byId(trust, 'run-utilization').textContent = trains ? utilizationText(figures) : '';
    showResources(trust, figures.resources, final.has(run.state));
    await Promise.all([drawMeasured(kept), log.read(), readEvents(), readHang(run)]);
    // Go on until the run has ended, its records are all read and the output is complete.
    return !(final.has(run.state) && run.ingest_done && log.complete);
  }

  /** The stacks are read from the run's files: asked for only while it has a hang whose verdict is not shown. */
  let hangShown = '';
  /** @param {RunPublic} run */
  async function readHang(run) {
    const seen = `${run.stalled_at}|${run.failure_kind}|${run.failure_detail}`;
    if (!hasHang(run) || seen === hangShown) return;
    /** @type {RunStacks} */
    const stacks = await getJSON(`${base}/stacks`);
    showHang(byId(root, 'hang'), run, stacks);
    if (stacks.verdict) hangShown = seen;
  }

  bindActions(root, base);
  addDownloads(root, `scalelab-run-${runId}`);
  return poll(step, 2000, (error) => {
    byId(root, 'action-status').textContent = `Cannot reach the server (${error.message}); trying again.`;
  });
}

// @ts-check
// The experiment page's section "Against a reference": the experiment against the reference pinned for its spec
// (GET /api/experiments/{id}/regression), or against another experiment chosen here (an overlay of the two, with
// the same test), each point's verdict in words and drawn; and the pinned reference's history over time
// (GET /api/references/{id}/history). Pinning and marking an A/A run are PUTs. The page mounts it on the section.

import { ApiError, getJSON, poll, putJSON } from './api.js';
import { COLOURS, draw, plotText } from './charts.js';
import { byId, h, replaceChildren } from './dom.js';
import { number } from './format.js';
import { refusal } from './sharing.js';

/** @typedef {import('./types/api.js').RegressionPublic} RegressionPublic */
/** @typedef {import('./types/api.js').RegressionPoint} RegressionPoint */
/** @typedef {import('./types/api.js').ReferenceHistory} ReferenceHistory */
/** @typedef {import('./charts.js').Trace} Trace */

/** @param {string} verdict */
const words = (verdict) => verdict.replace('_', ' ');

/**
 * A point's ratio with its interval, in words: "1.02x [0.98, 1.05]".
 * @param {RegressionPoint} point
 */
export function ratioWords(point) {
  if (point.ratio === null) return 'no ratio (a side has no finished run)';
  const interval = point.ci_low !== null && point.ci_high !== null
    ? ` [${number(point.ci_low, 3)}, ${number(point.ci_high, 3)}]` : ' (no interval: fewer than 2 runs a side)';
  return `${number(point.ratio, 3)}x${interval}`;
}

/**
 * The verdict of each point, as a list item that says it and why it may not stand.
 * @param {RegressionPoint} point
 */
function pointItem(point) {
  return h('li', { class: 'regression-point', dataset: { verdict: point.verdict, series: point.series, gpus: String(point.gpus) } },
    h('strong', {}, `${point.series} at ${point.gpus} GPUs: ${words(point.verdict)}`),
    ` ${ratioWords(point)} (reference n = ${point.reference_n}, this n = ${point.later_n}).`,
    ...(point.hedge ? [' ', h('span', { class: 'hedge' }, `Hedged: ${point.hedge}.`)] : []));
}

/**
 * Two traces per series: the reference's mean time per point and this experiment's, the verdict as each later
 * point's label.
 * @param {RegressionPublic} answer
 * @returns {Trace[]}
 */
export function overlayTraces(answer) {
  const series = [...new Set(answer.points.map((point) => point.series))];
  return series.flatMap((name, index) => {
    const points = answer.points.filter((point) => point.series === name);
    const colour = COLOURS[index % COLOURS.length];
    const reference = points.filter((point) => point.reference_mean_s !== null);
    const later = points.filter((point) => point.later_mean_s !== null);
    return [
      {
        name: `${name}: reference ${answer.reference_id}`, legendgroup: name, mode: 'lines+markers',
        x: reference.map((point) => point.gpus), y: reference.map((point) => point.reference_mean_s),
        line: { color: colour, dash: 'dot' }, marker: { size: 8, symbol: 'circle-open' },
        hovertemplate: '%{y:.4g} s with %{x} GPUs<extra>%{fullData.name}</extra>',
      },
      {
        name: `${name}: this experiment`, legendgroup: name, mode: 'lines+markers+text',
        x: later.map((point) => point.gpus), y: later.map((point) => point.later_mean_s),
        text: later.map((point) => `${words(point.verdict)} ${number(point.ratio ?? NaN, 3)}x`),
        textposition: 'top center',
        customdata: later.map((point) => plotText(ratioWords(point))),
        hovertemplate: '%{y:.4g} s with %{x} GPUs: %{text}, %{customdata}<extra>%{fullData.name}</extra>',
        line: { color: colour }, marker: { size: 9 },
      },
    ];
  });
}

/**
 * The history as traces: one per series and GPU count, the ratio of each experiment over time with its interval.
 * @param {ReferenceHistory} history
 * @returns {Trace[]}
 */
export function historyTraces(history) {
  const keys = [...new Set(history.entries.flatMap((entry) => entry.points.map((point) => `${point.series} at ${point.gpus} GPUs`)))];
  return keys.map((key, index) => {
    const rows = history.entries.flatMap((entry) => entry.points
      .filter((point) => `${point.series} at ${point.gpus} GPUs` === key && point.ratio !== null)
      .map((point) => ({ entry, point })));
    return {
      name: key, mode: 'lines+markers', x: rows.map(({ entry }) => entry.created_at), y: rows.map(({ point }) => point.ratio),
      error_y: {
        type: 'data', symmetric: false,
        array: rows.map(({ point }) => (point.ci_high === null || point.ratio === null ? 0 : point.ci_high - point.ratio)),
        arrayminus: rows.map(({ point }) => (point.ci_low === null || point.ratio === null ? 0 : point.ratio - point.ci_low)),
      },
      text: rows.map(({ entry, point }) => plotText(`${entry.name} (${entry.experiment_id}, ${entry.role}): ${words(point.verdict)}; `
        + `image ${entry.image_digest ?? entry.image ?? 'not reported'}, torch ${entry.torch_version ?? '?'}`)),
      hovertemplate: '%{y:.3f}x on %{x}<br>%{text}<extra>%{fullData.name}</extra>',
      line: { color: COLOURS[index % COLOURS.length] }, marker: { size: 9 },
    };
  });
}

/**
 * @param {HTMLElement} section
 * @param {ReferenceHistory} history
 */
function drawHistory(section, history) {
  const { floor } = history.floor;
  const times = history.entries.map((entry) => entry.created_at);
  /** @param {number} y @returns {Trace} */
  const band = (y) => ({ name: 'noise floor', legendgroup: 'floor', showlegend: y > 1, mode: 'lines', x: [times[0], times.at(-1)],
    y: [y, y], line: { color: '#999999', dash: 'dot' }, hoverinfo: 'skip' });
  const traces = historyTraces(history);
  draw(byId(section, 'chart-reference-history'), traces.length ? [...traces, band(1 + floor), band(1 / (1 + floor))] : [],
    { yaxis: { title: { text: 'time over the reference’s' } }, xaxis: { title: { text: 'submitted' } } });
  replaceChildren(byId(section, 'history-entries'), history.entries.map((entry) => h('li',
    { class: 'history-entry', dataset: { verdict: entry.verdict, role: entry.role, experiment: entry.experiment_id } },
    `${entry.name} (${entry.role}): ${words(entry.verdict)}; image ${entry.image_digest ?? entry.image ?? 'not reported'}`)));
}

/** @param {HTMLElement} section */
export function mount(section) {
  const id = section.dataset.experiment ?? '';
  const summary = byId(section, 'regression-summary');
  const input = /** @type {HTMLInputElement} */ (byId(section, 'overlay-with'));

  /** @param {string} against */
  async function show(against) {
    const query = against ? `?against=${encodeURIComponent(against)}` : '';
    let answer;
    try {
      answer = /** @type {RegressionPublic} */ (await getJSON(`/api/experiments/${encodeURIComponent(id)}/regression${query}`));
    } catch (error) {
      const missing = error instanceof ApiError && error.status === 404;
      summary.textContent = missing && !against
        ? 'No reference is pinned for this experiment’s spec: pin one (this experiment, or an earlier one of the spec), or compare with an experiment by its id.'
        : `The comparison cannot be read: ${/** @type {Error} */ (error).message}`;
      section.dataset.verdict = 'none';
      draw(byId(section, 'chart-overlay'), [], {}, 'No reference to compare with');
      draw(byId(section, 'chart-reference-history'), [], {}, 'No pinned reference');
      return;
    }
    summary.textContent = `Against ${answer.against === 'pinned' ? 'the pinned reference' : 'experiment'} ${answer.reference_id}: ${answer.summary}`;
    section.dataset.verdict = answer.verdict;
    replaceChildren(byId(section, 'regression-points'), answer.points.map(pointItem));
    draw(byId(section, 'chart-overlay'), overlayTraces(answer), {
      xaxis: { title: { text: 'GPUs' }, type: 'log', dtick: Math.log10(2) },
      yaxis: { title: { text: `${answer.points[0]?.measure ?? 'time'} (s)`.replace(/_/g, ' '), rangemode: 'tozero' } },
    });
    if (answer.against === 'pinned') {
      drawHistory(section, /** @type {ReferenceHistory} */ (await getJSON(`/api/references/${encodeURIComponent(answer.reference_id)}/history`)));
    }
    section.dataset.ready = 'true';
  }

  /**
   * @param {string} button
   * @param {string} path
   */
  function action(button, path) {
    document.getElementById(button)?.addEventListener('click', async () => {
      const answer = await putJSON(`/api/experiments/${encodeURIComponent(id)}/${path}`, {});
      if (!answer.ok) summary.textContent = refusal(answer.body?.detail, answer.status);
      else await show(against);
    });
  }
  /** The experiment chosen to compare with ('' for the pinned reference), until another is chosen. */
  let against = '';
  action('pin-reference', 'reference');
  action('mark-aa', 'aa');
  byId(section, 'overlay-go').addEventListener('click', () => {
    against = input.value.trim();
    show(against);
  });
  // Again while the dashboard follows live runs (it marks #charts final once every figure is): their points change.
  poll(async () => {
    await show(against);
    return document.getElementById('charts')?.dataset.ready !== 'final';
  }, 10000, (error) => { summary.textContent = `The comparison cannot be read: ${error.message}`; });
}

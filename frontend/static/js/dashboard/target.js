// @ts-check
// The dashboard's time-to-accuracy section: shown only where the figures have a target, with its three charts, each
// series' summary sentence from the server and the points that have no score. target-series.js builds the traces.

import { draw } from '../charts.js';
import { byId, h, replaceChildren } from '../dom.js';
import { gpuAxis } from './scaling.js';
import {
  batchAxis, epochsTraces, hasTarget, speedupTraces, targetOf, targetsWords, targetWords, timeTraces, unscoredNotes,
} from './target-series.js';

/** @typedef {import('../types/api.js').CompareRow} CompareRow */
/** @typedef {import('./series.js').Series} Series */

/**
 * Draws the section in `root` (the dashboard), or hides it where the figures have no target; returns whether it
 * shows.
 * @param {ParentNode} root
 * @param {CompareRow[]} rows
 * @param {Series[]} series
 */
export function drawTimeToTarget(root, rows, series) {
  const section = byId(root, 'time-to-target');
  const shown = hasTarget(rows, series);
  section.hidden = !shown;
  if (!shown) return false;
  const scored = series.filter((s) => targetOf(s));
  const gpus = [...new Set(scored.flatMap((s) => targetOf(s)?.points.map((p) => p.gpus) ?? []))].sort((a, b) => a - b);
  // The target is named once, in the section's heading: in an axis title it would not fit.
  byId(root, 'target-words').textContent = targetsWords(scored);
  const empty = 'No run has reached the target yet';
  draw(byId(root, 'chart-time-to-target'), timeTraces(scored), {
    xaxis: gpuAxis(gpus), yaxis: { title: { text: 'time to target (s of training)' }, rangemode: 'tozero' },
  }, empty);
  draw(byId(root, 'chart-effective-speedup'), speedupTraces(scored), {
    xaxis: gpuAxis(gpus), yaxis: { title: { text: 'speed-up over the baseline (×)' }, rangemode: 'tozero' },
  }, empty);
  draw(byId(root, 'chart-epochs-to-target'), epochsTraces(scored), {
    xaxis: batchAxis(scored), yaxis: { title: { text: 'epochs to target' }, rangemode: 'tozero' },
  }, empty);
  replaceChildren(byId(root, 'target-unscored'), unscoredNotes(scored).map((note) => h('li', {}, note)));
  replaceChildren(byId(root, 'target-summaries'), scored.map((s) => {
    const answer = /** @type {NonNullable<ReturnType<typeof targetOf>>} */ (targetOf(s));
    return h('p', { class: 'target-summary', dataset: { series: s.name } },
      h('strong', {}, `${s.name} (${targetWords(answer.target)}): `), h('span', { class: 'summary' }, answer.summary), ' ',
      h('span', { class: 'measured-from' }, `Time to target: ${answer.measured_from}.`));
  }));
  return true;
}

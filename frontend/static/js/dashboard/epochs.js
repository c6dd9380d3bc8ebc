// @ts-check
// The time of each epoch over the epochs, one line per run: the medians the other charts show hide how a run got
// there, and a run disturbed for a while (0.6 s, then 3.4 s, then 0.1 s an epoch) shows here at a glance. Drawn on
// the dashboard for its runs and on a run's page for the run.

import { draw, plotText } from '../charts.js';

/** @typedef {import('../types/api.js').EpochPoint} EpochPoint */
/** @typedef {import('../charts.js').Trace} Trace */

/**
 * One run's line, as the caller names and colours it.
 * @typedef {{ runId: string, name: string, colour: string, dash?: string, points: EpochPoint[] }} EpochLine
 */

/**
 * A run's epoch times as a trace: the first epoch, warm-up, which the figures leave out, drawn hollow.
 * @param {EpochLine} line
 * @returns {Trace}
 */
export function epochTimeTrace({ runId, name, colour, dash = 'solid', points }) {
  return {
    name: plotText(name), legendgroup: runId, mode: 'lines+markers',
    x: points.map((point) => point.epoch), y: points.map((point) => point.epoch_time_s),
    text: points.map((_, index) => (index === 0 ? 'warm-up, not timed' : 'timed')),
    hovertemplate: 'epoch %{x}: %{y:.3g} s (%{text})<extra>%{fullData.name}</extra>',
    line: { color: colour, dash },
    marker: { size: 7, symbol: points.map((_, index) => (index === 0 ? 'circle-open' : 'circle')) },
  };
}

/**
 * The chart: one line per run that has printed an epoch.
 * @param {HTMLElement} element
 * @param {EpochLine[]} lines
 */
export function drawEpochTimes(element, lines) {
  const traces = lines.filter((line) => line.points.length).map(epochTimeTrace);
  draw(element, traces, {
    xaxis: { title: { text: 'epoch' }, dtick: 1 },
    yaxis: { title: { text: 'epoch time (s)' }, rangemode: 'tozero' },
  }, 'No epoch printed yet');
}

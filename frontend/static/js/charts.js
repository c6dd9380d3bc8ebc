// @ts-check
// Plotly charts with one look, PNG and SVG downloads, and a message instead when plotly.js is missing.

import { byId } from './dom.js';
import { number } from './format.js';

/** @typedef {PlotlyObject} Trace a plotly trace, built here and handed to plotly */
/** @typedef {PlotlyObject} Layout */

// Okabe and Ito's colours, told apart with the common colour blindnesses; one per series, in order.
export const COLOURS = ['#0072B2', '#D55E00', '#009E73', '#CC79A7', '#E69F00', '#56B4E9', '#000000', '#999999'];

const CONFIG = {
  responsive: true,
  displaylogo: false,
  modeBarButtonsToRemove: ['select2d', 'lasso2d'],
};

const plotly = () => window.Plotly;

/**
 * Draws the traces into `element` (a chart's plot). `emptyText` replaces the chart when no trace has a point:
 * "No figures yet", or why there will be none.
 * @param {HTMLElement} element
 * @param {Trace[]} traces
 * @param {Layout} [layout]
 * @param {string} [emptyText]
 */
export function draw(element, traces, layout = {}, emptyText = 'No figures yet') {
  const Plotly = plotly();
  if (!Plotly) {
    element.textContent = 'Charts need plotly.js, which the server could not serve: install plotly beside the server.';
    return;
  }
  const empty = !traces.some((trace) => trace.x?.length);
  const base = {
    margin: { l: 64, r: 12, t: 12, b: 48 },
    font: { family: 'system-ui, sans-serif', size: 12, color: '#1b1f24' },
    // Below everything, measured from the figure's bottom edge: placed at a fraction of the plot's height under it,
    // a legend of several rows grew upwards over the axis title and tick labels.
    legend: { orientation: 'h', x: 0, xanchor: 'left', yref: 'container', y: 0, yanchor: 'bottom' },
    hovermode: 'closest',
    annotations: empty
      ? [{ text: emptyText, showarrow: false, xref: 'paper', yref: 'paper', x: 0.5, y: 0.5, font: { size: 14 } }]
      : [],
  };
  // Empty axes would only frame the message (and a log axis with no data draws odd ticks).
  /** @param {Layout | undefined} given @returns {Layout} */
  const axis = (given) => ({ automargin: true, ...given, ...(empty ? { visible: false } : {}) });
  const equal = empty ? undefined : equalValue(traces.flatMap((trace) => [...(trace.y ?? [])]));
  const yaxis = axis(layout.yaxis);
  /** @type {Layout[]} */
  const notes = [...base.annotations, ...(layout.annotations ?? [])];
  if (equal !== undefined) {
    // Plotly would stretch the noise between them over the whole axis, with ticks like 0.118087529 … 0.118087533.
    if (!yaxis.range && yaxis.rangemode !== 'tozero') yaxis.range = minimumSpan([equal], { log: yaxis.type === 'log' });
    notes.push({ text: `The values are equal to ${EQUAL_DIGITS} significant digits: ${number(equal, EQUAL_DIGITS)}`, showarrow: false,
      xref: 'paper', yref: 'paper', x: 0.01, y: 0.99, xanchor: 'left', yanchor: 'top', font: { size: 12 } });
  }
  Plotly.react(element, traces, { ...base, ...layout, annotations: notes, xaxis: axis(layout.xaxis), yaxis }, CONFIG);
}

// Figures equal to this many significant digits are one figure to a reader: what differs beyond them is the noise
// of floating-point sums (the same validation loss from DDP and FSDP), not a result.
const EQUAL_DIGITS = 6;

/**
 * The value that two or more figures share to EQUAL_DIGITS significant digits, or undefined when they differ.
 * @param {unknown[]} values
 * @returns {number | undefined}
 */
export function equalValue(values) {
  const finite = /** @type {number[]} */ (values.filter((value) => Number.isFinite(value)));
  if (finite.length < 2) return undefined;
  const low = Math.min(...finite);
  const high = Math.max(...finite);
  return high - low <= Math.max(Math.abs(low), Math.abs(high)) * 10 ** -EQUAL_DIGITS ? (low + high) / 2 : undefined;
}

/**
 * The range of an axis that spans at least `relative` of its values' middle, or undefined when the values
 * already do: figures that differ only in noise (a weak-scaling time, a final loss) would otherwise fill the chart
 * from edge to edge and look like a trend. `log`: the axis is logarithmic, so the range is in decades.
 * @param {unknown[]} values
 * @param {{ relative?: number, log?: boolean }} [options]
 * @returns {number[] | undefined}
 */
export function minimumSpan(values, { relative = 0.2, log = false } = {}) {
  const finite = /** @type {number[]} */ (values.filter((value) => Number.isFinite(value) && (!log || Number(value) > 0)));
  if (!finite.length) return undefined;
  const low = Math.min(...finite);
  const high = Math.max(...finite);
  const middle = (low + high) / 2;
  const half = (Math.abs(middle) * relative) / 2;
  if (high - low >= 2 * half || half === 0) return undefined;
  const range = [Math.min(low, middle - half), Math.max(high, middle + half)];
  return log ? range.map((value) => Math.log10(Math.max(value, Number.MIN_VALUE))) : range;
}

/**
 * Buttons beside each chart's caption within `root`: <span class="downloads" data-chart="ID">.
 * @param {ParentNode} root
 * @param {string} filePrefix
 */
export function addDownloads(root, filePrefix) {
  for (const holder of root.querySelectorAll('.downloads[data-chart]')) {
    const id = /** @type {HTMLElement} */ (holder).dataset.chart ?? '';
    const caption = holder.closest('figcaption')?.firstElementChild?.textContent ?? id;
    for (const format of ['png', 'svg']) {
      const button = document.createElement('button');
      button.type = 'button';
      button.className = 'small secondary';
      button.textContent = format.toUpperCase();
      button.setAttribute('aria-label', `Download “${caption}” as ${format.toUpperCase()}`);
      button.addEventListener('click', () => {
        plotly()?.downloadImage(byId(root, id), {
          format, filename: `${filePrefix}-${id.replace(/^chart-/, '')}`, width: 1000, height: 600,
        });
      });
      holder.append(button);
    }
  }
}

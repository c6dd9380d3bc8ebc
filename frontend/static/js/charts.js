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
 * Text that plotly shows as it is. Plotly reads a subset of HTML (<a href>, <b>, <br>, <span style>) and entities
 * in trace names, hover texts, tick labels, axis titles and annotations: a series, metric or measure named
 * `<a href="...">` by a job would be drawn as a link. Every string from the server passes through here before
 * plotly sees it; plotly turns the entities back into the characters.
 * @param {string} text
 * @returns {string}
 */
export function plotText(text) {
  // No tag starts without "<"; a lone ">" (a flag's "repeats >= 3") stays as it is.
  return text.replace(/&/g, '&amp;').replace(/</g, '&lt;');
}

/**
 * A trace's data as plotly shows it: its name (the legend, the hover's <extra>) and its category values (the tick
 * labels) are always data, never markup, so they are made text here, once for every chart. Its `text` and
 * `hovertemplate` mix the charts' own markup (<br>, <extra>) with data: what a module puts in them from the
 * server is made text there, with plotText.
 * @param {Trace} trace
 * @returns {Trace}
 */
export function plainTrace(trace) {
  /** @param {unknown} value @returns {unknown} */
  const categories = (value) => (typeof value === 'string' ? plotText(value)
    : Array.isArray(value) ? value.map(categories) : value);
  return {
    ...trace,
    ...(typeof trace.name === 'string' ? { name: plotText(trace.name) } : {}),
    ...(trace.x ? { x: categories(trace.x) } : {}),
    ...(trace.y ? { y: categories(trace.y) } : {}),
  };
}

/**
 * An axis whose title is made text (see plotText): the titles name a chart's measure, from the server's words.
 * @param {Layout} axis
 * @returns {Layout}
 */
function plainAxis(axis) {
  const text = axis.title?.text;
  return typeof text === 'string' ? { ...axis, title: { ...axis.title, text: plotText(text) } } : axis;
}

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
  /** @type {Layout[]} */
  const plainNotes = notes.map((note) => (typeof note.text === 'string' ? { ...note, text: plotText(note.text) } : note));
  Plotly.react(element, traces.map(plainTrace),
    { ...base, ...layout, annotations: plainNotes, xaxis: plainAxis(axis(layout.xaxis)), yaxis: plainAxis(yaxis) }, CONFIG);
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

// @ts-check
// The flags of a comparison: why a figure may be wrong, shown once each above the charts with what they concern,
// and the look of a flagged point in the charts. The server decides what is flagged; this only shows it.

import { url } from '../api.js';
import { plotText } from '../charts.js';
import { byId, h, replaceChildren } from '../dom.js';

/** @typedef {import('../types/api.js').CompareRow} CompareRow */
/** @typedef {import('../types/api.js').Flag} Flag */
/** @typedef {import('../types/api.js').ScalingPublic} ScalingPublic */
/** @typedef {Flag['severity']} Severity */

// Flagged points stand out by shape as well as colour (colour alone fails the colour blind): an open symbol,
// outlined red for a warning.
export const FLAG_RED = '#B00020';
/** @type {Record<Severity, string>} */
export const FLAGGED = { warning: 'circle-open', info: 'diamond-open' };

/** @param {Flag} flag */
const key = (flag) => `${flag.code}\u0000${flag.message}`;

/**
 * The worst severity among `flags`, or null when there is none.
 * @param {Flag[] | null | undefined} flags
 * @returns {Severity | null}
 */
export function worst(flags) {
  if (!flags?.length) return null;
  return flags.some((flag) => flag.severity === 'warning') ? 'warning' : 'info';
}

/**
 * Distinct flags, warnings first, the order of the server otherwise.
 * @param {Flag[]} flags
 */
export function distinct(flags) {
  /** @type {Map<string, Flag>} */
  const seen = new Map();
  for (const flag of flags) if (!seen.has(key(flag))) seen.set(key(flag), flag);
  return [...seen.values()].sort((a, b) => (a.severity === 'warning' ? 0 : 1) - (b.severity === 'warning' ? 0 : 1));
}

/**
 * Marker arrays for points with these flags: symbol, colour and size, flagged points drawn apart.
 * @param {Flag[][]} pointFlags
 * @param {string} colour
 */
export function markers(pointFlags, colour) {
  const severity = pointFlags.map(worst);
  return {
    symbol: severity.map((s) => (s ? FLAGGED[s] : 'circle')),
    color: severity.map((s) => (s === 'warning' ? FLAG_RED : colour)),
    size: severity.map((s) => (s ? 13 : 8)),
    line: { width: severity.map((s) => (s ? 2.5 : 0)), color: severity.map((s) => (s === 'warning' ? FLAG_RED : colour)) },
  };
}

// The flag messages of a point for its hover text, which plotly reads as markup: the messages are made text.
/** @param {Flag[]} flags */
export function hoverFlags(flags) {
  if (!flags.length) return '';
  return distinct(flags).map((flag) => `<br>⚠ ${flag.severity}: ${plotText(flag.message)}`).join('');
}

// Every distinct flag of the comparison with what it concerns: the rows' flags (which runs), the scaling points' and
// the time-to-target points' (which series at which GPU count) and the selection's own list (flags no row or point
// carries).
/** @typedef {{ series: string, gpus: number, runs: string[] }} Concerned a point a flag concerns, and its runs */
/** @typedef {{ flag: Flag, points: Concerned[] }} Entry */

/**
 * @param {CompareRow[]} rows
 * @param {ScalingPublic} scaling
 * @returns {Entry[]}
 */
export function gather(rows, scaling) {
  /** @type {Map<string, { flag: Flag, points: Map<string, { series: string, gpus: number, runs: Set<string> }> }>} */
  const found = new Map();
  /** @param {Flag} flag @param {string} [series] @param {number} [gpus] @param {string} [run] */
  const add = (flag, series, gpus, run) => {
    const entry = found.get(key(flag)) ?? { flag, points: new Map() };
    found.set(key(flag), entry);
    if (series === undefined || gpus === undefined) return;
    const at = `${series}\u0000${gpus}`; // several repeats of a point carry the same flag: one entry, all runs
    const point = entry.points.get(at) ?? { series, gpus, runs: new Set() };
    entry.points.set(at, point);
    if (run) point.runs.add(run);
  };
  for (const row of rows) for (const flag of row.flags) add(flag, row.series, row.gpus, row.run_id);
  for (const series of scaling.series) {
    for (const point of series.points) for (const flag of point.flags) add(flag, series.series, point.gpus);
    // The points scored by time to target carry their own flags (target_not_reached, slower_convergence, ...).
    for (const point of series.time_to_target?.points ?? []) for (const flag of point.flags) add(flag, series.series, point.gpus);
  }
  for (const flag of scaling.flags) add(flag);
  return distinct([...found.values()].map((entry) => entry.flag)).map((flag) => {
    const entry = /** @type {NonNullable<ReturnType<typeof found.get>>} */ (found.get(key(flag)));
    const points = [...entry.points.values()].map((point) => ({ ...point, runs: [...point.runs] }))
      .sort((a, b) => a.series.localeCompare(b.series) || a.gpus - b.gpus);
    return { flag, points };
  });
}

/** @param {Entry} entry */
function concernsOf(entry) {
  if (!entry.points.length) return h('span', { class: 'concerns' }, 'Concerns the selection as a whole.');
  /** @type {(string | HTMLElement)[]} */
  const parts = ['Concerns '];
  entry.points.forEach((point, index) => {
    if (index) parts.push('; ');
    parts.push(`${point.series} at ${point.gpus} GPU${point.gpus === 1 ? '' : 's'}`);
    if (!point.runs.length) return;
    parts.push(point.runs.length === 1 ? ' (run ' : ' (runs ');
    point.runs.forEach((run, i) => parts.push(...(i ? [', '] : []), h('a', { href: url(`/runs/${run}`) }, run)));
    parts.push(')');
  });
  parts.push('.');
  return h('span', { class: 'concerns' }, parts);
}

/**
 * The list above the charts (in `section`, the page's #flags); says so when the figures raised no flag.
 * @param {HTMLElement} section
 * @param {CompareRow[]} rows
 * @param {ScalingPublic} scaling
 */
export function drawFlagList(section, rows, scaling) {
  const entries = gather(rows, scaling);
  const list = byId(section, 'flag-list');
  const summary = byId(section, 'flag-summary');
  const warnings = entries.filter((entry) => entry.flag.severity === 'warning').length;
  summary.textContent = entries.length
    ? `${entries.length} ${entries.length === 1 ? 'thing' : 'things'} to know before trusting these figures`
      + (warnings ? `, ${warnings} of which may make them wrong:` : ':')
    : rows.length ? 'The figures raised no flag.' : 'No figures yet.';
  section.dataset.flags = String(entries.length);
  replaceChildren(list, entries.map((entry) => h('li', { class: `flag ${entry.flag.severity}`, dataset: { code: entry.flag.code } },
    h('span', { class: `severity ${entry.flag.severity}` }, entry.flag.severity), ' ',
    h('span', { class: 'message' }, entry.flag.message), ' ', concernsOf(entry))));
}

/**
 * A row's marker in the table: its severity, with every message in its title (and read out by screen readers).
 * @param {Flag[]} flags
 */
export function rowMarker(flags) {
  const severity = worst(flags);
  if (!severity) return '';
  const messages = distinct(flags).map((flag) => `${flag.severity}: ${flag.message}`).join('\n');
  return h('span', { class: `flag-marker ${severity}`, title: messages, 'aria-label': messages, role: 'img' },
    severity === 'warning' ? '⚠' : 'ⓘ');
}

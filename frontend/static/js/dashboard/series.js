// @ts-check
// The dashboard's series: the compare answer's rows grouped by the series the server named, each with its colour
// and the scaling answer's analysis of it; and a series' rows by GPU count (the repeats of a point together), with
// the median over them of the figures the server gives per run only (the time breakdown, the accounting, a
// program's own metrics; the compared time's mean over repeats is the scaling answer's).

import { COLOURS } from '../charts.js';

/** @typedef {import('../types/api.js').CompareRow} CompareRow */
/** @typedef {import('../types/api.js').ScalingPublic} ScalingPublic */
/** @typedef {import('../types/api.js').ScalingSeries} ScalingSeries */

/**
 * A series as the charts draw it. `analysis`: the scaling answer's, or null for a series the scaling answer did not
 * have yet (a run added between the two requests of one poll): no points until the next.
 * @typedef {{ name: string, colour: string, rows: CompareRow[], analysis: ScalingSeries | null }} Series
 */

/**
 * Rows by series, in the order of the rows, each series' rows by GPU count.
 * @param {CompareRow[]} rows
 * @param {ScalingPublic} scaling
 * @returns {Series[]}
 */
export function groupSeries(rows, scaling) {
  /** @type {Map<string, CompareRow[]>} */
  const groups = new Map();
  for (const row of rows) {
    const members = groups.get(row.series) ?? [];
    members.push(row);
    groups.set(row.series, members);
  }
  return [...groups.entries()].map(([name, members], index) => ({
    name, colour: COLOURS[index % COLOURS.length], rows: members.sort((a, b) => a.gpus - b.gpus),
    analysis: scaling.series.find((analysis) => analysis.series === name) ?? null,
  }));
}

/**
 * Every GPU count of the series, in order.
 * @param {Series[]} series
 */
export function allGpus(series) {
  return [...new Set(series.flatMap((s) => s.rows.map((row) => row.gpus)))].sort((a, b) => a - b);
}

/**
 * A series' rows by GPU count, in order: the repeats of one point together.
 * @param {CompareRow[]} rows
 * @returns {Map<number, CompareRow[]>}
 */
export function rowsByGpus(rows) {
  /** @type {Map<number, CompareRow[]>} */
  const groups = new Map();
  for (const row of [...rows].sort((a, b) => a.gpus - b.gpus)) {
    const members = groups.get(row.gpus) ?? [];
    members.push(row);
    groups.set(row.gpus, members);
  }
  return groups;
}

/**
 * The median of the finite values, or null when there is none.
 * @param {(number | null | undefined)[]} values
 * @returns {number | null}
 */
export function median(values) {
  const sorted = /** @type {number[]} */ (values.filter((value) => value !== null && value !== undefined && Number.isFinite(value)))
    .sort((a, b) => a - b);
  if (!sorted.length) return null;
  const middle = Math.floor(sorted.length / 2);
  return sorted.length % 2 ? sorted[middle] : (sorted[middle - 1] + sorted[middle]) / 2;
}

// @ts-check
// The dashboard's series: the compare answer's rows grouped by the series the server named, each with its colour
// and the scaling answer's analysis of it; and a point's rows, by the runs the scaling answer names for it. Every
// figure of a point (the compared time over its repeats, and the medians of the figures given per run) is the
// scaling answer's: nothing here computes one.

import { COLOURS } from '../charts.js';

/** @typedef {import('../types/api.js').CompareRow} CompareRow */
/** @typedef {import('../types/api.js').ScalingPoint} ScalingPoint */
/** @typedef {import('../types/api.js').ScalingPublic} ScalingPublic */
/** @typedef {import('../types/api.js').ScalingSeries} ScalingSeries */
/** @typedef {import('../types/api.js').ModelSeries} ModelSeries */
/** @typedef {import('../types/api.js').PredictionPublic} PredictionPublic */

/**
 * A series as the charts draw it. `analysis`: the scaling answer's, or null for a series the scaling answer did not
 * have yet (a run added between the two requests of one poll): no points until the next. `model`: the step model's
 * prediction of the series (GET /api/prediction), or null where the answer has none for it.
 * @typedef {{ name: string, colour: string, rows: CompareRow[], analysis: ScalingSeries | null, model?: ModelSeries | null }} Series
 */

/**
 * Rows by series, in the order of the rows, each series' rows by GPU count (stable: a point's repeats in order).
 * @param {CompareRow[]} rows
 * @param {ScalingPublic} scaling
 * @param {PredictionPublic | null} [prediction]
 * @returns {Series[]}
 */
export function groupSeries(rows, scaling, prediction = null) {
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
    model: prediction?.series.find((model) => model.series === name) ?? null,
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
 * A point's rows: those of the series that the scaling answer names as the point's runs, in the rows' order.
 * @param {Series} series
 * @param {ScalingPoint} point
 * @returns {CompareRow[]}
 */
export function rowsOf(series, point) {
  const runs = new Set(point.run_ids);
  return series.rows.filter((row) => runs.has(row.run_id));
}

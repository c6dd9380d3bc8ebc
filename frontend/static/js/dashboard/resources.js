// @ts-check
// What the runs cost, from Slurm's accounting once they ended: device-hours per epoch and energy per sample against
// GPUs. Many clusters gather no energy (or no GPU figures): such a chart says so rather than drawing zeros.

import { draw } from '../charts.js';
import { byId } from '../dom.js';
import { number } from '../format.js';

/** @typedef {import('../types/api.js').CompareRow} CompareRow */
/** @typedef {import('../types/api.js').RunResources} RunResources */
/** @typedef {import('../charts.js').Layout} Layout */
/** @typedef {import('./series.js').Series} Series */
/** The accounting's figures, by the name of their field. @typedef {'elapsed_s' | 'cpu_efficiency' | 'max_rss_bytes' | 'gpu_utilization' | 'energy_j' | 'device_hours_per_epoch' | 'energy_per_sample_j'} Figure */
/** Those charted against GPUs, whose median over a point's runs the scaling answer gives. @typedef {'device_hours_per_epoch' | 'energy_per_sample_j'} Charted */

// A figure the row's cluster does not gather. The server names them in `not_gathered`; energy per sample needs the
// energy, so it is missing wherever the energy is.
/**
 * @param {RunResources | null} resources
 * @param {string} field
 */
export function notGathered(resources, field) {
  const names = resources?.not_gathered ?? [];
  /** @param {string} name */
  const bare = (name) => name.replace(/_(s|j|bytes)$/, '');
  /** @param {string} name */
  const missing = (name) => names.includes(name) || names.includes(bare(name));
  return missing(field) || (field === 'energy_per_sample_j' && missing('energy_j'));
}

/**
 * A figure the row's cluster gathers, but per epoch or per sample of a run that gave none to divide it by.
 * @param {RunResources | null} resources
 * @param {string} field
 */
export function nothingToDivide(resources, field) {
  return (resources?.nothing_to_divide ?? []).includes(field);
}

/**
 * Why a chart of `field` has nothing to draw: runs still going (accounting comes after), or the cluster.
 * @param {CompareRow[]} rows
 * @param {Figure} field
 */
export function emptyReason(rows, field) {
  const accounted = rows.flatMap((row) => (row.resources ? [row.resources] : []));
  if (!accounted.length) {
    if (!rows.length) return 'No figures yet';
    // Ended and read, yet no accounting: runs imported from logs, or a scheduler without one.
    return rows.every((row) => row.ingest_done) ? 'Slurm\u2019s accounting has no figures for these runs'
      : 'From Slurm\u2019s accounting, after the runs end';
  }
  if (accounted.every((resources) => notGathered(resources, field))) return 'not gathered on this cluster';
  // Gathered, but these runs gave nothing to divide it by (a program that printed no epoch or no samples/s).
  if (accounted.every((resources) => notGathered(resources, field) || nothingToDivide(resources, field))) {
    return 'gathered, but these runs printed no epochs (or samples) to divide it by: see their run time in the table';
  }
  if (accounted.every((resources) => notGathered(resources, field) || resources[field] === null)) return 'not gathered on this cluster';
  return 'No figures yet';
}

/**
 * A series' points: the scaling answer's median over each point's runs of the figure, where their clusters gather it.
 * @param {Series} s
 * @param {Charted} field
 * @param {string} unit
 */
export function trace(s, field, unit) {
  const points = (s.analysis?.points ?? [])
    .map((point) => ({ gpus: point.gpus, runs: point.run_ids, value: point.medians[field] }))
    .filter((point) => point.value !== null);
  return {
    name: s.name, legendgroup: s.name, mode: 'lines+markers', x: points.map((p) => p.gpus), y: points.map((p) => p.value),
    text: points.map((p) => `${number(p.value, 3)} ${unit} with ${p.gpus} GPUs (median of ${p.runs.length}: ${p.runs.join(', ')})`),
    hovertemplate: '%{text}<extra>%{fullData.name}</extra>', line: { color: s.colour }, marker: { size: 8 },
  };
}

/** @param {CompareRow[]} rows */
function deviceHoursTitle(rows) {
  const kinds = new Set(rows.flatMap((row) => (row.resources ? [row.resources.device_kind] : [])));
  if (kinds.size === 1) return kinds.has('gpu') ? 'GPU-hours per epoch' : 'CPU-hours per epoch';
  return 'device-hours per epoch (GPU-hours, or CPU-hours without GPUs)';
}

/**
 * The two charts, in `root` (the dashboard).
 * @param {ParentNode} root
 * @param {CompareRow[]} rows
 * @param {Series[]} series
 * @param {Layout} xaxis
 */
export function drawResources(root, rows, series, xaxis) {
  const hours = series.map((s) => trace(s, 'device_hours_per_epoch', 'h')).filter((t) => t.x.length);
  draw(byId(root, 'chart-device-hours'), hours, { xaxis, yaxis: { title: { text: deviceHoursTitle(rows) }, rangemode: 'tozero' } },
    emptyReason(rows, 'device_hours_per_epoch'));
  const energy = series.map((s) => trace(s, 'energy_per_sample_j', 'J')).filter((t) => t.x.length);
  draw(byId(root, 'chart-energy'), energy, { xaxis, yaxis: { title: { text: 'joules per sample' }, rangemode: 'tozero' } },
    emptyReason(rows, 'energy_per_sample_j'));
}

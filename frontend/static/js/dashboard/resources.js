// What the runs cost, from Slurm's accounting once they ended: device-hours per epoch and energy per sample against
// GPUs. Many clusters gather no energy (or no GPU figures): such a chart says so rather than drawing zeros.

import { draw } from '../charts.js';
import { number } from '../format.js';
import { median, rowsByGpus } from './scaling.js';

// A figure the row's cluster does not gather. The server names them in `not_gathered`; energy per sample needs the
// energy, so it is missing wherever the energy is.
export function notGathered(resources, field) {
  const names = resources?.not_gathered ?? [];
  const bare = (name) => name.replace(/_(s|j|bytes)$/, '');
  const missing = (name) => names.includes(name) || names.includes(bare(name));
  return missing(field) || (field === 'energy_per_sample_j' && missing('energy_j'));
}

// Why a chart of `field` has nothing to draw: runs still going (accounting comes after), or the cluster.
function emptyReason(rows, field) {
  const accounted = rows.filter((row) => row.resources);
  if (!accounted.length) {
    if (!rows.length) return 'No figures yet';
    // Ended and read, yet no accounting: runs imported from logs, or a scheduler without one.
    return rows.every((row) => row.ingest_done) ? 'Slurm\u2019s accounting has no figures for these runs'
      : 'From Slurm\u2019s accounting, after the runs end';
  }
  if (accounted.every((row) => notGathered(row.resources, field) || row.resources[field] === null)) return 'not gathered on this cluster';
  return 'No figures yet';
}

function trace(s, field, unit) {
  const points = [...rowsByGpus(s.rows).entries()]
    .map(([gpus, rows]) => ({ gpus, rows, value: median(rows.filter((row) => row.resources && !notGathered(row.resources, field))
      .map((row) => row.resources[field])) }))
    .filter((point) => point.value !== null);
  return {
    name: s.name, legendgroup: s.name, mode: 'lines+markers', x: points.map((p) => p.gpus), y: points.map((p) => p.value),
    text: points.map((p) => `${number(p.value, 3)} ${unit} with ${p.gpus} GPUs (median of ${p.rows.length}: ${p.rows.map((r) => r.run_id).join(', ')})`),
    hovertemplate: '%{text}<extra>%{fullData.name}</extra>', line: { color: s.colour }, marker: { size: 8 },
  };
}

function deviceHoursTitle(rows) {
  const kinds = new Set(rows.filter((row) => row.resources).map((row) => row.resources.device_kind));
  if (kinds.size === 1) return kinds.has('gpu') ? 'GPU-hours per epoch' : 'CPU-hours per epoch';
  return 'device-hours per epoch (GPU-hours, or CPU-hours without GPUs)';
}

export function drawResources(rows, series, xaxis) {
  const hours = series.map((s) => trace(s, 'device_hours_per_epoch', 'h')).filter((t) => t.x.length);
  draw('chart-device-hours', hours, { xaxis, yaxis: { title: { text: deviceHoursTitle(rows) }, rangemode: 'tozero' } },
    emptyReason(rows, 'device_hours_per_epoch'));
  const energy = series.map((s) => trace(s, 'energy_per_sample_j', 'J')).filter((t) => t.x.length);
  draw('chart-energy', energy, { xaxis, yaxis: { title: { text: 'joules per sample' }, rangemode: 'tozero' } },
    emptyReason(rows, 'energy_per_sample_j'));
}

// @ts-check
// Peak memory per GPU against GPUs: what each run held per device, by the measure its worker labelled (the server
// gives the words). On a GPU that is CUDA's allocator; on the CPU what the tensors held, so that a CPU study shows
// FSDP's saving as a GPU study would; older CPU runs only have the resident set, and say so on their points.

import { draw, plotText } from '../charts.js';
import { byId, optionalById } from '../dom.js';

/** @typedef {import('../charts.js').Layout} Layout */
/** @typedef {import('./series.js').Series} Series */

const MIB = 1024 * 1024;
const UNLABELLED = 'measure not recorded';

/** @param {Series} s */
function trace(s) {
  const rows = s.rows.flatMap((row) => (row.peak_memory_bytes === null ? [] : [{ ...row, peak_memory_bytes: row.peak_memory_bytes }]));
  return {
    name: s.name, legendgroup: s.name, mode: 'lines+markers',
    x: rows.map((row) => row.gpus), y: rows.map((row) => row.peak_memory_bytes / MIB),
    text: rows.map((row) => `run ${row.run_id}; ${plotText(row.memory_measure ?? UNLABELLED)}`),
    hovertemplate: '%{y:.4g} MiB with %{x} GPUs (%{text})<extra>%{fullData.name}</extra>',
    line: { color: s.colour }, marker: { size: 8 },
  };
}

// The measure in the axis title when every run used the same one; a warning in the hint when they differ, since
// a resident set and a tensor peak are not comparable.
/** @param {Series[]} series */
export function describe(series) {
  const measures = new Set(series.flatMap((s) => s.rows)
    .filter((row) => row.peak_memory_bytes !== null)
    .map((row) => row.memory_measure ?? UNLABELLED));
  const [only] = measures;
  if (measures.size <= 1) {
    const short = only ? only.split(':')[0] : 'peak memory';
    return { title: `${short} per GPU (MiB)`, hint: `The largest peak of any process of the run, in MiB. ${only ? `${only}.` : ''}` };
  }
  return {
    title: 'peak memory per GPU (MiB), by different measures',
    hint: `The largest peak of any process of the run, in MiB. The runs measured it differently (${[...measures].join('; ')}): `
      + 'compare points of one measure only (each point names its own).',
  };
}

/**
 * The chart, and its description, in `root` (the dashboard).
 * @param {ParentNode} root
 * @param {Series[]} series
 * @param {Layout} xaxis
 */
export function drawMemory(root, series, xaxis) {
  const { title, hint } = describe(series);
  const description = optionalById(root, 'desc-memory');
  if (description) description.textContent = hint.trim();
  draw(byId(root, 'chart-memory'), series.map(trace), { xaxis, yaxis: { title: { text: title }, rangemode: 'tozero' } });
}

// Peak memory per GPU against GPUs: what each run held per device, by the measure its worker labelled (the server
// gives the words). On a GPU that is CUDA's allocator; on the CPU what the tensors held, so that a CPU study shows
// FSDP's saving as a GPU study would; older CPU runs only have the resident set, and say so on their points.

import { draw } from '../charts.js';

const MIB = 1024 * 1024;
const UNLABELLED = 'measure not recorded';

function trace(s) {
  const rows = s.rows.filter((row) => row.peak_memory_bytes !== null && row.peak_memory_bytes !== undefined);
  return {
    name: s.name, legendgroup: s.name, mode: 'lines+markers',
    x: rows.map((row) => row.gpus), y: rows.map((row) => row.peak_memory_bytes / MIB),
    text: rows.map((row) => `run ${row.run_id}; ${row.memory_measure ?? UNLABELLED}`),
    hovertemplate: '%{y:.4g} MiB with %{x} GPUs (%{text})<extra>%{fullData.name}</extra>',
    line: { color: s.colour }, marker: { size: 8 },
  };
}

// The measure in the axis title when every run used the same one; a warning in the hint when they differ, since
// a resident set and a tensor peak are not comparable.
function describe(series) {
  const measures = new Set(series.flatMap((s) => s.rows)
    .filter((row) => row.peak_memory_bytes !== null && row.peak_memory_bytes !== undefined)
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

export function drawMemory(series, xaxis) {
  const { title, hint } = describe(series);
  const description = document.getElementById('desc-memory');
  if (description) description.textContent = hint.trim();
  draw('chart-memory', series.map(trace), { xaxis, yaxis: { title: { text: title }, rangemode: 'tozero' } });
}

// @ts-check
// The dashboard's figures as it draws them from the compare and scaling answers (frontend/static/js/dashboard/ and
// dashboard.js): series, points, modes, flags, the time breakdown, the accounting and the programs' own metrics.

import assert from 'node:assert/strict';
import { test } from 'node:test';

import { equalValue, minimumSpan, plainTrace, plotText } from '../../frontend/static/js/charts.js';
import { meanWithInterval, selectionQuery } from '../../frontend/static/js/dashboard.js';
import { bars } from '../../frontend/static/js/dashboard/breakdown.js';
import { byGpus, epochValue, metricLabel, namesIn, pointValue, rowValue } from '../../frontend/static/js/dashboard/custom.js';
import { distinct, gather, hoverFlags, markers, worst } from '../../frontend/static/js/dashboard/flags.js';
import { describe as describeMemory } from '../../frontend/static/js/dashboard/memory.js';
import { emptyReason, notGathered, trace } from '../../frontend/static/js/dashboard/resources.js';
import { describes, fabricWords, gpuAxis, measureWords, modelTrace, modeOf, modeWords, pointsOf } from '../../frontend/static/js/dashboard/scaling.js';
import { allGpus, groupSeries, rowsOf } from '../../frontend/static/js/dashboard/series.js';
import { mfuCell, utilizationText } from '../../frontend/static/js/dashboard/utilization.js';
import { countStates } from '../../frontend/static/js/dom.js';
import { compareRow, flag, modelPoint, pointMedians, scalingPoint, scalingSeries } from './fixtures.mjs';

/** @typedef {import('../../frontend/static/js/types/api.js').RunResources} RunResources */

/** @param {Partial<RunResources>} given @returns {RunResources} */
const resources = (given) => ({
  elapsed_s: 60, cpu_efficiency: 0.5, max_rss_bytes: 1024, gpu_utilization: null, energy_j: null,
  device_hours_per_epoch: 0.1, device_kind: 'gpu', energy_per_sample_j: null, shared_with: [], not_gathered: [], nothing_to_divide: [],
  ...given,
});

test('rows are grouped by the series the server named, in order, each with its analysis and colour', () => {
  const rows = [compareRow({ run_id: 'a', gpus: 2 }), compareRow({ run_id: 'b', series: 'fsdp' }), compareRow({ run_id: 'c', gpus: 1 })];
  const series = groupSeries(rows, { experiment_id: null, series: [scalingSeries({ series: 'ddp' })], flags: [] });
  assert.deepEqual(series.map((s) => [s.name, s.rows.map((row) => row.run_id), s.analysis?.series ?? null]),
    [['ddp', ['c', 'a'], 'ddp'], ['fsdp', ['b'], null]]);
  assert.notEqual(series[0].colour, series[1].colour);
  assert.deepEqual(allGpus(series), [1, 2]);
});

test('a point\'s rows are the series\' rows the scaling answer names as its runs, in the rows\' order', () => {
  const rows = [compareRow({ run_id: 'a', gpus: 2 }), compareRow({ run_id: 'b', gpus: 1 }), compareRow({ run_id: 'c', gpus: 2 })];
  const series = { name: 'ddp', colour: '#000', rows, analysis: null };
  assert.deepEqual(rowsOf(series, scalingPoint({ gpus: 2, run_ids: ['c', 'a', 'gone'] })).map((row) => row.run_id), ['a', 'c']);
  assert.deepEqual(rowsOf(series, scalingPoint({ run_ids: [] })), []);
});

test('a series\' points are the scaling answer\'s, with their runs and the runs\' own flags; none without one', () => {
  const shared = flag('shared_node', 'info');
  const noisy = flag('noisy');
  const rows = [compareRow({ run_id: 'a', gpus: 1 }), compareRow({ run_id: 'b', gpus: 2, flags: [shared] })];
  const analysis = scalingSeries({ points: [
    scalingPoint({ gpus: 1, run_ids: ['a'] }), scalingPoint({ gpus: 2, mean: 6, flags: [noisy], run_ids: ['b'] }),
  ] });
  const points = pointsOf({ name: 'ddp', colour: '#000', rows, analysis });
  assert.deepEqual(points.map((point) => [point.gpus, point.mean, point.runs, point.flags]), [[1, 10, ['a'], []], [2, 6, ['b'], [noisy, shared]]]);
  // A row whose time the server did not compare (no point_mean_s) makes no point here either: no median of its own.
  assert.deepEqual(pointsOf({ name: 'ddp', colour: '#000', rows, analysis: null }), []);
});

test('a series\' mode is the scaling answer\'s, else its rows\'', () => {
  const rows = [compareRow({ scaling: 'weak' })];
  assert.deepEqual(modeOf({ name: 'ddp', colour: '#000', rows, analysis: scalingSeries({ scaling: 'weak', measure: 'step_time_s', baseline_gpus: 2 }) }),
    { scaling: 'weak', measure: 'step_time_s', baseline: 2 });
  assert.deepEqual(modeOf({ name: 'ddp', colour: '#000', rows, analysis: null }), { scaling: 'weak', measure: 'step_time_s', baseline: null });
  const strong = { name: 'a', colour: '#000', rows: [compareRow({})], analysis: scalingSeries({}) };
  const weak = { name: 'b', colour: '#000', rows, analysis: scalingSeries({ scaling: 'weak' }) };
  assert.equal(modeWords([strong]), 'strong scaling: every run trains the same global batch of 64');
  assert.match(modeWords([weak]), /^weak scaling/);
  // What the runs train is said only as the server says it: a program that declares no batch is not said to keep it.
  const undeclared = { ...strong, analysis: scalingSeries({ batch: 'the program does not declare its batch' }) };
  assert.equal(modeWords([undeclared]), 'strong scaling: the program does not declare its batch');
  assert.equal(modeWords([strong, undeclared]), 'strong scaling');
  assert.equal(modeWords([strong, weak]), 'strong and weak scaling, per series');
  assert.equal(modeWords([]), '');
});

test('the GPU axis marks the counts measured and the powers of two up to the predictions', () => {
  assert.deepEqual(gpuAxis([2, 6]).tickvals, [2, 6]);
  assert.deepEqual(gpuAxis([2, 6], 16).tickvals, [2, 4, 6, 8, 16]);
});

test('a law is drawn only where the server says it describes the points', () => {
  const fits = {
    amdahl: { serial_fraction: 0.05, r2: 0.99, describes_points: true },
    usl: { sigma: 0.1, kappa: 0.001, r2: -1.6, peak_gpus: null, describes_points: false },
    refused: null, r2_bound: 0.9, summary: '',
  };
  assert.equal(describes(fits, 'amdahl'), true);
  assert.equal(describes(fits, 'usl'), false);
  assert.equal(describes(undefined, 'amdahl'), false);
});

test('flags: the worst severity, each once with warnings first, their hover text and their markers', () => {
  const info = flag('shared_node', 'info');
  const warning = flag('noisy', 'warning', 'a < b');
  assert.equal(worst([]), null);
  assert.equal(worst([info]), 'info');
  assert.equal(worst([info, warning]), 'warning');
  assert.deepEqual(distinct([info, warning, info]), [warning, info]);
  assert.equal(hoverFlags([warning]), '<br>⚠ warning: a &lt; b');
  assert.deepEqual(markers([[], [warning]], '#123').symbol, ['circle', 'circle-open']);
});

test('a flag is listed once with the points and runs it concerns, or as concerning the selection', () => {
  const straggler = flag('straggler');
  const superlinear = flag('superlinear');
  const overall = flag('incomplete', 'info');
  const rows = [compareRow({ run_id: 'a', gpus: 2, flags: [straggler] }), compareRow({ run_id: 'b', gpus: 2, flags: [straggler] })];
  const scaling = { experiment_id: null, series: [scalingSeries({ points: [scalingPoint({ gpus: 4, flags: [superlinear] })] })], flags: [overall] };
  assert.deepEqual(gather(rows, scaling), [
    { flag: straggler, points: [{ series: 'ddp', gpus: 2, runs: ['a', 'b'] }] },
    { flag: superlinear, points: [{ series: 'ddp', gpus: 4, runs: [] }] },
    { flag: overall, points: [] },
  ]);
});

test('a point\'s breakdown is the scaling answer\'s medians, with its stragglers; points without one are left out', () => {
  const straggling = compareRow({ run_id: 'b', gpus: 2, flags: [flag('straggler')] });
  const rows = [compareRow({ run_id: 'a', gpus: 2 }), straggling, compareRow({ run_id: 'c', gpus: 1 })];
  const analysis = scalingSeries({ points: [
    scalingPoint({ gpus: 1, run_ids: ['c'] }),
    scalingPoint({ gpus: 2, run_ids: ['a', 'b'], medians: pointMedians({ time_breakdown: { data: 2, compute: 4.5, optimizer: 1 }, time_breakdown_n: 2 }) }),
  ] });
  const [bar, ...rest] = bars([{ name: 'ddp', colour: '#000', rows, analysis }]);
  assert.deepEqual(rest, []);
  assert.deepEqual([bar.gpus, bar.n, bar.parts, bar.stragglers], [2, 2, { data: 2, compute: 4.5, optimizer: 1, comm: null }, [straggling]]);
  assert.deepEqual(bars([{ name: 'ddp', colour: '#000', rows, analysis: null }]), []);
});

test('a cost chart draws the scaling answer\'s median of each point that has one, naming the point\'s runs', () => {
  const analysis = scalingSeries({ points: [
    scalingPoint({ gpus: 1, run_ids: ['a', 'b'], medians: pointMedians({ device_hours_per_epoch: 0.25 }) }),
    scalingPoint({ gpus: 2, run_ids: ['c'] }),
  ] });
  const drawn = trace({ name: 'ddp', colour: '#000', rows: [], analysis }, 'device_hours_per_epoch', 'h');
  assert.deepEqual([drawn.x, drawn.y, drawn.text], [[1], [0.25], ['0.25 h with 1 GPUs (median of 2: a, b)']]);
  assert.deepEqual(trace({ name: 'ddp', colour: '#000', rows: [], analysis }, 'energy_per_sample_j', 'J').x, []);
});

test('a figure the cluster does not gather, and why a cost chart is empty', () => {
  assert.equal(notGathered(resources({ not_gathered: ['energy'] }), 'energy_j'), true);
  assert.equal(notGathered(resources({ not_gathered: ['energy_j'] }), 'energy_per_sample_j'), true);
  assert.equal(notGathered(resources({}), 'elapsed_s'), false);
  assert.equal(emptyReason([], 'energy_j'), 'No figures yet');
  assert.equal(emptyReason([compareRow({ ingest_done: false })], 'energy_j'), 'From Slurm’s accounting, after the runs end');
  assert.equal(emptyReason([compareRow({})], 'energy_j'), 'Slurm’s accounting has no figures for these runs');
  assert.equal(emptyReason([compareRow({ resources: resources({}) })], 'energy_j'), 'not gathered on this cluster');
});

test('a program\'s own metrics and the standard figures, by epoch and by run', () => {
  const point = { epoch: 1, train_loss: 0.5, val_loss: null, val_accuracy: null, epoch_time_s: 3, samples_per_s: null,
    step_time_s: null, step_time_fastest_s: null, step_time_slowest_s: null, time_breakdown: null, model_flops_per_sample: null,
    hardware_flops_per_sample: null, metrics: { grad_norm: 1.5 } };
  assert.equal(epochValue(point, 'grad_norm'), 1.5);
  assert.equal(epochValue(point, 'train_loss'), 0.5);
  assert.equal(epochValue(point, 'val_loss'), null);
  assert.equal(epochValue(point, 'missing'), null);
  assert.equal(rowValue(compareRow({ final_val_loss: 0.25 }), 'val_loss'), 0.25);
  assert.equal(rowValue(compareRow({ metrics: { grad_norm: 2 } }), 'grad_norm'), 2);
  assert.equal(metricLabel('val_accuracy'), 'validation accuracy');
  assert.equal(metricLabel('grad_norm'), 'grad_norm');
  assert.deepEqual(namesIn([point, { ...point, metrics: { alpha: 1 } }]), ['alpha', 'grad_norm']);
});

test('a figure against GPUs is the scaling answer\'s median of each point, with the runs that have it', () => {
  const medians = pointMedians({ final_val_loss: 0.3, metrics: { grad_norm: 1.5 } });
  assert.equal(pointValue(scalingPoint({ medians }), 'val_loss'), 0.3);
  assert.equal(pointValue(scalingPoint({ medians }), 'grad_norm'), 1.5);
  assert.equal(pointValue(scalingPoint({ medians }), 'train_loss'), null);
  assert.equal(pointValue(scalingPoint({ medians }), 'missing'), null);
  const rows = [compareRow({ run_id: 'a', metrics: { grad_norm: 1 } }), compareRow({ run_id: 'b', metrics: { grad_norm: 2 } }),
    compareRow({ run_id: 'c' }), compareRow({ run_id: 'd', gpus: 2, metrics: { grad_norm: 4 } })];
  const analysis = scalingSeries({ points: [
    scalingPoint({ gpus: 1, run_ids: ['a', 'b', 'c'], medians }),
    scalingPoint({ gpus: 2, run_ids: ['d'], medians: pointMedians({ metrics: { grad_norm: 4 } }) }),
    scalingPoint({ gpus: 4, run_ids: [] }),
  ] });
  const drawn = byGpus({ name: 'ddp', colour: '#000', rows, analysis }, 'grad_norm');
  assert.deepEqual([drawn.x, drawn.y, drawn.text], [[1, 2], [1.5, 4], ['1.5 with 1 GPUs (median of 2: a, b)', '4 with 2 GPUs (run d)']]);
});

test('the memory chart names its measure, or warns when the runs measured differently', () => {
  const one = { name: 'ddp', colour: '#000', rows: [compareRow({ memory_measure: 'cuda_allocated: the allocator' })], analysis: null };
  assert.equal(describeMemory([one]).title, 'cuda_allocated per GPU (MiB)');
  const other = { ...one, rows: [compareRow({ memory_measure: 'cpu_max_rss: the resident set' })] };
  assert.equal(describeMemory([one, other]).title, 'peak memory per GPU (MiB), by different measures');
});

test('the table\'s point mean with its interval, and the query of the page\'s selection', () => {
  assert.equal(meanWithInterval(compareRow({ point_mean_s: 12.3, point_ci_low_s: 11.9, point_ci_high_s: 12.7 })), '12.3 ± 0.4');
  assert.equal(meanWithInterval(compareRow({ point_mean_s: 12.3 })), '12.3');
  assert.equal(meanWithInterval(compareRow({ point_mean_s: null, mean_epoch_time_s: 9 })), '9');
  assert.equal(String(selectionQuery({ mode: 'experiment', experiments: ['e1'] })), 'experiment_id=e1');
  assert.equal(String(selectionQuery({ mode: 'selection', experiments: ['e1'], runs: ['a', 'b'] })), 'run_id=a&run_id=b');
});

test('the states counted for the heading, in order', () => {
  assert.deepEqual(countStates([{ state: 'running' }, { state: 'completed' }, { state: 'running' }]), [['completed', 1], ['running', 2]]);
});

test('charts: figures equal but for noise are one value, and an axis spans at least a fifth of its middle', () => {
  assert.equal(equalValue([0.118087529, 0.118087533]), 0.118087531);
  assert.equal(equalValue([1, 2]), undefined);
  assert.equal(equalValue([1]), undefined);
  assert.deepEqual(minimumSpan([10, 10.1])?.map((value) => Number(value.toFixed(3))), [9.045, 11.055]);
  assert.equal(minimumSpan([1, 10]), undefined);
  assert.deepEqual(minimumSpan([100], { log: true })?.map((value) => Number(value.toFixed(3))), [1.954, 2.041]);
});

test('charts: what the server names is drawn as text, never as plotly markup', () => {
  const link = '<a href="https://evil.example/">click</a> & more';
  assert.equal(plotText(link), '&lt;a href="https://evil.example/">click&lt;/a> &amp; more');
  assert.equal(plotText('repeats >= 3'), 'repeats >= 3');
  assert.equal(plotText('&lt;'), '&amp;lt;'); // an entity a job wrote is shown as written, not as "<"
  const trace = plainTrace({ name: link, x: [[link, 'ddp'], ['1 GPU', '2 GPUs']], y: [1, 2], text: ['<br>ours'], hovertemplate: '%{text}<extra></extra>' });
  assert.equal(trace.name, plotText(link));
  assert.deepEqual(trace.x, [[plotText(link), 'ddp'], ['1 GPU', '2 GPUs']]);
  assert.deepEqual(trace.y, [1, 2]);
  // The charts' own markup in text and templates stays: what they put there from the server is made text there.
  assert.deepEqual(trace.text, ['<br>ours']);
  assert.ok(!hoverFlags([flag('straggler', 'warning', link)]).includes('<a'));
});

test('the caption names what the series are measured by: one sentence for one measure, else per series', () => {
  const rows = [compareRow({ run_id: 'a' }), compareRow({ run_id: 'b', series: 'fsdp' })];
  const byRunTime = groupSeries(rows.slice(0, 1), { experiment_id: null, series: [scalingSeries({ measure: 'run_time_s' })], flags: [] });
  assert.match(measureWords(byRunTime), /^Measured by run time \(the wall time of each run.s launches, start-up included/);
  const mixed = groupSeries(rows, {
    experiment_id: null, flags: [],
    series: [scalingSeries({ measure: 'run_time_s' }), scalingSeries({ series: 'fsdp', measure: 'epoch_time_s' })],
  });
  assert.match(measureWords(mixed), /^Measured by: ddp, run time .*; fsdp, epoch time/);
  assert.equal(measureWords(groupSeries(rows, { experiment_id: null, series: [], flags: [] })), '');
});

test('a chart of a figure gathered but with nothing to divide by says so, not that the cluster does not gather it', () => {
  const silent = compareRow({ resources: resources({ device_hours_per_epoch: null, nothing_to_divide: ['device_hours_per_epoch'] }) });
  assert.match(emptyReason([silent], 'device_hours_per_epoch'), /^gathered, but these runs printed no epochs/);
  const ungathered = compareRow({ resources: resources({ energy_j: null, not_gathered: ['energy_j'] }) });
  assert.equal(emptyReason([ungathered], 'energy_per_sample_j'), 'not gathered on this cluster');
});

test('MFU is shown against the measured peak, marked where only the datasheet is known, and worded with both', () => {
  const measured = compareRow({
    model_flops_per_sample: 3e9, mfu: 0.123, mfu_datasheet: 0.05, peak_tflops_measured: 600, peak_tflops_datasheet: 989.4,
    peak_datasheet_source: 'H100 SXM, bf16: NVIDIA H100 Tensor Core GPU datasheet', hfu: 0.16,
  });
  assert.equal(mfuCell(measured), '12.3 %');
  const words = utilizationText(measured);
  assert.match(words, /MFU 12\.3 % of the peak its compute probe measured \(600 TFLOP\/s per device\)/);
  assert.match(words, /5 % of the datasheet's dense peak \(989 TFLOP\/s; H100 SXM, bf16/);
  assert.match(words, /HFU 16 % with the recomputation/);
  assert.equal(mfuCell(compareRow({ model_flops_per_sample: 1, mfu_datasheet: 0.5 })), '50 % (datasheet)');
  assert.equal(mfuCell(compareRow({})), '—');
  assert.match(utilizationText(compareRow({})), /^No MFU: the run reported no FLOPs per sample/);
});

test('the step model\'s curve is the prediction\'s points, leaving out those it could not predict', () => {
  const points = [
    modelPoint({ gpus: 1 }),
    modelPoint({ gpus: 2, speedup: 1.8, step_time_s: 0.06, comm_s: 0.01, residual: 0.7 }),
    modelPoint({ gpus: 4, step_time_s: null, speedup: null, unavailable: 'no inter-node fabric fit' }),
  ];
  const model = { series: 'ddp', strategy: 'ddp', scaling: /** @type {'strong'} */ ('strong'), reference_run_id: 'r1', basis: 'b', points };
  const series = { name: 'ddp', colour: '#123', rows: [], analysis: null, model };
  const trace = modelTrace(series, (p) => p.speedup);
  assert.ok(trace);
  assert.equal(trace.name, 'ddp: step model');
  assert.deepEqual([trace.x, trace.y], [[1, 2], [1, 1.8]]);
  assert.match(String(trace.text?.[1]), /communication 0\.01 s/);
  assert.match(String(trace.text?.[1]), /measured 70 % off/);
  assert.equal(modelTrace({ ...series, model: null }, (p) => p.speedup), null);
  assert.equal(fabricWords([{ tier: 'intra_node', alpha_s: 1e-4, beta_bytes_per_s: 2e9 }]), 'intra-node \u03b1 100 \u00b5s, \u03b2 2 GB/s');
});

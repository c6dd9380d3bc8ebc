// @ts-check
// Answers of the API as the front end's unit tests need them: whole rows with every field the server writes, each
// test naming only the fields it is about.

/** @typedef {import('../../frontend/static/js/types/api.js').CompareRow} CompareRow */
/** @typedef {import('../../frontend/static/js/types/api.js').Flag} Flag */
/** @typedef {import('../../frontend/static/js/types/api.js').PlanPoint} PlanPoint */
/** @typedef {import('../../frontend/static/js/types/api.js').PointMedians} PointMedians */
/** @typedef {import('../../frontend/static/js/types/api.js').ScalingPoint} ScalingPoint */
/** @typedef {import('../../frontend/static/js/types/api.js').ScalingSeries} ScalingSeries */
/** @typedef {import('../../frontend/static/js/types/api.js').TargetPoint} TargetPoint */
/** @typedef {import('../../frontend/static/js/types/api.js').TimeToTarget} TimeToTarget */

/**
 * @param {Partial<CompareRow>} given
 * @returns {CompareRow}
 */
export function compareRow(given) {
  return {
    run_id: 'r1', state: 'completed', strategy: 'ddp', gpus: 1, nodes: 1, global_batch_size: 64, epochs_done: 2,
    mean_epoch_time_s: 10, speedup: 1, efficiency: 1, final_train_loss: 0.5, final_val_loss: 0.6, final_val_accuracy: 0.8,
    samples_per_s: 100, peak_memory_bytes: 1024, experiment_id: 'e1', series: 'ddp', ingest_done: true, flags: [],
    scaling: 'strong', seed: 0, timed_epochs: 1, epoch_time_min_s: 10, epoch_time_max_s: 10, step_time_s: 0.1,
    point_mean_s: 10, point_ci_low_s: null, point_ci_high_s: null, point_n: 1, speedup_ci_low: null, speedup_ci_high: null,
    baseline_gpus: 1, time_breakdown: null, step_time_fastest_s: null, step_time_slowest_s: null, resources: null,
    metrics: {}, memory_kind: null, memory_measure: null, peak_rss_bytes: null, run_time_s: null, measure: 'epoch_time_s',
    target_reached: null, epochs_to_target: null, time_to_target_s: null, stopped_at_target: false, effective_speedup: null,
    statistical_efficiency: null, target: null, model_flops_per_sample: null, hardware_flops_per_sample: null,
    peak_tflops_measured: null, peak_tflops_datasheet: null, peak_datasheet_source: null, mfu: null, mfu_datasheet: null,
    hfu: null, hfu_datasheet: null, predicted_step_time_s: null, ...given,
  };
}

/**
 * @param {Partial<ScalingPoint>} given
 * @returns {ScalingPoint}
 */
export function scalingPoint(given) {
  return {
    gpus: 1, mean: 10, ci_low: null, ci_high: null, n: 1, speedup: 1, speedup_ci_low: null, speedup_ci_high: null,
    efficiency: 1, flags: [], run_ids: [], medians: pointMedians({}), ...given,
  };
}

/**
 * @param {Partial<PointMedians>} given
 * @returns {PointMedians}
 */
export function pointMedians(given) {
  return {
    time_breakdown: {}, time_breakdown_n: 0, device_hours_per_epoch: null, energy_per_sample_j: null, final_train_loss: null,
    final_val_loss: null, final_val_accuracy: null, mean_epoch_time_s: null, samples_per_s: null, metrics: {}, ...given,
  };
}

/**
 * @param {Partial<ScalingSeries>} given
 * @returns {ScalingSeries}
 */
export function scalingSeries(given) {
  return {
    series: 'ddp', strategy: 'ddp', scaling: 'strong', measure: 'epoch_time_s', baseline_gpus: 1, points: [],
    fits: { amdahl: null, usl: null, refused: null, r2_bound: 0.9, summary: '' }, predicted: [], recommendation: '',
    advice: 'given', batch: 'every run trains the same global batch of 64', time_to_target: null, ...given,
  };
}

/**
 * @param {Flag['code']} code
 * @param {Flag['severity']} [severity]
 * @param {string} [message]
 * @returns {Flag}
 */
export function flag(code, severity = 'warning', message = `${code} happened`) {
  return { code, severity, message };
}

/**
 * A point scored by time to target: one run that reached it in 2 epochs and 20 s, unless told otherwise.
 * @param {Partial<TargetPoint>} given
 * @returns {TargetPoint}
 */
export function targetPoint(given) {
  return {
    gpus: 1, global_batch_size: 64, runs: 1, reached: 1, not_reached: 0, unfinished: 0, scoring: 'mean', time_to_target_s: 20,
    ci_low_s: null, ci_high_s: null, n: 1, epochs_to_target: 2, epochs_ci_low: null, epochs_ci_high: null, effective_speedup: 1,
    effective_speedup_ci_low: null, effective_speedup_ci_high: null, throughput_speedup: 1, statistical_efficiency: 1, flags: [],
    run_ids: [], ...given,
  };
}

/**
 * A series' time-to-target answer: val_accuracy at least 0.9, baseline 1 GPU.
 * @param {Partial<TimeToTarget>} given
 * @returns {TimeToTarget}
 */
export function timeToTarget(given) {
  return {
    target: { metric: 'val_accuracy', at_least: 0.9, at_most: null }, measured_from: 'the start of the first epoch',
    baseline_gpus: 1, points: [], summary: '', ...given,
  };
}

/** @typedef {import('../../frontend/static/js/types/api.js').ModelPoint} ModelPoint */

/**
 * A point of the step model's answer: predicted, nothing measured yet, unless told otherwise.
 * @param {Partial<ModelPoint>} given
 * @returns {ModelPoint}
 */
export function modelPoint(given) {
  return {
    gpus: 1, nodes: 1, step_time_s: 0.1, epoch_time_s: 10, speedup: 1, efficiency: 1, compute_s: 0.1, comm_s: 0,
    bubble_s: 0, comm_total_s: 0, overlap_fraction: 0, unavailable: null, measured_step_time_s: null, residual: null,
    run_ids: [], ...given,
  };
}

/**
 * A point of a plan's answer: predicted, on one process, unless told otherwise.
 * @param {Partial<PlanPoint>} given
 * @returns {PlanPoint}
 */
export function planPoint(given) {
  return {
    strategy: 'ddp', gpus: 1, nodes: 1, spec: {}, repeats: 1, step_time_s: 0.1, epoch_time_s: 10, compute_s: 0.1,
    comm_s: 0, bubble_s: 0, speedup: 1, efficiency: 1, memory_per_gpu_bytes: 1024, gpu_hours: 0.01, unavailable: null,
    ...given,
  };
}

/** @typedef {import('../../frontend/static/js/types/api.js').FabricEntry} FabricEntry */
/** @typedef {import('../../frontend/static/js/types/api.js').ProbeRunFabric} ProbeRunFabric */

/**
 * One probed tier as GET /api/fabric lists it: within a node of a 2 x 2 gloo probe, no points, unless told otherwise.
 * @param {Partial<FabricEntry>} given
 * @returns {FabricEntry}
 */
export function fabricEntry(given) {
  return {
    shape: { profile: 'p', partition: 'q', nodes: 2, processes_per_node: 2, backend: 'gloo', tier: 'intra_node' },
    preflight: false, ranks: 2, points: [], alpha_s: 1e-5, beta_bytes_per_s: 1e9, fit_error: 0.05, run_id: 'r1',
    measured_at: '2026-11-29T03:00:00', degraded: null, ...given,
  };
}

/**
 * A run of a probe experiment as GET /api/experiments/{id}/fabric answers it: 2 x 2, submitted, nothing measured
 * yet, unless told otherwise.
 * @param {Partial<ProbeRunFabric>} given
 * @returns {ProbeRunFabric}
 */
export function probeRun(given) {
  return {
    run_id: 'r1', state: 'submitted', profile: 'p', partition: 'q', nodes: 2, processes_per_node: 2, backend: null,
    failure_kind: null, failure_detail: null, message: null, ingest_done: false, tiers: [], ...given,
  };
}

/** @typedef {import('../../frontend/static/js/types/api.js').InferenceRow} InferenceRow */

/**
 * An inference run's row as GET /api/experiments/{id}/inference answers it: single, compile off, finished figures,
 * unless told otherwise.
 * @param {Partial<InferenceRow>} given
 * @returns {InferenceRow}
 */
export function inferenceRow(given) {
  return {
    run_id: 'r1', state: 'completed', strategy: 'single', tp: 1, compile: false, precision: 'fp32', batch_size: 2,
    tokens_per_s: 120.5, request_tokens_per_s: 60.25, ttft_s: 0.0125, latency_p50_s: 0.008, latency_p95_s: 0.0123,
    load_time_s: 1.5, compile_time_s: null, peak_memory_bytes: 2 * 1024 * 1024, memory_per_rank: [2 * 1024 * 1024],
    memory_kind: 'rss', ingest_done: true, ...given,
  };
}

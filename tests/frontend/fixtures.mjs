// @ts-check
// Answers of the API as the front end's unit tests need them: whole rows with every field the server writes, each
// test naming only the fields it is about.

/** @typedef {import('../../frontend/static/js/types/api.js').CompareRow} CompareRow */
/** @typedef {import('../../frontend/static/js/types/api.js').Flag} Flag */
/** @typedef {import('../../frontend/static/js/types/api.js').PointMedians} PointMedians */
/** @typedef {import('../../frontend/static/js/types/api.js').ScalingPoint} ScalingPoint */
/** @typedef {import('../../frontend/static/js/types/api.js').ScalingSeries} ScalingSeries */

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
    metrics: {}, memory_kind: null, memory_measure: null, peak_rss_bytes: null,
    ...given,
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
    advice: 'given', batch: 'every run trains the same global batch of 64', ...given,
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

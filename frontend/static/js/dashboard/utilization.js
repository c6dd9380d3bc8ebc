// @ts-check
// A run's model FLOPs utilisation (MFU), as the comparison row carries it: the server computes every figure
// (server/services/utilization.py); this only words them, for the dashboard's column and the run page.

import { number, percent } from '../format.js';

/** @typedef {import('../types/api.js').CompareRow} CompareRow */

/**
 * The table cell's text: MFU against the measured peak, else against the datasheet's, marked so.
 * @param {CompareRow} row
 */
export function mfuCell(row) {
  if (row.mfu !== null && row.mfu !== undefined) return percent(row.mfu);
  if (row.mfu_datasheet !== null && row.mfu_datasheet !== undefined) return `${percent(row.mfu_datasheet)} (datasheet)`;
  return '—';
}

/**
 * Every utilisation figure of the row in words: each against which peak, where that peak comes from, HFU under
 * activation checkpointing; or why there is none.
 * @param {CompareRow} row
 */
export function utilizationText(row) {
  if (row.model_flops_per_sample === null || row.model_flops_per_sample === undefined) {
    return 'No MFU: the run reported no FLOPs per sample (a program may print model_flops_per_sample in its epoch records), or no throughput.';
  }
  const parts = [`${number(row.model_flops_per_sample)} FLOPs per training sample`];
  if (row.mfu !== null && row.mfu !== undefined) {
    parts.push(`MFU ${percent(row.mfu)} of the peak its compute probe measured (${number(row.peak_tflops_measured)} TFLOP/s per device)`);
  } else {
    parts.push('no measured peak (the run printed no compute probe)');
  }
  if (row.mfu_datasheet !== null && row.mfu_datasheet !== undefined) {
    parts.push(`${percent(row.mfu_datasheet)} of the datasheet's dense peak (${number(row.peak_tflops_datasheet)} TFLOP/s; ${row.peak_datasheet_source})`);
  } else {
    parts.push('no datasheet peak (a CPU, or a GPU the table does not know)');
  }
  if (row.hfu !== null && row.hfu !== undefined) {
    parts.push(`HFU ${percent(row.hfu)} with the recomputation of activation checkpointing`);
  }
  return `${parts.join('; ')}.`;
}

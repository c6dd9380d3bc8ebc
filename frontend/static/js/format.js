// @ts-check
// Numbers, sizes and durations as people read them.

/** @typedef {number | null | undefined} Figure a figure the server may not have */

/**
 * @param {Figure} value
 * @param {number} [digits] significant digits
 */
export function number(value, digits = 3) {
  if (value === null || value === undefined || Number.isNaN(value)) return '—';
  if (Number.isInteger(value)) return String(value);
  return Number(value.toPrecision(digits)).toString();
}

/** @param {Figure} value */
export function bytes(value) {
  if (value === null || value === undefined) return '—';
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let size = value;
  let unit = 0;
  while (size >= 1024 && unit < units.length - 1) {
    size /= 1024;
    unit += 1;
  }
  return `${number(size)} ${units[unit]}`;
}

/** @param {Figure} seconds */
export function duration(seconds) {
  if (seconds === null || seconds === undefined || Number.isNaN(seconds)) return '—';
  if (seconds < 60) return `${Math.max(0, Math.round(seconds))} s`;
  const minutes = Math.round(seconds / 60);
  if (minutes < 60) return `${minutes} min`;
  return `${Math.floor(minutes / 60)} h ${minutes % 60} min`;
}

// The API's times are UTC; those without a zone are read as UTC too.
/** @param {string} iso */
export function utcDate(iso) {
  return new Date(/[zZ]|[+-]\d\d:\d\d$/.test(iso) ? iso : `${iso}Z`);
}

/** @param {string | null | undefined} iso */
export function time(iso) {
  if (!iso) return '—';
  return utcDate(iso).toLocaleString();
}

// "epoch 1 of 2, about 12 s left": the same words on the runs page and the run page.
/**
 * @param {string} state
 * @param {number} epochsDone
 * @param {number | null | undefined} epochs none: a program's, which says no count
 * @param {Figure} meanEpochTimeS
 */
export function progress(state, epochsDone, epochs, meanEpochTimeS) {
  if (!epochs) return epochsDone ? `${epochsDone} ${epochsDone === 1 ? 'epoch' : 'epochs'} done` : ''; // a program's
  if (state !== 'running') return epochsDone ? `${epochsDone} of ${epochs} epochs` : '';
  const text = `epoch ${Math.min(epochsDone + 1, epochs)} of ${epochs}`;
  if (!epochsDone || !meanEpochTimeS) return text;
  return `${text}, about ${duration((epochs - epochsDone) * meanEpochTimeS)} left`;
}

// Like pages.reason_text: why a run waits, or what went wrong with it.
/**
 * @param {Pick<import('./types/api.js').RunPublic, 'state' | 'waiting' | 'scheduler_reason' | 'message' | 'waiting_for'>} run
 * @param {Set<string>} finalStates
 */
export function reason(run, finalStates) {
  const slurm = run.scheduler_reason && run.scheduler_reason !== 'None' ? `Slurm: ${run.scheduler_reason}` : '';
  // The server says why it holds the run (a limit the request set, or exclusive runs taking turns on shared nodes).
  if (run.waiting) return run.message || "waits for its turn among the experiment's runs";
  // The server words what Slurm calls "Dependency": the training run an inference run waits for.
  if (run.waiting_for) return run.waiting_for;
  if (run.state === 'submitted' || run.state === 'pending') return slurm;
  if (finalStates.has(run.state) && run.state !== 'completed') return run.message || slurm;
  return '';
}

// A share as a percentage: `fraction` 0.5 -> "50 %"; a figure already in percent passes `isPercent`.
/**
 * @param {Figure} value
 * @param {boolean} [isPercent]
 */
export function percent(value, isPercent = false) {
  if (value === null || value === undefined || Number.isNaN(value)) return '—';
  return `${number(isPercent ? value : value * 100, 3)} %`;
}

/**
 * Joules in the unit that keeps the number short.
 * @param {Figure} joules
 */
export function energy(joules) {
  if (joules === null || joules === undefined || Number.isNaN(joules)) return '—';
  /** @type {[number, string][]} */
  const units = [[1e9, 'GJ'], [1e6, 'MJ'], [1e3, 'kJ']];
  const [scale, unit] = units.find(([size]) => Math.abs(joules) >= size) ?? [1, 'J'];
  return `${number(joules / scale)} ${unit}`;
}

// @ts-check
// The run page's trust section: the run's flags (the comparison's, for this run alone) and what Slurm's accounting
// says it used. Accounting comes after the run ends, and some clusters gather no GPU or energy figures: each figure
// says which of these it is rather than showing a bare dash.

import { distinct } from '../dashboard/flags.js';
import { notGathered, nothingToDivide } from '../dashboard/resources.js';
import { byId, h, replaceChildren } from '../dom.js';
import { bytes, duration, energy, number, percent } from '../format.js';

/** @typedef {import('../types/api.js').Flag} Flag */
/** @typedef {import('../types/api.js').RunResources} RunResources */

/** @type {Record<string, (value: number | null) => string>} */
const SHOW = {
  elapsed_s: duration,
  cpu_efficiency: (value) => percent(value),
  max_rss_bytes: bytes,
  gpu_utilization: (value) => percent(value, true),
  energy_j: energy,
  device_hours_per_epoch: (value) => number(value),
};
// Flags about where the run ran (not about its figures' arithmetic): said beside the hardware, first.
const HARDWARE = new Set(['oversubscribed', 'cpus_beyond_allocation', 'shared_node']);

/**
 * The run's flags, in `section` (the page's #trust).
 * @param {HTMLElement} section
 * @param {Flag[]} flags
 */
export function showFlags(section, flags) {
  const shown = distinct(flags);
  byId(section, 'run-flag-summary').textContent = shown.length
    ? `${shown.length} ${shown.length === 1 ? 'reason' : 'reasons'} not to take its figures at face value:`
    : 'Its figures raised no flag.';
  replaceChildren(byId(section, 'run-flags'), shown.map((flag) => h('li', { class: `flag ${flag.severity}`, dataset: { code: flag.code } },
    h('span', { class: `severity ${flag.severity}` }, flag.severity), ' ', h('span', { class: 'message' }, flag.message))));
  const hardware = shown.filter((flag) => HARDWARE.has(flag.code));
  const paragraph = byId(section, 'run-hardware');
  paragraph.hidden = !hardware.length;
  paragraph.textContent = hardware.map((flag) => flag.message).join(' ');
}

/**
 * What the run used, in `section`. `ended`: the run has left the queue; until then accounting has nothing to say.
 * @param {HTMLElement} section
 * @param {RunResources | null} resources
 * @param {boolean} ended
 */
export function showResources(section, resources, ended) {
  for (const element of section.querySelectorAll('#run-resources dd[data-figure]')) {
    const figure = /** @type {HTMLElement} */ (element).dataset.figure ?? '';
    const value = resources ? Object.entries(resources).find(([name]) => name === figure)?.[1] : null;
    let text = SHOW[figure](typeof value === 'number' ? value : null);
    if (!resources) text = ended ? 'not read from the accounting yet' : 'after the run ends';
    else if (notGathered(resources, figure)) text = 'not gathered on this cluster';
    else if (nothingToDivide(resources, figure)) text = 'gathered, but the run printed nothing to divide it by (no epochs or samples)';
    else if (figure === 'device_hours_per_epoch' && resources[figure] !== null) text += ` ${resources.device_kind.toUpperCase()}-hours`;
    element.textContent = text;
    element.classList.toggle('not-gathered', Boolean(resources) && notGathered(resources, figure));
  }
  const shared = resources?.shared_with ?? [];
  const paragraph = byId(section, 'run-hardware');
  if (shared.length) {
    paragraph.hidden = false;
    paragraph.textContent = `${paragraph.textContent} Its nodes ran other jobs during it: ${shared.join(', ')}.`.trim();
  }
}

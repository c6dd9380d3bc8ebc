// The run page's trust section: the run's flags (the comparison's, for this run alone) and what Slurm's accounting
// says it used. Accounting comes after the run ends, and some clusters gather no GPU or energy figures: each figure
// says which of these it is rather than showing a bare dash.

import { distinct } from '../dashboard/flags.js';
import { notGathered } from '../dashboard/resources.js';
import { h, replaceChildren } from '../dom.js';
import { bytes, duration, energy, number, percent } from '../format.js';

const SHOW = {
  elapsed_s: duration,
  cpu_efficiency: (value) => percent(value),
  max_rss_bytes: bytes,
  gpu_utilization: (value) => percent(value, true),
  energy_j: energy,
  device_hours_per_epoch: (value) => number(value),
};
// Flags about where the run ran (not about its figures' arithmetic): said beside the hardware, first.
const HARDWARE = new Set(['oversubscribed', 'shared_node']);

export function showFlags(flags) {
  const shown = distinct(flags ?? []);
  document.getElementById('run-flag-summary').textContent = shown.length
    ? `${shown.length} ${shown.length === 1 ? 'reason' : 'reasons'} not to take its figures at face value:`
    : 'Its figures raised no flag.';
  replaceChildren(document.getElementById('run-flags'), shown.map((flag) => h('li', { class: `flag ${flag.severity}`, dataset: { code: flag.code } },
    h('span', { class: `severity ${flag.severity}` }, flag.severity), ' ', h('span', { class: 'message' }, flag.message))));
  const hardware = shown.filter((flag) => HARDWARE.has(flag.code));
  const paragraph = document.getElementById('run-hardware');
  paragraph.hidden = !hardware.length;
  paragraph.textContent = hardware.map((flag) => flag.message).join(' ');
}

// `ended`: the run has left the queue; until then accounting has nothing to say.
export function showResources(resources, ended) {
  for (const element of document.querySelectorAll('#run-resources dd[data-figure]')) {
    const figure = element.dataset.figure;
    let text = SHOW[figure](resources?.[figure] ?? null);
    if (!resources) text = ended ? 'not read from the accounting yet' : 'after the run ends';
    else if (notGathered(resources, figure)) text = 'not gathered on this cluster';
    else if (figure === 'device_hours_per_epoch' && resources[figure] !== null) text += ` ${resources.device_kind.toUpperCase()}-hours`;
    element.textContent = text;
    element.classList.toggle('not-gathered', Boolean(resources) && notGathered(resources, figure));
  }
  const shared = resources?.shared_with ?? [];
  const paragraph = document.getElementById('run-hardware');
  if (shared.length) {
    paragraph.hidden = false;
    paragraph.textContent = `${paragraph.textContent} Its nodes ran other jobs during it: ${shared.join(', ')}.`.trim();
  }
}

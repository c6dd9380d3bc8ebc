// @ts-check
// The run page's hang section: shown once the hang watchdog found the run stalled, with its verdict (which rank was
// not where the others were) and every rank's last stack dump, each collapsible. The dumps are the job's text:
// shown as text only, never parsed as markup.

import { byId, h, replaceChildren } from '../dom.js';

/** @typedef {import('../types/api.js').RunPublic} RunPublic */
/** @typedef {import('../types/api.js').RunStacks} RunStacks */

/**
 * Whether the run's page has a hang to show: it was found stalled, or it ended hung.
 * @param {RunPublic} run
 */
export function hasHang(run) {
  return Boolean(run.stalled_at) || run.failure_kind === 'hung';
}

/**
 * The verdict and the stacks, in `section` (the page's #hang).
 * @param {HTMLElement} section
 * @param {RunPublic} run
 * @param {RunStacks} stacks
 */
export function showHang(section, run, stacks) {
  section.hidden = false;
  const ended = run.failure_kind === 'hung' ? ' It was cancelled once its stacks were read (on_hang: cancel).' : '';
  byId(section, 'hang-verdict').textContent = stacks.verdict
    ? `${stacks.verdict}.${ended}`
    : 'It printed no record for longer than its bound: its ranks were asked for their stacks, which are read shortly.';
  replaceChildren(byId(section, 'hang-stacks'), stacks.ranks.map((rank) => h('details', { dataset: { rank: String(rank.rank) } },
    h('summary', {}, `rank ${rank.rank}${rank.text ? '' : ': wrote no stacks'}`),
    h('pre', { class: 'stacks' }, rank.text ?? ''))));
}

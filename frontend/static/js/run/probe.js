// @ts-check
// The run page's part for a fabric probe run: its own bus bandwidth curves per tier and their fits, drawn with the
// fabric page's charts and table (fabric.js), from GET /api/runs/{id}/fabric; the link to the fabric page filtered
// to its shape, and its backend once it has measured.

import { getJSON, url } from '../api.js';
import { byId, one } from '../dom.js';
import { drawFits, drawTiers, shapeQuery } from '../fabric.js';
import { measuredWords } from '../probe.js';

/** @typedef {import('../types/api.js').ProbeRunFabric} ProbeRunFabric */

/**
 * What the status line says of the probe's curves.
 * @param {ProbeRunFabric} row
 * @param {Set<string>} final
 */
export function probeStatus(row, final) {
  if (!final.has(row.state) || !row.ingest_done) return 'Not finished: its curves follow it.';
  return `Finished; tiers measured: ${measuredWords(row, final)}.`;
}

/**
 * Follows the probe run's curves in `root` (the page's <main>) until they are final.
 * @param {HTMLElement} root
 * @param {string} runId
 * @param {Set<string>} final
 * @returns {() => Promise<void>} reads and draws them once more, unless they are already final
 */
export function probeView(root, runId, final) {
  const charts = byId(root, 'charts');
  const fits = /** @type {HTMLTableSectionElement} */ (one(root, '#fabric-table tbody'));
  let done = false;
  return async () => {
    if (done) return;
    /** @type {ProbeRunFabric} */
    const row = await getJSON(`/api/runs/${encodeURIComponent(runId)}/fabric`);
    drawTiers(root, row.tiers);
    drawFits(fits, row.tiers);
    byId(root, 'run-fabric-link').setAttribute('href', url(`/fabric?${shapeQuery(row)}`));
    byId(root, 'run-backend').textContent = row.backend ?? 'not measured yet';
    byId(root, 'probe-status').textContent = probeStatus(row, final);
    // A run has its curves once it has ended and the monitor has read all its output (a cycle after it ends).
    done = final.has(row.state) && row.ingest_done;
    charts.dataset.ready = done ? 'final' : 'live';
  };
}

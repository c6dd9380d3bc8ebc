// @ts-check
// The fabric page: the stored probes' bus bandwidth against message size, one chart per tier (log axes), and each
// probed tier's fit in a table. The page mounts it on its <main>.

import { getJSON, url } from './api.js';
import { addDownloads, COLOURS, draw, plotText } from './charts.js';
import { byId, h, one, replaceChildren } from './dom.js';
import { bytes, number, time } from './format.js';

/** @typedef {import('./types/api.js').FabricEntry} FabricEntry */
/** @typedef {import('./types/api.js').FabricPublic} FabricPublic */
/** @typedef {import('./charts.js').Trace} Trace */

// The newest probes drawn per tier: more lines than this tell nothing apart.
const DRAWN_PER_TIER = 3;
const DASHES = ['solid', 'dash', 'dot'];
const COLLECTIVES = ['all_reduce', 'all_gather', 'reduce_scatter', 'broadcast', 'send_recv'];

/**
 * A probe's shape in words: "2 x 2, gloo (run abc)".
 * @param {FabricEntry} entry
 */
export function shapeName(entry) {
  const { shape } = entry;
  return `${shape.nodes} x ${shape.processes_per_node}, ${shape.backend}${entry.preflight ? ' pre-flight' : ''} (run ${entry.run_id})`;
}

/**
 * One trace per collective of each of the tier's newest probes (entries come newest first), its points by size.
 * @param {FabricEntry[]} entries
 * @param {string} tier
 * @returns {Trace[]}
 */
export function tierTraces(entries, tier) {
  const drawn = entries.filter((entry) => entry.shape.tier === tier && !entry.preflight).slice(0, DRAWN_PER_TIER);
  return drawn.flatMap((entry, probe) => COLLECTIVES.map((collective, index) => {
    const points = entry.points.filter((point) => point.collective === collective).sort((a, b) => a.nbytes - b.nbytes);
    return {
      name: `${collective}, ${shapeName(entry)}`, legendgroup: entry.run_id, mode: 'lines+markers',
      x: points.map((point) => point.nbytes), y: points.map((point) => point.busbw_bytes_per_s / 1e9),
      text: points.map((point) => plotText(bytes(point.nbytes))),
      hovertemplate: '%{y:.3g} GB/s at %{text}<extra>%{fullData.name}</extra>',
      line: { color: COLOURS[index], dash: DASHES[probe % DASHES.length] }, marker: { size: 6 },
    };
  })).filter((trace) => trace.x.length);
}

const SIZE_AXIS = { title: { text: 'message size (bytes, log scale)' }, type: 'log' };
const BANDWIDTH_AXIS = { title: { text: 'bus bandwidth (GB/s, log scale)' }, type: 'log' };

/**
 * @param {HTMLTableSectionElement} body
 * @param {FabricEntry[]} entries
 */
function drawTable(body, entries) {
  replaceChildren(body, entries.map((entry) => h('tr', { dataset: { tier: entry.shape.tier } },
    h('td', {}, entry.shape.tier), h('td', {}, entry.shape.profile || '—'), h('td', {}, entry.shape.partition || '—'),
    h('td', { class: 'num' }, String(entry.shape.nodes)), h('td', { class: 'num' }, String(entry.shape.processes_per_node)),
    h('td', {}, entry.shape.backend), h('td', {}, entry.preflight ? 'pre-flight' : 'probe'),
    h('td', { class: 'num' }, number(entry.alpha_s * 1e6)), h('td', { class: 'num' }, number(entry.beta_bytes_per_s / 1e9)),
    h('td', {}, h('a', { href: url(`/runs/${encodeURIComponent(entry.run_id)}`) }, entry.run_id)),
    h('td', {}, time(entry.measured_at)), h('td', {}, entry.degraded ?? ''))));
}

/**
 * Draws the stored probes in `root` (the page's <main>).
 * @param {HTMLElement} root
 */
export async function mount(root) {
  const status = byId(root, 'fabric-status');
  addDownloads(root, 'scalelab-fabric');
  try {
    /** @type {FabricPublic} */
    const answer = await getJSON('/api/fabric');
    for (const tier of ['intra_node', 'inter_node']) {
      draw(byId(root, `chart-${tier}`), tierTraces(answer.data, tier), { xaxis: SIZE_AXIS, yaxis: BANDWIDTH_AXIS },
        'No probe has measured this tier yet');
    }
    drawTable(one(root, '#fabric-table tbody'), answer.data);
    status.textContent = answer.count
      ? `${answer.count} probed tiers, newest first.`
      : 'No probe yet: submit an experiment of kind probe.';
    byId(root, 'charts').dataset.ready = 'final';
  } catch (error) {
    status.textContent = `The probes cannot be read: ${/** @type {Error} */ (error).message}`;
  }
}

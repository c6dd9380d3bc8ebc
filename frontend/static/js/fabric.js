// @ts-check
// The fabric page: the stored probes' bus bandwidth against message size, one chart per tier (log axes), and each
// probed tier's fit in a table; all probes, or those of one shape named in the page's address (a probe experiment's
// page links so). The page mounts it on its <main>; a probe experiment's page (probe.js) draws its runs with the
// same charts and table.

import { getJSON, url } from './api.js';
import { addDownloads, COLOURS, draw, plotText } from './charts.js';
import { byId, h, one, replaceChildren } from './dom.js';
import { bytes, number, percent, time } from './format.js';

/** @typedef {import('./types/api.js').FabricEntry} FabricEntry */
/** @typedef {import('./types/api.js').FabricPublic} FabricPublic */
/** @typedef {import('./charts.js').Trace} Trace */

// The newest probes drawn per tier: more lines than this tell nothing apart.
const DRAWN_PER_TIER = 3;
const DASHES = ['solid', 'dash', 'dot', 'longdash', 'dashdot'];
export const COLLECTIVES = ['all_reduce', 'all_gather', 'reduce_scatter', 'broadcast', 'send_recv'];
export const TIERS = ['intra_node', 'inter_node'];
// The latency-bandwidth model is expected to miss by about this much (contract/fabric.py: GenModel's figure): a fit
// further off its own points than this is marked, as predictions read from it carry that error.
export const MODEL_MISS = 0.2;
// What the page's address may filter by: GET /api/fabric's filters of a probe's shape.
const FILTERS = ['profile', 'partition', 'nodes', 'processes_per_node', 'backend'];

/**
 * The fabric page's query for the probes of one shape: its profile, partition, node count, processes per node and,
 * once known, backend (what is empty is left out, so it filters nothing).
 * @param {{ profile: string, partition: string, nodes: number, processes_per_node: number, backend: string | null }} shape
 */
export function shapeQuery(shape) {
  const query = new URLSearchParams();
  for (const name of FILTERS) {
    const value = shape[/** @type {keyof typeof shape} */ (name)];
    if (value !== null && value !== '') query.set(name, String(value));
  }
  return query;
}

/**
 * The filters an address names (`?nodes=2&processes_per_node=2`), as GET /api/fabric takes them; others are left out.
 * @param {string} search
 */
export function filtersOf(search) {
  const given = new URLSearchParams(search);
  return new URLSearchParams(FILTERS.flatMap((name) => {
    const value = given.get(name);
    return value ? [[name, value]] : [];
  }));
}

/**
 * The filters in words: "profile twonode, partition debug, 2 nodes x 2 per node, gloo".
 * @param {URLSearchParams} filters
 */
export function filterWords(filters) {
  const nodes = filters.get('nodes');
  const perNode = filters.get('processes_per_node');
  return [
    filters.has('profile') && `profile ${filters.get('profile')}`,
    filters.has('partition') && `partition ${filters.get('partition')}`,
    (nodes || perNode) && `${nodes ?? 'any'} node(s) x ${perNode ?? 'any'} per node`,
    filters.get('backend'),
  ].filter(Boolean).join(', ');
}

/**
 * A probe's shape in words: "2 x 2, gloo (run abc)".
 * @param {FabricEntry} entry
 */
export function shapeName(entry) {
  const { shape } = entry;
  return `${shape.nodes} x ${shape.processes_per_node}, ${shape.backend}${entry.preflight ? ' pre-flight' : ''} (run ${entry.run_id})`;
}

/**
 * One trace per collective of each of the tier's first `most` probes (entries come newest first), its points by size.
 * @param {FabricEntry[]} entries
 * @param {string} tier
 * @param {number} [most]
 * @returns {Trace[]}
 */
export function tierTraces(entries, tier, most = DRAWN_PER_TIER) {
  const drawn = entries.filter((entry) => entry.shape.tier === tier && !entry.preflight).slice(0, most);
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
 * Each tier's chart in `root` (#chart-intra_node, #chart-inter_node): a line per collective of the tier's first
 * `most` probes.
 * @param {ParentNode} root
 * @param {FabricEntry[]} entries
 * @param {number} [most]
 */
export function drawTiers(root, entries, most = DRAWN_PER_TIER) {
  for (const tier of TIERS) {
    draw(byId(root, `chart-${tier}`), tierTraces(entries, tier, most), { xaxis: SIZE_AXIS, yaxis: BANDWIDTH_AXIS },
      'No probe has measured this tier yet');
  }
}

/**
 * The fits table's rows (the page's #fabric-table, from _fabric.html): one per probed tier.
 * @param {HTMLTableSectionElement} body
 * @param {FabricEntry[]} entries
 */
export function drawFits(body, entries) {
  replaceChildren(body, entries.map((entry) => h('tr', { dataset: { tier: entry.shape.tier } },
    h('td', {}, entry.shape.tier), h('td', {}, entry.shape.profile || '—'), h('td', {}, entry.shape.partition || '—'),
    h('td', { class: 'num' }, String(entry.shape.nodes)), h('td', { class: 'num' }, String(entry.shape.processes_per_node)),
    h('td', {}, entry.shape.backend), h('td', {}, entry.preflight ? 'pre-flight' : 'probe'),
    h('td', { class: 'num' }, number(entry.alpha_s * 1e6)), h('td', { class: 'num' }, number(entry.beta_bytes_per_s / 1e9)),
    fitErrorCell(entry.fit_error),
    h('td', {}, h('a', { href: url(`/runs/${encodeURIComponent(entry.run_id)}`) }, entry.run_id)),
    h('td', {}, time(entry.measured_at)), h('td', { class: 'degraded' }, degradedText(entry)))));
}

/**
 * The fit's error in words, marked poor beyond what the model is expected to miss by.
 * @param {number} error
 */
export function fitErrorWords(error) {
  return `${percent(error)}${error > MODEL_MISS ? ' (poor)' : ''}`;
}

/** @param {number} error */
function fitErrorCell(error) {
  const poor = error > MODEL_MISS;
  return h('td', {
    class: `num fit-error${poor ? ' warning' : ''}`,
    title: poor ? `beyond the ${percent(MODEL_MISS)} the latency-bandwidth model is expected to miss by: predictions read from this fit carry this error` : null,
  }, fitErrorWords(error));
}

/**
 * The fabric_degraded verdict of a tier: its sentence where raised. Only a pre-flight is judged, against the probe
 * runs of its shape (or its profile's reference): a probe run is what it is judged against.
 * @param {FabricEntry} entry
 */
export function degradedText(entry) {
  if (entry.degraded) return entry.degraded;
  return entry.preflight ? 'no' : 'not judged (a probe run)';
}

/**
 * Draws the stored probes in `root` (the page's <main>).
 * @param {HTMLElement} root
 */
export async function mount(root) {
  const status = byId(root, 'fabric-status');
  const filters = filtersOf(window.location.search);
  addDownloads(root, 'scalelab-fabric');
  if (filters.size) {
    const notice = byId(root, 'fabric-filter');
    replaceChildren(notice, `Only the probes of ${filterWords(filters)}. `, h('a', { href: url('/fabric') }, 'Every probe'));
    notice.hidden = false;
  }
  try {
    /** @type {FabricPublic} */
    const answer = await getJSON(filters.size ? `/api/fabric?${filters}` : '/api/fabric');
    drawTiers(root, answer.data);
    drawFits(one(root, '#fabric-table tbody'), answer.data);
    status.textContent = answer.count
      ? `${answer.count} probed tiers, newest first.`
      : `No probe yet${filters.size ? ' of this shape' : ''}: submit an experiment of kind probe.`;
    byId(root, 'charts').dataset.ready = 'final';
  } catch (error) {
    status.textContent = `The probes cannot be read: ${/** @type {Error} */ (error).message}`;
  }
}

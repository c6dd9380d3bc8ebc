// @ts-check
// The account page's notification settings: PUT /api/notifications/settings (a refusal shown beside its field),
// POST /api/notifications/test, and the latest deliveries (GET /api/notifications/deliveries) with their attempts.

import { getJSON, postJSON, putJSON } from './api.js';
import { byId, h, one, replaceChildren } from './dom.js';

/** @typedef {import('./types/api.js').NotificationDeliveriesPublic} Deliveries */
/** @typedef {import('./types/api.js').NotificationDeliveryPublic} Delivery */

/**
 * What the server refused, each problem with its field's name first.
 * @param {unknown} detail
 * @param {number} status
 */
export function refusal(detail, status) {
  if (!Array.isArray(detail)) return String(detail ?? status);
  return detail.map((item) => `${String(item.loc?.at(-1) ?? '')}: ${item.msg}`).join('; ');
}

/**
 * The form's settings as the API takes them: an empty field is no channel.
 * @param {HTMLFormElement} form
 */
export function settingsOf(form) {
  const data = new FormData(form);
  const text = (/** @type {string} */ name) => String(data.get(name) ?? '').trim() || null;
  return { events: data.getAll('events').map(String), email: text('email'), webhook_url: text('webhook_url') };
}

/** @param {Delivery} row */
export function deliveryRow(row) {
  return h(
    'tr',
    {},
    h('td', {}, new Date(row.created_at).toLocaleString()),
    h('td', {}, row.event),
    h('td', {}, `${row.channel} to ${row.target}`),
    h('td', {}, row.state),
    h('td', {}, String(row.attempts)),
    h('td', {}, row.last_error ?? ''),
  );
}

/** @param {HTMLElement} section */
export function mount(section) {
  const form = /** @type {HTMLFormElement} */ (one(section, '#notify-form'));
  const status = byId(section, 'notify-status');
  const test = /** @type {HTMLButtonElement} */ (byId(section, 'notify-test'));
  const body = byId(section, 'deliveries-body');
  const refresh = async () => {
    /** @type {Deliveries} */
    const listed = await getJSON('/api/notifications/deliveries?limit=20');
    replaceChildren(body, ...listed.data.map(deliveryRow));
  };
  /** @param {() => Promise<import('./api.js').Answer>} send @param {string} done */
  const act = async (send, done) => {
    status.textContent = 'Sending…';
    try {
      const answer = await send();
      status.textContent = answer.ok ? done : refusal(answer.body?.detail, answer.status);
      await refresh();
    } catch (error) {
      status.textContent = `The server cannot be reached: ${/** @type {Error} */ (error).message}`;
    }
  };
  form.addEventListener('submit', (event) => {
    event.preventDefault();
    act(() => putJSON('/api/notifications/settings', settingsOf(form)), 'Saved.');
  });
  test.addEventListener('click', () => act(() => postJSON('/api/notifications/test'), 'A test notification is queued.'));
  /** @type {HTMLButtonElement} */ (one(form, 'button[type=submit]')).disabled = false;
  test.disabled = false;
  refresh().catch((error) => {
    status.textContent = `The deliveries cannot be read: ${/** @type {Error} */ (error).message}`;
  });
}

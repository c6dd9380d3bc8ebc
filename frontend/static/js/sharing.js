// @ts-check
// The experiment page's sharing form: PUT /api/experiments/{id}/sharing, then the page again to show the change.
// The page mounts it on the form, which it shows only to whoever may change the sharing.

import { putJSON } from './api.js';
import { byId, one } from './dom.js';

/**
 * The text of a 422's list of what was refused, or of any other detail.
 * @param {unknown} detail
 * @param {number} status
 */
export function refusal(detail, status) {
  return Array.isArray(detail) ? detail.map((item) => item.msg).join('; ') : String(detail ?? status);
}

/** @param {HTMLFormElement} form */
export function mount(form) {
  const status = byId(form, 'sharing-status');
  /** @type {HTMLButtonElement} */ (one(form, 'button[type=submit]')).disabled = false;
  form.addEventListener('submit', async (event) => {
    event.preventDefault();
    const chosen = /** @type {HTMLSelectElement} */ (form.elements.namedItem('with')).value;
    const group = /** @type {HTMLInputElement} */ (form.elements.namedItem('group')).value.trim();
    const body = chosen === 'group' ? { with: chosen, group } : { with: chosen };
    status.textContent = 'Saving…';
    try {
      const answer = await putJSON(`/api/experiments/${encodeURIComponent(form.dataset.experiment ?? '')}/sharing`, body);
      if (answer.ok) {
        window.location.reload();
        return;
      }
      status.textContent = refusal(answer.body?.detail, answer.status);
    } catch (error) {
      status.textContent = `The server cannot be reached: ${/** @type {Error} */ (error).message}`;
    }
  });
}

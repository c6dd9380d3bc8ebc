// @ts-check
// The experiment page's "Rerun the failed" form: POST /api/experiments/{id}/rerun with the failure kinds ticked and
// the spec changes typed, then what the server made of it. The page mounts it on the form, which it shows only to
// whoever may change the experiment, while some of its runs failed and have no rerun yet.

import { postJSON } from './api.js';
import { byId, one } from './dom.js';
import { refusal } from './sharing.js';

/**
 * The spec changes typed as `FIELD=VALUE, FIELD=VALUE` (or one a line), each VALUE read as JSON where it reads as
 * JSON (32, true, null), else as text (bf16), as the command line's `--set` reads them. Throws on an item that is
 * not FIELD=VALUE, naming it.
 * @param {string} text
 * @returns {Record<string, unknown>}
 */
export function changes(text) {
  /** @type {Record<string, unknown>} */
  const set = {};
  // A comma starts a new item only before FIELD=: a JSON list's commas stay in its value.
  for (const item of text.split(/\n|,\s*(?=[a-z_]+\s*=)/)) {
    if (!item.trim()) continue;
    const match = /^\s*([a-z_]{1,64})\s*=(.*)$/.exec(item);
    if (!match) throw new Error(`"${item.trim()}": give FIELD=VALUE, e.g. activation_checkpointing=true`);
    const value = match[2].trim();
    try {
      set[match[1]] = JSON.parse(value);
    } catch {
      set[match[1]] = value;
    }
  }
  return set;
}

/**
 * What the answer says: the new runs and the runs they repeat.
 * @param {{ data: { id: string, rerun_of: string | null }[] }} body
 */
export function rerunText(body) {
  const runs = body.data.map((run) => `${run.id} (a rerun of ${run.rerun_of})`);
  return `${runs.length} ${runs.length === 1 ? 'run' : 'runs'} submitted: ${runs.join(', ')}.`;
}

/** @param {HTMLFormElement} form */
export function mount(form) {
  const status = byId(form, 'rerun-status');
  const button = /** @type {HTMLButtonElement} */ (one(form, 'button[type=submit]'));
  button.disabled = false;
  form.addEventListener('submit', async (event) => {
    event.preventDefault();
    const kinds = [...form.querySelectorAll('input[name=kind]:checked')].map(
      (input) => /** @type {HTMLInputElement} */ (input).value,
    );
    /** @type {Record<string, unknown>} */
    let set;
    try {
      set = changes(/** @type {HTMLInputElement} */ (form.elements.namedItem('set')).value);
    } catch (error) {
      status.textContent = /** @type {Error} */ (error).message;
      return;
    }
    status.textContent = 'Submitting…';
    button.disabled = true;
    try {
      const path = `/api/experiments/${encodeURIComponent(form.dataset.experiment ?? '')}/rerun`;
      const answer = await postJSON(path, { failed: true, kinds, set });
      status.textContent = answer.ok ? rerunText(answer.body) : refusal(answer.body?.detail, answer.status);
    } catch (error) {
      status.textContent = `The server cannot be reached: ${/** @type {Error} */ (error).message}`;
    } finally {
      button.disabled = false;
    }
  });
}

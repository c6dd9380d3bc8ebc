// The experiment page's sharing form: PUT /api/experiments/{id}/sharing, then the page again to show the change.
import { putJSON } from './api.js';

const form = document.getElementById('sharing-form');
if (form) {
  const status = document.getElementById('sharing-status');
  form.querySelector('button[type=submit]').disabled = false;
  form.addEventListener('submit', async (event) => {
    event.preventDefault();
    const chosen = form.elements.with.value;
    const group = form.elements.group.value.trim();
    const body = chosen === 'group' ? { with: chosen, group } : { with: chosen };
    status.textContent = 'Saving…';
    try {
      const answer = await putJSON(`/api/experiments/${encodeURIComponent(form.dataset.experiment)}/sharing`, body);
      if (answer.ok) {
        window.location.reload();
        return;
      }
      const detail = answer.body?.detail;
      status.textContent = Array.isArray(detail) ? detail.map((item) => item.msg).join('; ') : String(detail ?? answer.status);
    } catch (error) {
      status.textContent = `The server cannot be reached: ${error.message}`;
    }
  });
}

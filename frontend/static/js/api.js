// The one way pages talk to the server: the JSON API, with the headers every request needs.

const root = document.querySelector('meta[name="scalelab-root"]')?.content ?? '';

export function url(path) {
  return root + path;
}

function headers(withBody) {
  const result = { Accept: 'application/json' };
  if (withBody) result['Content-Type'] = 'application/json';
  // Pages that carry a CSRF token hand it to every request from here.
  const csrf = document.querySelector('meta[name="csrf-token"]')?.content;
  if (csrf) result['X-CSRF-Token'] = csrf;
  return result;
}

export class ApiError extends Error {
  constructor(status, body) {
    const detail = body?.detail;
    super(typeof detail === 'string' ? detail : `the server answered ${status}`);
    this.status = status;
    this.body = body;
  }
}

async function parse(response) {
  const text = await response.text();
  try {
    return text ? JSON.parse(text) : null;
  } catch {
    return { detail: text };
  }
}

export async function getJSON(path) {
  const response = await fetch(url(path), { headers: headers(false) });
  const body = await parse(response);
  if (!response.ok) throw new ApiError(response.status, body);
  return body;
}

// Answers every status (the caller decides what a 422 means); throws only when the server cannot be reached.
export async function postJSON(path, data) {
  const response = await fetch(url(path), {
    method: 'POST',
    headers: headers(data !== undefined),
    body: data === undefined ? undefined : JSON.stringify(data),
  });
  return { status: response.status, ok: response.ok, body: await parse(response) };
}

// The same, with PUT (changing a thing in place, such as an experiment's sharing).
export async function putJSON(path, data) {
  const response = await fetch(url(path), { method: 'PUT', headers: headers(true), body: JSON.stringify(data) });
  return { status: response.status, ok: response.ok, body: await parse(response) };
}

// Calls `step` now and then every `intervalMs` after each call ends, while the page is visible, until `step`
// returns false or stop() is called. Failures are reported to `onError` and the polling goes on.
export function poll(step, intervalMs, onError = () => {}) {
  let timer = null;
  let stopped = false;
  async function tick() {
    timer = null;
    if (stopped) return;
    if (document.hidden) return;
    let again = true;
    try {
      again = (await step()) !== false;
    } catch (error) {
      onError(error);
    }
    if (again && !stopped) timer = setTimeout(tick, intervalMs);
    else stopped = true;
  }
  const resume = () => {
    if (!document.hidden && !stopped && timer === null) tick();
  };
  document.addEventListener('visibilitychange', resume);
  tick();
  return () => {
    stopped = true;
    if (timer !== null) clearTimeout(timer);
    document.removeEventListener('visibilitychange', resume);
  };
}

export function pageData() {
  const element = document.getElementById('page-data');
  return element ? JSON.parse(element.textContent) : {};
}

export function finalStates() {
  return new Set(JSON.parse(document.body.dataset.finalStates ?? '[]'));
}

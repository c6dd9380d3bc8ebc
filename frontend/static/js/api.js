// @ts-check
// The one way pages talk to the server: the JSON API, with the headers every request needs, and what the page
// itself says about where it is served and its runs (read when asked, never at import).

/** @typedef {import('./types/api.js').RunState} RunState */

/**
 * The content of a <meta name=...> of the page, or undefined.
 * @param {string} name
 */
function meta(name) {
  return /** @type {HTMLMetaElement | null} */ (document.querySelector(`meta[name="${name}"]`))?.content;
}

/**
 * The path under the server's root (it may be served below a prefix).
 * @param {string} path
 */
export function url(path) {
  return (meta('scalelab-root') ?? '') + path;
}

/** @param {boolean} withBody */
function headers(withBody) {
  /** @type {Record<string, string>} */
  const result = { Accept: 'application/json' };
  if (withBody) result['Content-Type'] = 'application/json';
  // Pages that carry a CSRF token hand it to every request from here.
  const csrf = meta('csrf-token');
  if (csrf) result['X-CSRF-Token'] = csrf;
  return result;
}

/** The server's `detail`: a sentence, or for a 422 the list of what it refused. @typedef {{ detail?: unknown }} ErrorBody */

export class ApiError extends Error {
  /**
   * @param {number} status
   * @param {unknown} body
   */
  constructor(status, body) {
    const detail = /** @type {ErrorBody | null} */ (body)?.detail;
    super(typeof detail === 'string' ? detail : `the server answered ${status}`);
    this.status = status;
    this.body = body;
  }
}

/** @param {Response} response @returns {Promise<any>} */
async function parse(response) {
  const text = await response.text();
  try {
    return text ? JSON.parse(text) : null;
  } catch {
    return { detail: text };
  }
}

/**
 * The answer of a GET; throws an ApiError for any status but 2xx. The caller names the answer's type.
 * @param {string} path
 * @returns {Promise<any>}
 */
export async function getJSON(path) {
  const response = await fetch(url(path), { headers: headers(false) });
  const body = await parse(response);
  if (!response.ok) throw new ApiError(response.status, body);
  return body;
}

/** An answer of any status: its body as JSON (or {detail: text}). @typedef {{ status: number, ok: boolean, body: any }} Answer */

/**
 * Answers every status (the caller decides what a 422 means); throws only when the server cannot be reached.
 * @param {string} path
 * @param {unknown} [data]
 * @returns {Promise<Answer>}
 */
export async function postJSON(path, data) {
  const response = await fetch(url(path), {
    method: 'POST',
    headers: headers(data !== undefined),
    body: data === undefined ? undefined : JSON.stringify(data),
  });
  return { status: response.status, ok: response.ok, body: await parse(response) };
}

/**
 * The same, with PUT (changing a thing in place, such as an experiment's sharing).
 * @param {string} path
 * @param {unknown} data
 * @returns {Promise<Answer>}
 */
export async function putJSON(path, data) {
  const response = await fetch(url(path), { method: 'PUT', headers: headers(true), body: JSON.stringify(data) });
  return { status: response.status, ok: response.ok, body: await parse(response) };
}

/**
 * Calls `step` now and then every `intervalMs` after each call ends, while the page is visible, until `step`
 * returns false or the returned stop() is called. Failures are reported to `onError` and the polling goes on.
 * @param {() => Promise<boolean | void>} step
 * @param {number} intervalMs
 * @param {(error: Error) => void} [onError]
 * @returns {() => void} stop
 */
export function poll(step, intervalMs, onError = () => {}) {
  /** @type {ReturnType<typeof setTimeout> | null} */
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
      onError(/** @type {Error} */ (error));
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

/** What the server wrote into the page for its module (<script id="page-data">), or {}. @returns {any} */
export function pageData() {
  const element = document.getElementById('page-data');
  return element ? JSON.parse(element.textContent ?? '{}') : {};
}

/** The states a run never leaves, as the server listed them on the page's body. @returns {Set<string>} */
export function finalStates() {
  return new Set(JSON.parse(document.body.dataset.finalStates ?? '[]'));
}

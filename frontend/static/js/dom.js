// @ts-check
// Building elements without innerHTML, so that text from the server is never parsed as markup; finding a
// component's elements within its root.

/** What h() and replaceChildren() take as children: nodes and text; null, undefined and false are left out. */
/** @typedef {Node | string | null | undefined | false} Child */

/**
 * An element with attributes (`dataset`: its data-*; a property of the element, such as `hidden` or `min`, is set
 * as the property unless the value is text) and children.
 * @template {keyof HTMLElementTagNameMap} K
 * @param {K} tag
 * @param {Record<string, unknown>} [attributes]
 * @param {...(Child | Child[])} children
 * @returns {HTMLElementTagNameMap[K]}
 */
export function h(tag, attributes = {}, ...children) {
  const element = document.createElement(tag);
  for (const [name, value] of Object.entries(attributes)) {
    if (value === null || value === undefined || value === false) continue;
    if (name === 'dataset') Object.assign(element.dataset, value);
    else if (name in element && typeof value !== 'string') /** @type {any} */ (element)[name] = value;
    else element.setAttribute(name, value === true ? '' : String(value));
  }
  element.append(...shown(children));
  return element;
}

/**
 * @param {Element} element
 * @param {...(Child | Child[])} children
 */
export function replaceChildren(element, ...children) {
  element.replaceChildren(...shown(children));
}

/**
 * @param {(Child | Child[])[]} children
 * @returns {(Node | string)[]}
 */
function shown(children) {
  return /** @type {(Node | string)[]} */ (children.flat().filter((child) => child !== null && child !== undefined && child !== false));
}

/**
 * The element of `root` with this id (the caller names its type); throws where there is none, as then the page and
 * its module disagree.
 * @template {Element} [E=HTMLElement]
 * @param {ParentNode} root
 * @param {string} id
 * @returns {E}
 */
export function byId(root, id) {
  const element = root.querySelector(`[id="${id}"]`);
  if (!element) throw new Error(`the page has no element #${id}`);
  return /** @type {E} */ (element);
}

/**
 * The first element of `root` that the selector finds (the caller names its type); throws where there is none.
 * @template {Element} [E=HTMLElement]
 * @param {ParentNode} root
 * @param {string} selector
 * @returns {E}
 */
export function one(root, selector) {
  const element = root.querySelector(selector);
  if (!element) throw new Error(`the page has no ${selector}`);
  return /** @type {E} */ (element);
}

/**
 * The element of `root` with this id, or null where the page leaves it out.
 * @template {Element} [E=HTMLElement]
 * @param {ParentNode} root
 * @param {string} id
 * @returns {E | null}
 */
export function optionalById(root, id) {
  return /** @type {E | null} */ (root.querySelector(`[id="${id}"]`));
}

/**
 * How many rows are in each state, by state name in order.
 * @param {{ state: string }[]} rows
 * @returns {[string, number][]}
 */
export function countStates(rows) {
  /** @type {Map<string, number>} */
  const byState = new Map();
  for (const row of rows) byState.set(row.state, (byState.get(row.state) || 0) + 1);
  return [...byState.keys()].sort().map((state) => [state, byState.get(state) ?? 0]);
}

/**
 * The experiment's state counts in a page's heading (its #state-counts, where it has one), kept up to date from the
 * rows the page polls.
 * @param {ParentNode} root
 * @param {{ state: string }[]} rows
 */
export function drawStateCounts(root, rows) {
  const counts = optionalById(root, 'state-counts');
  if (!counts) return;
  replaceChildren(counts, countStates(rows).flatMap(([state, count]) => [
    h('span', { class: 'state', dataset: { state } }, `${count} ${state}`), ' ']));
}

// Building elements without innerHTML, so that text from the server is never parsed as markup.

export function h(tag, attributes = {}, ...children) {
  const element = document.createElement(tag);
  for (const [name, value] of Object.entries(attributes)) {
    if (value === null || value === undefined || value === false) continue;
    if (name === 'dataset') Object.assign(element.dataset, value);
    else if (name in element && typeof value !== 'string') element[name] = value;
    else element.setAttribute(name, value === true ? '' : value);
  }
  element.append(...children.flat().filter((child) => child !== null && child !== undefined && child !== false));
  return element;
}

export function replaceChildren(element, ...children) {
  element.replaceChildren(...children.flat().filter((child) => child !== null && child !== undefined));
}

// The experiment's state counts in a page's heading, kept up to date from the rows the page polls.
export function drawStateCounts(rows) {
  const counts = document.getElementById('state-counts');
  if (!counts) return;
  const byState = new Map();
  for (const row of rows) byState.set(row.state, (byState.get(row.state) || 0) + 1);
  replaceChildren(counts, [...byState.keys()].sort().flatMap((state) => [
    h('span', { class: 'state', dataset: { state } }, `${byState.get(state)} ${state}`), ' ']));
}

// @ts-check
// One setting of the form as a widget: its fixed value, or the values it sweeps. What a value may be comes from
// the server's models through the field's data-* attributes, so these checks and the API's agree.

/**
 * A field's own problem: {value} to send, {} to leave unset (the default applies), or {error}.
 * @typedef {{ value?: any, error?: string }} Parsed
 */
/** A problem with the request, and where the form shows it. @typedef {import('./problems.js').Problem} Problem */

/**
 * What a value may be, as the server described the field.
 * @typedef {{ kind?: string, min: number | null, max: number | null, xmin: number | null }} Bounds
 */

/**
 * The field (a .field of the form) as the server described it.
 * @param {HTMLElement} field
 */
export function describe(field) {
  /** @param {string | undefined} text */
  const number = (text) => (text === undefined ? null : Number(text));
  return {
    name: field.dataset.field,
    prefix: field.dataset.prefix,
    kind: field.dataset.kind,
    fixed: field.dataset.fixed,
    optional: field.dataset.optional === 'true',
    fallback: JSON.parse(field.dataset.default ?? 'null'),
    min: number(field.dataset.min),
    max: number(field.dataset.max),
    xmin: number(field.dataset.xmin),
  };
}

/**
 * The kind of run chosen in the form that holds `element` (train where the form has no choice).
 * @param {Element} element
 */
export const kindChosen = (element) => /** @type {HTMLSelectElement | null} */ (element.closest('form')?.querySelector('#f-kind'))?.value ?? 'train';
/** @param {Element} element */
export const isProgram = (element) => kindChosen(element) === 'program';

/**
 * Whether the chosen kind of run reads a setting (its .field's data-kinds, from contract.spec.kind_reads).
 * @param {HTMLElement} field
 */
export const kindReads = (field) => (field.dataset.kinds ?? '').split(' ').includes(kindChosen(field));

/**
 * Whether a setting goes into the request: whatever the user set, shown or not, except that a program's request
 * leaves out what a program does not read (the server refuses the built-in worker's settings for one), and a strict
 * setting (data-strict: the target, which an inference experiment cannot have) goes only with the kinds that read it.
 * @param {HTMLElement} field
 */
export const sent = (field) => (!isProgram(field) && field.dataset.strict !== 'true') || kindReads(field);

/** @param {HTMLElement} field */
const isSwept = (field) => /** @type {HTMLInputElement | null} */ (field.querySelector('.sweep-toggle'))?.checked ?? false;
/** @param {HTMLElement} field */
const fixedControl = (field) => /** @type {HTMLInputElement | HTMLSelectElement | null} */ (field.querySelector('.fixed input, .fixed select'));
/** @param {HTMLElement} field */
const label = (field) => field.querySelector('label')?.textContent?.trim() ?? field.dataset.field ?? '';

/**
 * {value} or {error} for one typed text, within the field's bounds.
 * @param {Bounds} spec
 * @param {string} text
 * @returns {Parsed}
 */
export function parse(spec, text) {
  /** @type {unknown} */
  let value = text;
  if (spec.kind === 'int') {
    if (!/^-?\d+$/.test(text)) return { error: `“${text}” is not a whole number` };
    value = Number(text);
  } else if (spec.kind === 'float') {
    value = Number(text);
    if (text === '' || !Number.isFinite(value)) return { error: `“${text}” is not a number` };
  } else if (spec.kind === 'bool') {
    value = text === 'true';
  }
  if (typeof value === 'number') {
    if (spec.min !== null && value < spec.min) return { error: `must be at least ${spec.min}, not ${value}` };
    if (spec.xmin !== null && value <= spec.xmin) return { error: `must be more than ${spec.xmin}, not ${value}` };
    if (spec.max !== null && value > spec.max) return { error: `must be at most ${spec.max}, not ${value}` };
  }
  return { value };
}

/**
 * One value: {value} to send, {} to leave unset (the default applies), or {error}.
 * @param {HTMLElement} field
 * @param {ReturnType<typeof describe>} spec
 * @returns {Parsed}
 */
function readFixed(field, spec) {
  const control = fixedControl(field);
  if (!control) return {};
  if (spec.kind === 'bool') return { value: /** @type {HTMLInputElement} */ (control).checked };
  if (control.validity?.badInput) return { error: 'enter a number' };
  const text = control.value.trim();
  if (text === '') return spec.optional ? {} : { error: 'enter a value' };
  return parse(spec, text);
}

/**
 * @param {HTMLElement} field
 * @param {ReturnType<typeof describe>} spec
 * @returns {Parsed}
 */
function readSweep(field, spec) {
  const boxes = /** @type {HTMLInputElement[]} */ ([...field.querySelectorAll('.sweep input[type="checkbox"]')]);
  const texts = boxes.length
    ? boxes.filter((box) => box.checked).map((box) => box.value)
    : (/** @type {HTMLInputElement | null} */ (field.querySelector('.sweep input'))?.value ?? '').split(/[\s,;]+/).filter(Boolean);
  if (!texts.length) return { error: boxes.length ? 'choose at least one value to sweep' : 'enter at least one value' };
  /** @type {unknown[]} */
  const values = [];
  for (const text of texts) {
    const parsed = parse(spec, text);
    if (parsed.error) return parsed;
    if (values.includes(parsed.value)) return { error: `${text} is listed twice` };
    values.push(parsed.value);
  }
  return { value: values };
}

/**
 * What the field holds now, {swept, value} or {swept, error}: its list of values when swept, else as readFixed.
 * @param {HTMLElement} field
 * @returns {Parsed & { swept: boolean }}
 */
export function read(field) {
  const spec = describe(field);
  const swept = isSwept(field);
  return { swept, ...(swept ? readSweep(field, spec) : readFixed(field, spec)) };
}

// Where a problem with this field is shown: its error line, and the control it marks (the sweep's when the problem
// is with the swept values and the field is swept).
/**
 * @param {HTMLElement} field
 * @param {boolean} inSweep
 * @param {string} [message]
 * @returns {Problem}
 */
export function problemAt(field, inSweep, message = '') {
  const spec = describe(field);
  const control = inSweep && isSwept(field) ? field.querySelector('.sweep input') : fixedControl(field);
  return { errorId: `e-${spec.prefix}-${spec.name}`, controlId: control?.id ?? null, label: label(field), message };
}

/**
 * Shows the sweep or the fixed value, as the field's toggle says.
 * @param {HTMLElement} field
 */
export function showSweep(field) {
  const swept = isSwept(field);
  const sweep = /** @type {HTMLElement | null} */ (field.querySelector('.sweep'));
  if (sweep) sweep.hidden = !swept;
  const fixed = /** @type {HTMLElement | null} */ (field.querySelector('.fixed'));
  if (fixed && field.dataset.fixed) fixed.hidden = swept;
  if (!swept) return;
  // Start the sweep from the value the field had.
  const control = fixedControl(field);
  const current = control ? (control.type === 'checkbox' ? String(/** @type {HTMLInputElement} */ (control).checked) : control.value) : '';
  const boxes = /** @type {NodeListOf<HTMLInputElement>} */ (field.querySelectorAll('.sweep input[type="checkbox"]'));
  if (boxes.length && ![...boxes].some((box) => box.checked)) {
    boxes.forEach((box) => { box.checked = box.value === current; });
  }
  const text = /** @type {HTMLInputElement | null} */ (field.querySelector('.sweep input[type="text"]'));
  if (text && !text.value) text.value = current;
}

/**
 * The field's fixed value, as a request gives it.
 * @param {HTMLElement} field
 * @param {unknown} value
 */
export function setValue(field, value) {
  const control = fixedControl(field);
  if (!control) return;
  if (control.type === 'checkbox') /** @type {HTMLInputElement} */ (control).checked = Boolean(value);
  else control.value = /** @type {string} */ (value ?? '');
}

/**
 * The field swept over `values`.
 * @param {HTMLElement} field
 * @param {unknown[]} values
 */
export function setSweep(field, values) {
  const toggle = /** @type {HTMLInputElement | null} */ (field.querySelector('.sweep-toggle'));
  if (!toggle) return;
  toggle.checked = true;
  const strings = values.map(String);
  /** @type {NodeListOf<HTMLInputElement>} */ (field.querySelectorAll('.sweep input[type="checkbox"]')).forEach((box) => { box.checked = strings.includes(box.value); });
  const text = /** @type {HTMLInputElement | null} */ (field.querySelector('.sweep input[type="text"]'));
  if (text) text.value = strings.join(', ');
  showSweep(field);
}

// @ts-check
// A program run's inputs (kind program): its command split into words as a shell would split them, though no shell
// ever runs it; where and how it starts; its environment; and the parameters it is given or swept over. For a
// program the built-in worker's settings are hidden and left out of the request, which the server would refuse.

import { byId, h, replaceChildren } from '../dom.js';
import { isProgram } from './fields.js';
import { problem } from './problems.js';

/** @typedef {import('./problems.js').Problem} Problem */
/** @typedef {import('./request.js').Request} Request */
/** @typedef {{ words: string[], error?: undefined } | { error: string, words?: undefined }} Split */

/**
 * A program input of the form in `root`: p-NAME.
 * @param {ParentNode} root
 * @param {string} name
 * @returns {HTMLInputElement | HTMLTextAreaElement | HTMLSelectElement}
 */
const control = (root, name) => byId(root, `p-${name}`);
/**
 * @param {ParentNode} root
 * @param {string} name
 */
const labelOf = (root, name) => root.querySelector(`label[for="p-${name}"]`)?.textContent ?? name;
const PARAM_PREFIX = 'params.'; // a swept parameter's key in the grid (contract.program.PARAM_PREFIX)

// Characters a shell would act on, which here would reach the program as they are: refused unless quoted, so that
// `train.py > log` or `$HOME/data` does not silently become a program's arguments.
const SHELL_ACTS_ON = new Set(['|', '&', ';', '<', '>', '$', '`']);

// A command line as a shell splits it into words: blanks separate words, 'single quotes' keep everything,
// "double quotes" keep everything but \" and \\, a backslash keeps the next character. {words} or {error}.
/**
 * @param {string} text
 * @returns {Split}
 */
export function splitWords(text) {
  /** @type {string[]} */
  const words = [];
  /** @type {string | null} */
  let word = null; // null: between words
  /** @type {string | null} */
  let quote = null;
  for (let at = 0; at < text.length; at += 1) {
    const char = text[at];
    if (quote === "'") {
      if (char === "'") quote = null;
      else word += char;
    } else if (quote === '"') {
      if (char === '"') quote = null;
      else if (char === '\\' && (text[at + 1] === '"' || text[at + 1] === '\\')) word += text[(at += 1)];
      else word += char;
    } else if (/\s/.test(char)) {
      if (word !== null) words.push(word);
      word = null;
    } else if (char === "'" || char === '"') {
      quote = char;
      word ??= '';
    } else if (char === '\\') {
      if (at + 1 === text.length) return { error: 'ends with a lone \\: remove it, or quote it (\'\\\')' };
      word = (word ?? '') + text[(at += 1)];
    } else if (SHELL_ACTS_ON.has(char)) {
      return {
        error: `“${char}” is not acted on: no shell runs the command (no redirection, pipes or variables); ` +
          `quote it ('${char}') to pass it to the program as it is`,
      };
    } else {
      word = (word ?? '') + char;
    }
  }
  if (quote) return { error: `a ${quote === "'" ? 'single' : 'double'} quote is not closed` };
  if (word !== null) words.push(word);
  return { words };
}

/**
 * Words as one line a shell splits back into them (Python's shlex.join, which the run page uses).
 * @param {string[]} words
 */
export function joinWords(words) {
  return words.map((word) => (/^[A-Za-z0-9_@%+=:,./-]+$/.test(word) ? word : `'${word.replaceAll("'", "'\\''")}'`)).join(' ');
}

/**
 * The lines of a text area that say something: blank lines and # comments left out, each with its line number.
 * @param {string} text
 */
function linesOf(text) {
  return text.split(/\r?\n/).map((line, index) => ({ line, number: index + 1 }))
    .filter(({ line }) => line.trim() && !line.trim().startsWith('#'));
}

/**
 * NAME=value lines: {env} or {error}. The value is taken as it is after the first '='.
 * @param {string} text
 * @param {string} pattern a name's regular expression
 * @returns {{ env: Record<string, string>, error?: undefined } | { error: string, env?: undefined }}
 */
export function parseEnv(text, pattern) {
  /** @type {Record<string, string>} */
  const env = {};
  for (const { line, number } of linesOf(text)) {
    const equals = line.indexOf('=');
    if (equals < 0) return { error: `line ${number}: “${line.trim()}” has no '=': write NAME=value` };
    const name = line.slice(0, equals).trim();
    if (!new RegExp(pattern).test(name)) {
      return { error: `line ${number}: “${name}” is not a variable name (letters, digits and _, not starting with a digit)` };
    }
    if (name in env) return { error: `line ${number}: ${name} is set twice` };
    env[name] = line.slice(equals + 1);
  }
  return { env };
}

/** A parameter's value: what the program is given. @typedef {string | number | boolean} ParamValue */

/**
 * A parameter's value as typed: a number, true/false, or text ("quoted" to keep text that reads as a number).
 * @param {string} text
 * @returns {ParamValue}
 */
function paramValue(text) {
  if (/^".*"$/.test(text)) return text.slice(1, -1);
  if (text === 'true' || text === 'false') return text === 'true';
  if (/^[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?$/.test(text)) {
    const value = Number(text);
    if (Number.isFinite(value) && (!Number.isInteger(value) || Number.isSafeInteger(value))) return value;
  }
  return text;
}

/**
 * Values separated by commas outside "quotes".
 * @param {string} text
 */
function splitValues(text) {
  const values = [];
  let current = '';
  let quoted = false;
  for (const char of text) {
    if (char === '"') quoted = !quoted;
    if (char === ',' && !quoted) {
      values.push(current.trim());
      current = '';
    } else {
      current += char;
    }
  }
  values.push(current.trim());
  return values;
}

/**
 * `name = v1, v2` lines: {fixed: {name: value}, swept: {name: [values]}} or {error}.
 * @param {string} text
 * @param {string} pattern a name's regular expression
 * @returns {{ fixed: Record<string, ParamValue>, swept: Record<string, ParamValue[]>, error?: undefined }
 *   | { error: string, fixed?: undefined, swept?: undefined }}
 */
export function parseParams(text, pattern) {
  /** @type {Record<string, ParamValue>} */
  const fixed = {};
  /** @type {Record<string, ParamValue[]>} */
  const swept = {};
  for (const { line, number } of linesOf(text)) {
    const equals = line.indexOf('=');
    if (equals < 0) return { error: `line ${number}: “${line.trim()}” has no '=': write name = value, or name = v1, v2 to sweep` };
    const name = line.slice(0, equals).trim();
    if (!new RegExp(pattern).test(name)) {
      return { error: `line ${number}: “${name}” is not a parameter name (lower-case letters, digits and _, starting with a letter)` };
    }
    if (name in fixed || name in swept) return { error: `line ${number}: ${name} is given twice` };
    const texts = splitValues(line.slice(equals + 1));
    if (texts.some((value) => !value)) return { error: `line ${number}: ${name} has an empty value` };
    const values = texts.map(paramValue);
    const twice = values.find((value, index) => values.indexOf(value) !== index);
    if (twice !== undefined) return { error: `line ${number}: ${name} lists ${twice} twice` };
    if (values.length === 1) fixed[name] = values[0];
    else swept[name] = values;
  }
  return { fixed, swept };
}

/**
 * A value as parseParams reads it back: text that would read as something else is quoted.
 * @param {ParamValue} value
 */
export function valueText(value) {
  if (typeof value !== 'string') return String(value);
  return paramValue(value) === value && !value.includes(',') ? value : `"${value}"`;
}

/**
 * The words of the command, shown as the program will get them.
 * @param {ParentNode} root
 */
export function showWords(root) {
  const split = splitWords(control(root, 'command').value);
  replaceChildren(byId(root, 'p-argv'), (split.words ?? []).map((word) => h('li', {}, h('code', {}, word))));
}

/**
 * Where this user may not run a program (the page then says why, in #programs-refused), kind program cannot be
 * chosen, and the kind's choice points to the reason.
 * @param {ParentNode} root
 */
export function refusePrograms(root) {
  const why = root.querySelector('#programs-refused');
  const kind = root.querySelector('#f-kind');
  if (!why || !(kind instanceof HTMLSelectElement)) return;
  for (const option of kind.options) {
    if (option.value === 'program') {
      option.disabled = true;
      option.textContent = 'program (not offered to you: see below)';
    }
  }
  kind.setAttribute('aria-describedby', `${kind.getAttribute('aria-describedby') ?? ''} programs-refused`.trim());
}

/**
 * Shown only for a program (form/relevance.js hides the settings that do not apply to one).
 * @param {ParentNode} root
 */
export function showProgram(root) {
  const inputs = byId(root, 'program-inputs');
  const program = isProgram(inputs);
  inputs.hidden = !program;
  if (program) showWords(root);
}

/**
 * The program into request.base.program, and its swept parameters into request.grid; problems into `errors`.
 * @param {ParentNode} root
 * @param {Request} request
 * @param {Problem[]} errors
 */
export function readProgram(root, request, errors) {
  /** @param {string} name @param {string} message */
  const fail = (name, message) => errors.push(problem(`e-p-${name}`, `p-${name}`, labelOf(root, name), message));
  /** @type {Record<string, unknown>} */
  const program = { launcher: control(root, 'launcher').value };
  const split = splitWords(control(root, 'command').value.trim());
  if (split.error !== undefined) fail('command', split.error);
  else if (!split.words.length) fail('command', 'enter the command to run, e.g. python train.py');
  else program.command = split.words;
  // Today's default (flags) is left out of the request, as the CLI leaves it out.
  const paramsStyle = control(root, 'params_style').value;
  if (paramsStyle && paramsStyle !== 'flags') program.params_style = paramsStyle;
  const workdir = control(root, 'workdir').value.trim();
  if (!workdir) fail('workdir', 'enter the directory it starts in, an absolute path');
  else program.workdir = workdir;
  // Only where it differs from the default: a request from before the choice reads as it did.
  const cwd = control(root, 'cwd').value;
  if (cwd && cwd !== 'workdir') program.cwd = cwd;
  const image = control(root, 'image').value.trim();
  if (image) program.image = image;
  const envControl = control(root, 'env');
  const env = parseEnv(envControl.value, envControl.dataset.pattern ?? '');
  if (env.error !== undefined) fail('env', env.error);
  else if (Object.keys(env.env).length) program.env = env.env;
  const paramsControl = control(root, 'params');
  const params = parseParams(paramsControl.value, paramsControl.dataset.pattern ?? '');
  if (params.error !== undefined) {
    fail('params', params.error);
  } else {
    if (Object.keys(params.fixed).length) program.params = params.fixed;
    for (const [name, values] of Object.entries(params.swept)) request.grid[PARAM_PREFIX + name] = values;
  }
  request.base.program = program;
}

/**
 * The form filled from a program experiment's request (one a new experiment starts from).
 * @param {ParentNode} root
 * @param {Partial<Request>} start
 */
export function fillProgram(root, start) {
  const program = start.base?.program;
  if (!program) return;
  control(root, 'command').value = joinWords(program.command ?? []);
  control(root, 'workdir').value = program.workdir ?? '';
  control(root, 'launcher').value = program.launcher ?? 'srun';
  control(root, 'params_style').value = program.params_style ?? 'flags';
  control(root, 'cwd').value = program.cwd ?? 'workdir';
  control(root, 'image').value = program.image ?? '';
  control(root, 'env').value = Object.entries(program.env ?? {}).map(([name, value]) => `${name}=${value}`).join('\n');
  /** @type {[string, ParamValue[]][]} */
  const swept = Object.entries(start.grid ?? {}).filter(([key]) => key.startsWith(PARAM_PREFIX))
    .map(([key, values]) => [key.slice(PARAM_PREFIX.length), /** @type {ParamValue[]} */ (values)]);
  /** @type {[string, ParamValue[]][]} */
  const fixed = Object.entries(program.params ?? {}).map(([name, value]) => [name, [value]]);
  const all = [...fixed, ...swept];
  control(root, 'params').value = all.map(([name, values]) => `${name} = ${values.map(valueText).join(', ')}`).join('\n');
}

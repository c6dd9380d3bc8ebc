// A program run's inputs (kind program): its command split into words as a shell would split them, though no shell
// ever runs it; where and how it starts; its environment; and the parameters it is given or swept over. For a
// program the built-in worker's settings are hidden and left out of the request, which the server would refuse.

import { h, replaceChildren } from '../dom.js';
import { isProgram } from './fields.js';
import { problem } from './problems.js';

const inputs = document.getElementById('program-inputs');
const control = (name) => document.getElementById(`p-${name}`);
const labelOf = (name) => document.querySelector(`label[for="p-${name}"]`)?.textContent ?? name;
const PARAM_PREFIX = 'params.'; // a swept parameter's key in the grid (contract.program.PARAM_PREFIX)

// Characters a shell would act on, which here would reach the program as they are: refused unless quoted, so that
// `train.py > log` or `$HOME/data` does not silently become a program's arguments.
const SHELL_ACTS_ON = new Set(['|', '&', ';', '<', '>', '$', '`']);

// A command line as a shell splits it into words: blanks separate words, 'single quotes' keep everything,
// "double quotes" keep everything but \" and \\, a backslash keeps the next character. {words} or {error}.
export function splitWords(text) {
  const words = [];
  let word = null; // null: between words
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

// Words as one line a shell splits back into them (Python's shlex.join, which the run page uses).
export function joinWords(words) {
  return words.map((word) => (/^[A-Za-z0-9_@%+=:,./-]+$/.test(word) ? word : `'${word.replaceAll("'", "'\\''")}'`)).join(' ');
}

// The lines of a text area that say something: blank lines and # comments left out, each with its line number.
function linesOf(text) {
  return text.split(/\r?\n/).map((line, index) => ({ line, number: index + 1 }))
    .filter(({ line }) => line.trim() && !line.trim().startsWith('#'));
}

// NAME=value lines: {env} or {error}. The value is taken as it is after the first '='.
export function parseEnv(text, pattern) {
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

// A parameter's value as typed: a number, true/false, or text ("quoted" to keep text that reads as a number).
function paramValue(text) {
  if (/^".*"$/.test(text)) return text.slice(1, -1);
  if (text === 'true' || text === 'false') return text === 'true';
  if (/^[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?$/.test(text)) {
    const value = Number(text);
    if (Number.isFinite(value) && (!Number.isInteger(value) || Number.isSafeInteger(value))) return value;
  }
  return text;
}

// Values separated by commas outside "quotes".
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

// `name = v1, v2` lines: {fixed: {name: value}, swept: {name: [values]}} or {error}.
export function parseParams(text, pattern) {
  const fixed = {};
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

// A value as parseParams reads it back: text that would read as something else is quoted.
function valueText(value) {
  if (typeof value !== 'string') return String(value);
  return paramValue(value) === value && !value.includes(',') ? value : `"${value}"`;
}

// The words of the command, shown as the program will get them.
export function showWords() {
  const split = splitWords(control('command').value);
  replaceChildren(document.getElementById('p-argv'), (split.words ?? []).map((word) => h('li', {}, h('code', {}, word))));
}

// Shown only for a program (form/relevance.js hides the settings that do not apply to one).
export function showProgram() {
  const program = isProgram();
  inputs.hidden = !program;
  if (program) showWords();
}

// The program into request.base.program, and its swept parameters into request.grid; problems into `errors`.
export function readProgram(request, errors) {
  const fail = (name, message) => errors.push(problem(`e-p-${name}`, `p-${name}`, labelOf(name), message));
  const program = { launcher: control('launcher').value };
  const split = splitWords(control('command').value.trim());
  if (split.error) fail('command', split.error);
  else if (!split.words.length) fail('command', 'enter the command to run, e.g. python train.py');
  else program.command = split.words;
  const workdir = control('workdir').value.trim();
  if (!workdir) fail('workdir', 'enter the directory it starts in, an absolute path');
  else program.workdir = workdir;
  const image = control('image').value.trim();
  if (image) program.image = image;
  const env = parseEnv(control('env').value, control('env').dataset.pattern);
  if (env.error) fail('env', env.error);
  else if (Object.keys(env.env).length) program.env = env.env;
  const params = parseParams(control('params').value, control('params').dataset.pattern);
  if (params.error) {
    fail('params', params.error);
  } else {
    if (Object.keys(params.fixed).length) program.params = params.fixed;
    for (const [name, values] of Object.entries(params.swept)) request.grid[PARAM_PREFIX + name] = values;
  }
  request.base.program = program;
}

// The form filled from a program experiment's request (one a new experiment starts from).
export function fillProgram(start) {
  const program = start.base?.program;
  if (!program) return;
  control('command').value = joinWords(program.command ?? []);
  control('workdir').value = program.workdir ?? '';
  control('launcher').value = program.launcher ?? 'srun';
  control('image').value = program.image ?? '';
  control('env').value = Object.entries(program.env ?? {}).map(([name, value]) => `${name}=${value}`).join('\n');
  const swept = Object.entries(start.grid ?? {}).filter(([key]) => key.startsWith(PARAM_PREFIX))
    .map(([key, values]) => [key.slice(PARAM_PREFIX.length), values]);
  control('params').value = [...Object.entries(program.params ?? {}).map(([name, value]) => [name, [value]]), ...swept]
    .map(([name, values]) => `${name} = ${values.map(valueText).join(', ')}`).join('\n');
}

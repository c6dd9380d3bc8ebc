// The new-experiment form: builds the request from the fields, previews it as it changes, and submits it.
// The fields come from the server's models (data-* attributes); validation messages come from the same bounds
// here, and from the API's 422 answers, each placed at the field it names.

import { getJSON, postJSON, url } from './api.js';
import { h, replaceChildren } from './dom.js';
import { bytes } from './format.js';

const form = document.getElementById('experiment-form');
const summary = document.getElementById('error-summary');
const previewStatus = document.getElementById('preview-status');
const previewBody = document.getElementById('preview-body');
const previewRun = document.getElementById('preview-run');
const submitStatus = document.getElementById('submit-status');
const profileSelect = document.getElementById('r-profile');
const partitionSelect = document.getElementById('r-partition');
const optionsBox = document.getElementById('sbatch-options');

const valueFields = [...form.querySelectorAll('.field[data-kind]')];
let profiles = new Map();
let previewIndex = 0;
let previewSeq = 0;
let previewTimer = null;

// ---- reading the fields ------------------------------------------------------------------------------------

function info(field) {
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

const isSwept = (field) => field.querySelector('.sweep-toggle')?.checked ?? false;
const fixedControl = (field) => field.querySelector('.fixed input, .fixed select');
const label = (field) => field.querySelector('label')?.textContent.trim() ?? field.dataset.field;

function parse(spec, text) {
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

// One value: {value} to send, {} to leave unset (the default applies), or {error}.
function readFixed(field, spec) {
  const control = fixedControl(field);
  if (spec.kind === 'bool') return { value: control.checked };
  if (control.validity?.badInput) return { error: 'enter a number' };
  const text = control.value.trim();
  if (text === '') return spec.optional ? {} : { error: 'enter a value' };
  return parse(spec, text);
}

function readSweep(field, spec) {
  const boxes = [...field.querySelectorAll('.sweep input[type="checkbox"]')];
  const texts = boxes.length
    ? boxes.filter((box) => box.checked).map((box) => box.value)
    : field.querySelector('.sweep input').value.split(/[\s,;]+/).filter(Boolean);
  if (!texts.length) return { error: boxes.length ? 'choose at least one value to sweep' : 'enter at least one value' };
  const values = [];
  for (const text of texts) {
    const parsed = parse(spec, text);
    if (parsed.error) return parsed;
    if (values.includes(parsed.value)) return { error: `${text} is listed twice` };
    values.push(parsed.value);
  }
  return { value: values };
}

function readOptions(errors) {
  const options = {};
  for (const field of optionsBox.querySelectorAll('.field')) {
    const control = field.querySelector('input, select');
    const text = control.value.trim();
    if (!text) continue;
    if (field.dataset.kind === 'int') {
      const parsed = parse({ kind: 'int', min: null, max: null, xmin: null }, text);
      if (parsed.error) errors.push(problem(`e-o-${field.dataset.field}`, control.id, `--${field.dataset.field}`, parsed.error));
      else options[field.dataset.field] = parsed.value;
    } else {
      options[field.dataset.field] = text;
    }
  }
  return options;
}

function problem(errorId, controlId, fieldLabel, message) {
  return { errorId, controlId, label: fieldLabel, message };
}

// The request as the API takes it, and the problems found before asking the server. A preview needs no name.
function collect(forSubmit) {
  const errors = [];
  let name = form.elements.name.value.trim();
  if (!name && forSubmit) errors.push(problem('e-x-name', 'x-name', 'Name', 'give the experiment a name'));
  if (!name && !forSubmit) name = 'unnamed';
  const request = { name, on_invalid: form.elements.on_invalid.value, base: {}, grid: {}, resources: {} };
  for (const field of valueFields) {
    const spec = info(field);
    const swept = isSwept(field);
    const read = swept ? readSweep(field, spec) : readFixed(field, spec);
    const controlId = swept ? field.querySelector('.sweep input').id : `${spec.prefix}-${spec.name}`;
    if (read.error) {
      errors.push(problem(`e-${spec.prefix}-${spec.name}`, controlId, label(field), read.error));
    } else if (swept) {
      request.grid[spec.name] = read.value;
    } else if ('value' in read && read.value !== spec.fallback && spec.fixed) {
      request[spec.fixed][spec.name] = read.value;
    }
  }
  const profile = profiles.get(profileSelect.value);
  if (profileSelect.value && profileSelect.value !== profileSelect.dataset.default) {
    request.resources.profile = profileSelect.value;
  }
  if (profile && partitionSelect.value && partitionSelect.value !== profile.default_partition) {
    request.resources.partition = partitionSelect.value;
  }
  const options = readOptions(errors);
  if (Object.keys(options).length) request.resources.sbatch_options = options;
  if (request.base.kind === 'inference') {
    request.inference = { prompts: promptsText };
    if (checkpointSelect.value) request.inference.checkpoint_run = checkpointSelect.value;
    if (!promptsText && forSubmit) errors.push(problem('e-i-prompts', 'i-prompts', 'Prompts file', 'choose a prompts file'));
  }
  return { request, errors };
}

// ---- showing problems --------------------------------------------------------------------------------------

function fieldByName(name, fixedIn) {
  return valueFields.find((field) => field.dataset.field === name && (!fixedIn || field.dataset.fixed === fixedIn));
}

function targetOf(field, sweep) {
  const spec = info(field);
  const control = sweep && isSwept(field) ? field.querySelector('.sweep input') : fixedControl(field);
  return { errorId: `e-${spec.prefix}-${spec.name}`, controlId: control?.id, label: label(field) };
}

// Where a 422's `loc` points in this form: ["body", "base", "epochs"], ["body", "grid"], ["body", "resources", ...].
function serverProblems(detail) {
  if (!Array.isArray(detail)) return [problem('e-grid', null, '', String(detail ?? 'the request was refused'))];
  return detail.map((item) => {
    const loc = item.loc ?? [];
    const message = String(item.msg ?? '').replace(/^Value error, /, '');
    const [, section, name, key] = loc;
    let target = { errorId: 'e-grid', controlId: null, label: '' };
    if (section === 'name' || section === 'on_invalid') {
      target = { errorId: `e-x-${section}`, controlId: `x-${section}`, label: section === 'name' ? 'Name' : 'Grid combinations' };
    } else if ((section === 'base' || section === 'grid') && name !== undefined && fieldByName(name)) {
      target = targetOf(fieldByName(name), section === 'grid');
    } else if (section === 'inference' && document.getElementById(`e-i-${name}`)) {
      const control = name === 'checkpoint_path' ? 'i-checkpoint_run' : `i-${name}`;
      target = { errorId: `e-i-${name}`, controlId: control, label: document.querySelector(`label[for="${control}"]`)?.textContent ?? name };
    } else if (section === 'resources' && name === 'sbatch_options' && document.getElementById(`e-o-${key}`)) {
      target = { errorId: `e-o-${key}`, controlId: `o-${key}`, label: `--${key}` };
    } else if (section === 'resources' && name === 'sbatch_options') {
      target = { errorId: 'e-o-', controlId: null, label: 'sbatch options' };
    } else if (section === 'resources' && name !== undefined) {
      const field = fieldByName(name, 'resources');
      if (field) target = targetOf(field, false);
      else if (document.getElementById(`e-r-${name}`)) {
        target = { errorId: `e-r-${name}`, controlId: `r-${name}`, label: document.querySelector(`label[for="r-${name}"]`)?.textContent ?? name };
      }
    }
    const where = target.errorId === 'e-grid' && loc.length > 2 ? `${loc.slice(1).join('.')}: ` : '';
    return { ...target, message: where + message };
  });
}

function clearProblems() {
  for (const element of form.querySelectorAll('.error')) {
    element.hidden = true;
    element.textContent = '';
  }
  for (const control of form.querySelectorAll('[aria-invalid]')) control.removeAttribute('aria-invalid');
  form.querySelectorAll('.field.invalid').forEach((field) => field.classList.remove('invalid'));
}

function showProblems(problems, withSummary) {
  clearProblems();
  for (const item of problems) {
    const element = document.getElementById(item.errorId) ?? document.getElementById('e-grid');
    element.hidden = false;
    element.append(h('span', {}, item.message));
    const control = item.controlId && document.getElementById(item.controlId);
    if (control) {
      control.setAttribute('aria-invalid', 'true');
      control.closest('.field')?.classList.add('invalid');
    }
  }
  summary.hidden = !(withSummary && problems.length);
  if (!summary.hidden) {
    replaceChildren(
      summary.querySelector('ul'),
      problems.map((item) => {
        const text = item.label ? `${item.label}: ${item.message}` : item.message;
        return h('li', {}, item.controlId ? h('a', { href: `#${item.controlId}` }, text) : text);
      }),
    );
    summary.focus();
  }
}

// The server refused the request: the fields say why, and the preview must not show an older answer.
function showRefusal(problems, withSummary) {
  clearTimeout(previewTimer);
  previewSeq += 1;
  showProblems(problems, withSummary);
  previewStatus.textContent = `Nothing would be created: ${problems.length} ${problems.length === 1 ? 'problem' : 'problems'}, marked above.`;
  previewBody.hidden = true;
}

// ---- preview -----------------------------------------------------------------------------------------------

function combination(run, request) {
  const keys = Object.keys(request.grid);
  return keys.length ? keys.map((key) => `${key}=${run[key]}`).join(', ') : 'the base spec';
}

// The parts of a memory estimate: its *_bytes figures but the total, in the order the server gives them.
function partsOf(estimate) {
  return Object.entries(estimate ?? {})
    .filter(([key]) => key.endsWith('_bytes') && key !== 'total_bytes')
    .map(([key, value]) => [key.replace(/_bytes$/, '').replaceAll('_', ' '), value]);
}

function renderEstimates(preview, request) {
  const box = document.getElementById('estimates');
  const estimates = Array.isArray(preview.estimates) ? preview.estimates : [];
  box.hidden = !estimates.length;
  if (!estimates.length) return;
  const partition = profiles.get(profileSelect.value)?.partitions?.[partitionSelect.value];
  const gib = partition?.gpu_memory_gib;
  const bases = [...new Set(estimates.map((item) => item.estimate?.basis).filter(Boolean))];
  document.getElementById('estimates-note').textContent = (gib
    ? `Each GPU of partition ${partitionSelect.value} has ${gib} GiB; runs estimated beyond it are marked.`
    : `Partition ${partitionSelect.value} declares no GPU memory, so the estimates are not checked against it.`) +
    (bases.length === 1 ? ` How: ${bases[0]}.` : '');
  const partNames = [...new Set(estimates.flatMap((item) => partsOf(item.estimate).map(([name]) => name)))];
  const table = document.getElementById('estimates-table');
  replaceChildren(
    table.querySelector('thead'),
    h('tr', {}, h('th', { scope: 'col' }, 'Run'), partNames.map((name) => h('th', { scope: 'col', class: 'num' }, name)),
      h('th', { scope: 'col', class: 'num' }, 'Total per GPU'), h('th', { scope: 'col' }, 'Fits?')),
  );
  replaceChildren(
    table.querySelector('tbody'),
    estimates.map((item) => {
      const parts = Object.fromEntries(partsOf(item.estimate));
      const run = preview.runs[item.index];
      // A warning beside an estimate says it does not fit; without one, why there is no estimate.
      const exceeds = Boolean(item.estimate && item.warning);
      return h('tr', { class: exceeds ? 'warning' : null },
        h('th', { scope: 'row' }, `${item.index + 1}: ${run ? combination(run, request) : ''}`),
        partNames.map((name) => h('td', { class: 'num' }, bytes(parts[name]))),
        h('td', { class: 'num' }, bytes(item.estimate?.total_bytes)),
        h('td', {}, exceeds ? h('strong', {}, `⚠ ${item.warning}`) : item.warning ?? (gib ? 'yes' : '—')));
    }),
  );
}

function renderPreview(preview, request) {
  const skipped = document.getElementById('preview-skipped');
  const runs = preview.count === 1 ? 'run' : 'runs';
  previewStatus.textContent = `This experiment creates ${preview.count} ${runs}.` +
    (preview.skipped.length ? ` ${preview.skipped.length} combinations are left out:` : '');
  skipped.hidden = !preview.skipped.length;
  replaceChildren(skipped, preview.skipped.map((item) => {
    const where = Object.entries(item.combination).map(([key, value]) => `${key}=${value}`).join(', ');
    return h('li', {}, `${where || 'the base spec'}: ${item.reason}`);
  }));
  replaceChildren(previewRun, preview.runs.map((run, index) => h('option', { value: String(index) }, `${index + 1}: ${combination(run, request)}`)));
  previewRun.value = String(preview.index);
  document.getElementById('preview-script').textContent = preview.script;
  previewBody.hidden = false;
  renderEstimates(preview, request);
}

async function preview() {
  const { request, errors } = collect(false);
  if (errors.length) {
    showProblems(errors, false);
    previewStatus.textContent = 'Fix the fields marked above to see what would run.';
    previewBody.hidden = true;
    return;
  }
  const seq = ++previewSeq;
  previewStatus.textContent = 'Checking…';
  let answer = await postJSON(`/api/experiments/preview?index=${previewIndex}`, request);
  if (answer.status === 422 && answer.body?.detail?.some?.((item) => item.loc?.[0] === 'query') && previewIndex) {
    previewIndex = 0; // the chosen run is beyond the new grid
    answer = await postJSON('/api/experiments/preview?index=0', request);
  }
  if (seq !== previewSeq) return; // a newer preview is on its way
  if (answer.ok) {
    clearProblems();
    renderPreview(answer.body, request);
  } else if (answer.status === 422) {
    showRefusal(serverProblems(answer.body?.detail), false);
  } else {
    previewStatus.textContent = `The preview failed: ${answer.body?.detail ?? answer.status}`;
  }
}

function schedulePreview() {
  clearTimeout(previewTimer);
  previewTimer = setTimeout(() => preview().catch((error) => {
    previewStatus.textContent = `The server cannot be reached: ${error.message}`;
  }), 400);
}

// ---- submitting --------------------------------------------------------------------------------------------

async function submit(event) {
  event.preventDefault();
  const { request, errors } = collect(true);
  if (errors.length) {
    showProblems(errors, true);
    submitStatus.textContent = 'Nothing was submitted: fix the fields marked.';
    return;
  }
  const button = document.getElementById('submit-button');
  button.disabled = true;
  submitStatus.textContent = 'Submitting…';
  try {
    const answer = await postJSON('/api/experiments', request);
    if (answer.status === 201) {
      submitStatus.textContent = `Submitted ${answer.body.runs.length} runs; opening the runs page…`;
      window.location.assign(url(`/runs?experiment=${encodeURIComponent(answer.body.id)}`));
      return;
    }
    if (answer.status === 422) {
      showRefusal(serverProblems(answer.body?.detail), true);
      submitStatus.textContent = 'Nothing was submitted: fix the fields marked.';
    } else {
      submitStatus.textContent = `Not submitted (${answer.status}): ${answer.body?.detail ?? 'the server failed'}`;
    }
  } catch (error) {
    submitStatus.textContent = `The server cannot be reached: ${error.message}`;
  } finally {
    button.disabled = false;
  }
}

// ---- profiles, sweeping, starting values -------------------------------------------------------------------

function showSweep(field) {
  const swept = isSwept(field);
  field.querySelector('.sweep').hidden = !swept;
  const fixed = field.querySelector('.fixed');
  if (fixed && field.dataset.fixed) fixed.hidden = swept;
  if (!swept) return;
  // Start the sweep from the value the field had.
  const control = fixedControl(field);
  const current = control ? (control.type === 'checkbox' ? String(control.checked) : control.value) : '';
  const boxes = field.querySelectorAll('.sweep input[type="checkbox"]');
  if (boxes.length && ![...boxes].some((box) => box.checked)) {
    boxes.forEach((box) => { box.checked = box.value === current; });
  }
  const text = field.querySelector('.sweep input[type="text"]');
  if (text && !text.value) text.value = current;
}

function setValue(field, value) {
  const control = fixedControl(field);
  if (!control) return;
  if (control.type === 'checkbox') control.checked = Boolean(value);
  else control.value = value ?? '';
}

function setSweep(field, values) {
  const toggle = field.querySelector('.sweep-toggle');
  if (!toggle) return;
  toggle.checked = true;
  const strings = values.map(String);
  field.querySelectorAll('.sweep input[type="checkbox"]').forEach((box) => { box.checked = strings.includes(box.value); });
  const text = field.querySelector('.sweep input[type="text"]');
  if (text) text.value = strings.join(', ');
  showSweep(field);
}

function optionField(name, option) {
  const id = `o-${name}`;
  const hint = [option.description, option.kind === 'int' && option.min !== null && option.max !== null ? `${option.min} to ${option.max}` : '']
    .filter(Boolean).join('; ');
  const control = option.kind === 'choice'
    ? h('select', { id, 'aria-describedby': `h-${id} e-${id}` }, h('option', { value: '' }, 'not set'),
      option.choices.map((choice) => h('option', { value: choice }, choice)))
    : h('input', { id, type: option.kind === 'int' ? 'number' : 'text', min: option.min ?? null, max: option.max ?? null,
      autocomplete: 'off', placeholder: 'not set', 'aria-describedby': `h-${id} e-${id}` });
  return h('div', { class: 'field', dataset: { field: name, kind: option.kind } },
    h('label', { for: id }, `--${name}`), h('p', { class: 'hint', id: `h-${id}` }, hint), control,
    h('p', { class: 'error', id: `e-${id}`, hidden: true }));
}

function showProfile(resources = {}) {
  const profile = profiles.get(profileSelect.value);
  if (!profile) return;
  replaceChildren(partitionSelect, Object.entries(profile.partitions).map(([name, partition]) => h('option', { value: name },
    `${name}: up to ${partition.max_nodes} nodes, ${partition.gpus_per_node} GPUs per node, ${partition.max_time}` +
    (partition.gpu_memory_gib ? `, ${partition.gpu_memory_gib} GiB per GPU` : ''))));
  partitionSelect.value = resources.partition ?? profile.default_partition;
  document.getElementById('h-r-partition').textContent = profile.description || `Partitions of profile ${profile.name}.`;
  const options = Object.entries(profile.sbatch_options ?? {});
  optionsBox.hidden = !options.length;
  replaceChildren(optionsBox.querySelector('.fields'), options.map(([name, option]) => optionField(name, option)));
  for (const [name, value] of Object.entries(resources.sbatch_options ?? {})) {
    const control = document.getElementById(`o-${name}`);
    if (control) control.value = value;
  }
}

async function loadProfiles(resources) {
  const listed = await getJSON('/api/profiles');
  profiles = new Map(listed.data.map((profile) => [profile.name, profile]));
  replaceChildren(profileSelect, listed.data.map((profile) => h('option', { value: profile.name },
    profile.description ? `${profile.name}: ${profile.description}` : profile.name)));
  profileSelect.dataset.default = listed.default;
  profileSelect.value = resources.profile && profiles.has(resources.profile) ? resources.profile : listed.default;
  showProfile(resources);
}

// ---- inference: the checkpoint and the prompts file ------------------------------------------------------

const inferenceInputs = document.getElementById('inference-inputs');
const checkpointSelect = document.getElementById('i-checkpoint_run');
const promptsInput = document.getElementById('i-prompts');
const promptsStatus = document.getElementById('i-prompts-status');
const MAX_PROMPTS_BYTES = 64 * 1024;
let promptsText = '';

function showInference() {
  inferenceInputs.hidden = document.getElementById('f-kind')?.value !== 'inference';
}

async function readPrompts() {
  const file = promptsInput.files[0];
  promptsText = '';
  if (!file) {
    promptsStatus.textContent = '';
  } else if (file.size > MAX_PROMPTS_BYTES) {
    promptsStatus.textContent = `${file.name} is larger than ${MAX_PROMPTS_BYTES / 1024} KiB: it cannot be sent.`;
  } else {
    promptsText = await file.text();
    const count = promptsText.split(/\r?\n/).filter((line) => line.trim()).length;
    promptsStatus.textContent = `${file.name}: ${count} ${count === 1 ? 'prompt' : 'prompts'}.`;
  }
  schedulePreview();
}

function fill(start) {
  form.elements.name.value = start.name ?? '';
  if (start.inference) {
    // A clone keeps its source's prompts until another file is chosen.
    promptsText = start.inference.prompts ?? '';
    if (start.inference.checkpoint_run) checkpointSelect.value = start.inference.checkpoint_run;
    if (promptsText) promptsStatus.textContent = 'The prompts of the experiment this one starts from.';
  }
  if (start.on_invalid) form.elements.on_invalid.value = start.on_invalid;
  for (const [name, value] of Object.entries(start.base ?? {})) {
    const field = fieldByName(name, 'base');
    if (field) setValue(field, value);
  }
  for (const [name, value] of Object.entries(start.resources ?? {})) {
    const field = fieldByName(name, 'resources');
    if (field) setValue(field, value);
  }
  for (const [name, values] of Object.entries(start.grid ?? {})) {
    const field = fieldByName(name);
    if (field && Array.isArray(values)) setSweep(field, values);
  }
}

async function main() {
  const start = JSON.parse(document.getElementById('start-request').textContent);
  fill(start);
  form.addEventListener('input', (event) => {
    if (event.target !== previewRun) schedulePreview();
  });
  showInference();
  form.addEventListener('change', (event) => {
    if (event.target === promptsInput) {
      readPrompts();
      return;
    }
    if (event.target.id === 'f-kind') showInference();
    if (event.target.classList.contains('sweep-toggle')) showSweep(event.target.closest('.field'));
    if (event.target === profileSelect) showProfile();
    if (event.target === previewRun) {
      previewIndex = Number(previewRun.value);
      preview();
      return;
    }
    schedulePreview();
  });
  form.addEventListener('submit', submit);
  document.getElementById('preview-button').addEventListener('click', () => preview());
  try {
    await loadProfiles(start.resources ?? {});
  } catch (error) {
    previewStatus.textContent = `The cluster profiles cannot be read: ${error.message}`;
  }
  preview();
}

main();

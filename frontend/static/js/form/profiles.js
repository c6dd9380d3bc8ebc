// Where the experiment runs: the cluster profile, its partitions, and the further sbatch options it allows, each
// drawn from the server's list of profiles.

import { getJSON } from '../api.js';
import { h, replaceChildren } from '../dom.js';
import { parse } from './fields.js';
import { problem } from './problems.js';

const profileSelect = document.getElementById('r-profile');
const partitionSelect = document.getElementById('r-partition');
const optionsBox = document.getElementById('sbatch-options');
let profiles = new Map(); // name -> the profile as /api/profiles gives it

export const isProfileSelect = (element) => element === profileSelect;

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

// The chosen profile's partitions and options, set to `resources` where it names them.
export function showProfile(resources = {}) {
  const profile = profiles.get(profileSelect.value);
  if (!profile) return;
  replaceChildren(partitionSelect, Object.entries(profile.partitions).map(([name, partition]) => h('option', { value: name },
    `${name}: up to ${partition.max_nodes} nodes, ${partition.gpus_per_node} GPUs per node, ${partition.max_time}` +
    (partition.gpu_memory_gib ? `, ${partition.gpu_memory_gib} GiB per GPU` : ''))));
  partitionSelect.value = resources.partition ?? profile.default_partition;
  document.getElementById('h-r-partition').textContent = profile.description || `Partitions of profile ${profile.name}.`;
  showProgramRoots(profile.program_roots ?? []);
  const options = Object.entries(profile.sbatch_options ?? {});
  optionsBox.hidden = !options.length;
  replaceChildren(optionsBox.querySelector('.fields'), options.map(([name, option]) => optionField(name, option)));
  for (const [name, value] of Object.entries(resources.sbatch_options ?? {})) {
    const control = document.getElementById(`o-${name}`);
    if (control) control.value = value;
  }
}

// Where a program may run from on this profile, after the working directory's own hint ("~": the user's home).
function showProgramRoots(roots) {
  const hint = document.getElementById('h-p-workdir');
  if (!hint) return;
  hint.dataset.hint ??= hint.textContent;
  const named = roots.map((root) => (root === '~' ? '~ (your home directory)' : root));
  hint.textContent = hint.dataset.hint + (named.length ? `. On ${profileSelect.value}, under: ${named.join(', ')}.` : '');
}

export async function loadProfiles(resources) {
  const listed = await getJSON('/api/profiles');
  profiles = new Map(listed.data.map((profile) => [profile.name, profile]));
  replaceChildren(profileSelect, listed.data.map((profile) => h('option', { value: profile.name },
    profile.description ? `${profile.name}: ${profile.description}` : profile.name)));
  profileSelect.dataset.default = listed.default;
  profileSelect.value = resources.profile && profiles.has(resources.profile) ? resources.profile : listed.default;
  showProfile(resources);
}

// The chosen partition: its name, and the memory of each of its GPUs where the profile declares it.
export function chosenPartition() {
  const partition = profiles.get(profileSelect.value)?.partitions?.[partitionSelect.value];
  return { name: partitionSelect.value, gpuMemoryGib: partition?.gpu_memory_gib };
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

// The profile, partition and options into `resources` where they differ from the defaults; problems into `errors`.
export function readPlace(resources, errors) {
  const profile = profiles.get(profileSelect.value);
  if (profileSelect.value && profileSelect.value !== profileSelect.dataset.default) resources.profile = profileSelect.value;
  if (profile && partitionSelect.value && partitionSelect.value !== profile.default_partition) {
    resources.partition = partitionSelect.value;
  }
  const options = readOptions(errors);
  if (Object.keys(options).length) resources.sbatch_options = options;
}

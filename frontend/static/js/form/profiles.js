// @ts-check
// Where the experiment runs: the cluster profile, its partitions, and the further sbatch options it allows, each
// drawn from the server's list of profiles.

import { getJSON } from '../api.js';
import { byId, h, one, optionalById, replaceChildren } from '../dom.js';
import { parse } from './fields.js';
import { problem } from './problems.js';

/** @typedef {import('../types/api.js').ClusterProfile} ClusterProfile */
/** @typedef {import('../types/api.js').ProfilesPublic} ProfilesPublic */
/** @typedef {import('../types/api.js').SbatchOption} SbatchOption */
/** @typedef {import('./problems.js').Problem} Problem */
/** The request's resources: the place and what the value fields fix there. @typedef {Record<string, any>} Resources */

/**
 * An sbatch option's field: its label, hint, control and error line.
 * @param {string} name
 * @param {SbatchOption} option
 */
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

/**
 * The place's inputs in `root` (the form's page), holding the server's list of profiles once loaded.
 * @param {ParentNode} root
 */
export function placeInputs(root) {
  /** @type {HTMLSelectElement} */
  const profileSelect = byId(root, 'r-profile');
  /** @type {HTMLSelectElement} */
  const partitionSelect = byId(root, 'r-partition');
  const optionsBox = byId(root, 'sbatch-options');
  /** @type {Map<string, ClusterProfile>} name -> the profile as /api/profiles gives it */
  let profiles = new Map();

  /**
   * Where a program may run from on this profile, after the working directory's own hint ("~": the user's home).
   * @param {string[]} roots
   */
  function showProgramRoots(roots) {
    const hint = optionalById(root, 'h-p-workdir');
    if (!hint) return;
    hint.dataset.hint ??= hint.textContent ?? '';
    const named = roots.map((dir) => (dir === '~' ? '~ (your home directory)' : dir));
    hint.textContent = hint.dataset.hint + (named.length ? `. On ${profileSelect.value}, under: ${named.join(', ')}.` : '');
  }

  /**
   * The chosen profile's partitions and options, set to `resources` where it names them.
   * @param {Resources} [resources]
   */
  function show(resources = {}) {
    const profile = profiles.get(profileSelect.value);
    if (!profile) return;
    replaceChildren(partitionSelect, Object.entries(profile.partitions).map(([name, partition]) => h('option', { value: name },
      `${name}: up to ${partition.max_nodes} nodes, ${partition.gpus_per_node} GPUs per node, ${partition.max_time}` +
      (partition.gpu_memory_gib ? `, ${partition.gpu_memory_gib} GiB per GPU` : ''))));
    partitionSelect.value = resources.partition ?? profile.default_partition;
    byId(root, 'h-r-partition').textContent = profile.description || `Partitions of profile ${profile.name}.`;
    showProgramRoots(profile.program_roots);
    const options = Object.entries(profile.sbatch_options);
    optionsBox.hidden = !options.length;
    replaceChildren(one(optionsBox, '.fields'), options.map(([name, option]) => optionField(name, option)));
    for (const [name, value] of Object.entries(resources.sbatch_options ?? {})) {
      const control = /** @type {HTMLInputElement | null} */ (optionalById(root, `o-${name}`));
      if (control) control.value = String(value);
    }
  }

  /** @param {Problem[]} errors */
  function readOptions(errors) {
    /** @type {Record<string, string | number>} */
    const options = {};
    for (const field of /** @type {NodeListOf<HTMLElement>} */ (optionsBox.querySelectorAll('.field'))) {
      const control = /** @type {HTMLInputElement | HTMLSelectElement} */ (one(field, 'input, select'));
      const text = control.value.trim();
      const name = field.dataset.field ?? '';
      if (!text) continue;
      if (field.dataset.kind === 'int') {
        const parsed = parse({ kind: 'int', min: null, max: null, xmin: null }, text);
        if (parsed.error) errors.push(problem(`e-o-${name}`, control.id, `--${name}`, parsed.error));
        else options[name] = parsed.value;
      } else {
        options[name] = text;
      }
    }
    return options;
  }

  return {
    show,

    /** @param {EventTarget | null} element */
    isProfileSelect: (element) => element === profileSelect,

    /**
     * The server's profiles into the menu, the one `resources` names chosen (else the default).
     * @param {Resources} resources
     */
    async load(resources) {
      /** @type {ProfilesPublic} */
      const listed = await getJSON('/api/profiles');
      profiles = new Map(listed.data.map((profile) => [profile.name, profile]));
      replaceChildren(profileSelect, listed.data.map((profile) => h('option', { value: profile.name },
        profile.description ? `${profile.name}: ${profile.description}` : profile.name)));
      profileSelect.dataset.default = listed.default;
      profileSelect.value = resources.profile && profiles.has(resources.profile) ? resources.profile : listed.default;
      show(resources);
    },

    /** The chosen partition: its name, and the memory of each of its GPUs where the profile declares it. */
    chosenPartition() {
      const partition = profiles.get(profileSelect.value)?.partitions[partitionSelect.value];
      return { name: partitionSelect.value, gpuMemoryGib: partition?.gpu_memory_gib };
    },

    /**
     * The profile, partition and options into `resources` where they differ from the defaults; problems into `errors`.
     * @param {Resources} resources
     * @param {Problem[]} errors
     */
    read(resources, errors) {
      const profile = profiles.get(profileSelect.value);
      if (profileSelect.value && profileSelect.value !== profileSelect.dataset.default) resources.profile = profileSelect.value;
      if (profile && partitionSelect.value && partitionSelect.value !== profile.default_partition) {
        resources.partition = partitionSelect.value;
      }
      const options = readOptions(errors);
      if (Object.keys(options).length) resources.sbatch_options = options;
    },
  };
}

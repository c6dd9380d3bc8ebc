"""The New experiment form's fields, described from the request models: a new spec field appears by itself."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from contract.program import (
    ENV_NAME,
    PARAM_NAME,
    PARAM_PREFIX,
    PYTHON_WORD,
    Launcher,
    ParamsStyle,
    ProgramCwd,
    ProgramSpec,
)
from contract.spec import STRATEGY_FIELDS, RunKind, RunSpec, kind_reads
from server.models import ExperimentCreate, Resources, SpecBase, SpecGrid

# Groups only order the form; a spec field named in none of them still appears, under "Other settings".
_GROUPS: dict[str, tuple[str, ...]] = {
    "Model and data": ("kind", "model", "dataset", "depth", "width", "heads", "context"),
    "Parallelism": ("strategy", "nodes", "gpus", "tp_degree", "fsdp_sharding", "pp_schedule", "microbatches"),
    "Training": (
        "epochs",
        "steps_per_epoch",
        "global_batch_size",
        "grad_accum_steps",
        "lr",
        "precision",
        "compile",
        "activation_checkpointing",
        "seed",
    ),
    # The target itself is the experiment's (ExperimentCreate.target), entered in this group by hand (TARGET_GROUP).
    "Time to accuracy": ("stop_at_target", "lr_scaling", "warmup_epochs"),
    "Checkpoints and logging": ("checkpoint_every", "step_log_every"),
    "Inference": ("max_new_tokens", "temperature", "top_k"),
}
_OTHER_GROUP = "Other settings"
# The group whose fieldset also holds the experiment's target (metric, direction, bound): the page's template puts
# those inputs there, since the target is no spec field.
TARGET_GROUP = "Time to accuracy"
_LABELS = {
    "gpus": "GPUs",
    "lr": "Learning rate",
    "dataset": "Data set",
    "tp_degree": "Tensor-parallel degree",
    "pp_schedule": "Pipeline schedule",
    "fsdp_sharding": "FSDP sharding",
    "grad_accum_steps": "Gradient accumulation steps",
    "time_limit": "Time limit",
    "max_concurrent": "Runs in Slurm at once, at most",
    "stop_at_target": "Stop at the target",
    "lr_scaling": "Learning-rate rule",
    "warmup_epochs": "Warm-up epochs",
}
# Resources with widgets of their own (they depend on the chosen profile), or shown among the spec fields.
_RESOURCES_BY_HAND = frozenset({"profile", "partition", "sbatch_options"})
# Spec fields with widgets of their own: a program is a whole object, entered in the form's Program group.
_SPEC_BY_HAND = frozenset({"program"})


@dataclass(frozen=True)
class FormField:
    """One input of the form, described from a pydantic model's JSON schema."""

    name: str
    label: str
    kind: Literal["choice", "int", "float", "bool", "text"]
    default: Any
    optional: bool
    description: str
    choices: tuple[str, ...] = ()
    minimum: float | None = None
    maximum: float | None = None
    exclusive_minimum: float | None = None
    fixed_in: str | None = None  # where one value goes: "base" or "resources"; None: it can only be swept
    sweepable: bool = False
    # The kinds of run that read it (contract.spec.kind_reads; every resource): the form shows it for those, and
    # leaves it out of a program's request, which the server would refuse with the built-in worker's settings.
    kinds: tuple[str, ...] = tuple(RunKind)
    # The strategies that read it (contract.spec.STRATEGY_FIELDS); empty: every one. The form shows it for those.
    strategies: tuple[str, ...] = ()

    @property
    def for_program(self) -> bool:
        return RunKind.program in self.kinds

    @property
    def bounds(self) -> str:
        """The allowed range, in words."""
        if self.minimum is not None and self.maximum is not None:
            return f"{_number(self.minimum)} to {_number(self.maximum)}"
        parts = []
        if self.minimum is not None:
            parts.append(f"at least {_number(self.minimum)}")
        if self.exclusive_minimum is not None:
            parts.append(f"more than {_number(self.exclusive_minimum)}")
        if self.maximum is not None:
            parts.append(f"at most {_number(self.maximum)}")
        return ", ".join(parts)


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:g}"


def _label(name: str) -> str:
    return _LABELS.get(name) or name.replace("_", " ").capitalize()


def _form_field(name: str, schema: dict[str, Any], defs: dict[str, Any], **where: Any) -> FormField:
    options = [option for option in schema.get("anyOf", [schema]) if option.get("type") != "null"]
    optional = len(options) < len(schema.get("anyOf", [schema]))
    shape = options[0] if options else {}
    if "$ref" in schema or "$ref" in shape:
        shape = defs[(schema.get("$ref") or shape["$ref"]).rsplit("/", 1)[1]]
    kinds: dict[str, Literal["int", "float", "bool", "text"]] = {
        "integer": "int",
        "number": "float",
        "boolean": "bool",
        "string": "text",
    }
    kind: Literal["choice", "int", "float", "bool", "text"] = (
        "choice" if "enum" in shape else kinds.get(shape.get("type", "string"), "text")
    )
    return FormField(
        name=name,
        label=_label(name),
        kind=kind,
        default=schema.get("default"),
        optional=optional,
        description=schema.get("description") or shape.get("description") or "",
        choices=tuple(str(choice) for choice in shape.get("enum", ())),
        minimum=shape.get("minimum"),
        maximum=shape.get("maximum"),
        exclusive_minimum=shape.get("exclusiveMinimum"),
        **where,
    )


def spec_fields() -> list[tuple[str, list[FormField]]]:
    """Every run spec field, grouped: a new field of RunSpec appears in the form by itself."""
    schema = RunSpec.model_json_schema()
    fields = {}
    for name, prop in schema["properties"].items():
        if name not in SpecBase.model_fields and name not in SpecGrid.model_fields:
            continue  # set by the server (an inference run's checkpoint), not in the form
        if name in _SPEC_BY_HAND:
            continue
        fixed_in = "base" if name in SpecBase.model_fields else "resources" if name in Resources.model_fields else None
        fields[name] = _form_field(
            name,
            prop,
            schema.get("$defs", {}),
            fixed_in=fixed_in,
            sweepable=name in SpecGrid.model_fields,
            kinds=tuple(kind for kind in RunKind if kind_reads(kind, name)),
            strategies=tuple(sorted(STRATEGY_FIELDS.get(name, ()))),
        )
    groups = [(title, [fields.pop(name) for name in names if name in fields]) for title, names in _GROUPS.items()]
    groups.append((_OTHER_GROUP, list(fields.values())))
    return [(title, members) for title, members in groups if members]


def resource_fields() -> list[FormField]:
    """The experiment's resources that take one plain value (the profile's own widgets aside)."""
    schema = Resources.model_json_schema()
    in_spec = set(RunSpec.model_fields)
    return [
        _form_field(name, prop, schema.get("$defs", {}), fixed_in="resources")
        for name, prop in schema["properties"].items()
        if name not in _RESOURCES_BY_HAND and name not in in_spec
    ]


@dataclass(frozen=True)
class ProgramInput:
    """One input of the form's Program group: a part of ProgramSpec, typed the way people write it."""

    name: str  # the ProgramSpec field it fills
    label: str
    hint: str
    control: Literal["text", "lines", "choice"]  # lines: a text area, one item per line
    choices: tuple[str, ...] = ()
    required: bool = False
    placeholder: str = ""
    pattern: str = ""  # what a name in it must match, as the API checks it (env and params)


def program_inputs() -> list[ProgramInput]:
    """The Program group: how each part of a program is typed, with the API's own description of it."""
    about = {name: info.description or "" for name, info in ProgramSpec.model_fields.items()}
    return [
        ProgramInput(
            "command",
            "Command",
            "Split into words as a shell would (quotes keep spaces within a word), but never run by a shell; "
            f"'{PYTHON_WORD}' as the first word is the profile's Python. The words are shown below as they will run.",
            "text",
            required=True,
            placeholder=f"{PYTHON_WORD} train.py --epochs 3",
        ),
        ProgramInput("workdir", "Working directory", about["workdir"], "text", required=True, placeholder="/home/…"),
        ProgramInput("cwd", "Starts in", about["cwd"], "choice", choices=tuple(ProgramCwd)),
        ProgramInput("launcher", "Launcher", about["launcher"], "choice", choices=tuple(Launcher)),
        ProgramInput("image", "Container image", f"{about['image']} (empty: the profile's)", "text"),
        ProgramInput(
            "env",
            "Environment",
            f"One NAME=value per line: {about['env']}; the value is taken as it is, spaces included.",
            "lines",
            placeholder="OMP_NUM_THREADS=1",
            pattern=ENV_NAME,
        ),
        ProgramInput(
            "params",
            "Parameters",
            "One per line, name = value; several values separated by commas sweep it, one run each "
            f'(the grid\'s {PARAM_PREFIX}name). Numbers and true/false are sent as such, "quoted" text as text; '
            f"{about['params']}.",
            "lines",
            placeholder="lr = 0.05, 0.1",
            pattern=PARAM_NAME,
        ),
        ProgramInput(
            "params_style", "How parameters are passed", about["params_style"], "choice", choices=tuple(ParamsStyle)
        ),
        ProgramInput(
            "batch",
            "Batch per step",
            "What it counts, then the size or the parameter that holds it: `global 256` (all processes together, "
            "the same on every GPU count), `process batch_size` (each process's, from params.batch_size). Empty: not "
            "declared, and scaling says it does not know whether every run trains the same global batch.",
            "text",
            placeholder="process batch_size",
            pattern=PARAM_NAME,
        ),
    ]


def choices_of(model: type[ExperimentCreate], name: str) -> list[str]:
    prop = model.model_json_schema()["properties"][name]
    return [str(choice) for choice in prop.get("enum", ())]

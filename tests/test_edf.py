"""edf.toml uses only the keys the CSCS container engine documents, with their types, for the worker image."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

import pytest

EDF = Path(__file__).resolve().parent.parent / "edf.toml"

# The container engine's EDF reference: top-level entries and their TOML types.
ENTRIES: dict[str, tuple[type, ...]] = {
    "base_environment": (str, list),
    "image": (str,),
    "workdir": (str,),
    "entrypoint": (bool,),
    "writable": (bool,),
    "mounts": (list,),
    "env": (dict,),
    "annotations": (dict,),
}
# The hooks its annotations control, and each hook's documented settings.
HOOKS = {
    "cxi": {"enabled"},
    "aws_ofi_nccl": {"enabled", "variant"},
    "ssh": {"enabled", "authorize_ssh_key", "port"},
    "nvidia_cuda_mps": {"enabled"},
}
OFI_VARIANTS = {"cuda11", "cuda12", "rocm5", "rocm6"}


@pytest.fixture(scope="module")
def edf() -> dict[str, Any]:
    with EDF.open("rb") as handle:
        return tomllib.load(handle)


def flat(table: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Dotted TOML keys (a.b.c = v) come back as nested tables: flatten them to the names the engine reads."""
    found: dict[str, Any] = {}
    for key, value in table.items():
        if isinstance(value, dict):
            found.update(flat(value, f"{prefix}{key}."))
        else:
            found[f"{prefix}{key}"] = value
    return found


def test_every_entry_is_documented_with_its_type(edf):
    assert set(edf) <= set(ENTRIES), set(edf) - set(ENTRIES)
    for key, value in edf.items():
        assert isinstance(value, ENTRIES[key]), (key, value)


def test_the_worker_image_runs_the_batch_scripts_command_with_the_run_directory_mounted(edf):
    assert edf["image"].endswith(".sqsh")  # made by containers/export-squashfs
    # The rendered srun line names the command itself; the image's entrypoint must not run before it.
    assert edf["entrypoint"] is False
    assert edf["writable"] is True  # the worker writes checkpoints; hooks need it too
    for mount in edf["mounts"]:
        source, destination, *flags = mount.split(":")
        assert source.startswith("/") and destination.startswith("/"), mount
        assert all(flag in {"ro", "rw", "private", "sqsh"} for part in flags for flag in part.split("+")), mount
    scratch = {mount.split(":")[1] for mount in edf["mounts"]}
    assert edf["workdir"] in scratch


def test_the_environment_sets_nccl_and_names_the_image(edf):
    env = edf["env"]
    assert all(isinstance(value, str) for value in env.values()), "the engine takes strings only"
    assert env["NCCL_DEBUG"] == "WARN"
    assert env["PYTHONUNBUFFERED"] == "1"
    assert env["SCALELAB_IMAGE"] == edf["image"]


def test_the_network_hook_annotations_are_documented_ones(edf):
    annotations = flat(edf["annotations"])
    for name, value in annotations.items():
        assert isinstance(value, str), f"{name}: annotation values are strings"
        domain, hooks, hook, setting = name.split(".")
        assert (domain, hooks) == ("com", "hooks") and setting in HOOKS[hook], name
    assert annotations["com.hooks.aws_ofi_nccl.enabled"] == "true"
    assert annotations["com.hooks.aws_ofi_nccl.variant"] in OFI_VARIANTS

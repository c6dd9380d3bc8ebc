"""Cluster profiles: the shipped ones load, and a mistake in one is refused with the file and field named."""

from __future__ import annotations

from pathlib import Path

import pytest

from server.profiles import (
    BUILTIN_DIR,
    OptionKind,
    ProfileError,
    SbatchOption,
    load_catalog,
    load_profile,
    load_profiles,
)

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "profiles"

VALID = """
name = "{name}"
default_partition = "gpu"
[partitions.gpu]
max_nodes = 2
gpus_per_node = 4
max_time = "01:00:00"
"""


def write(directory: Path, name: str, text: str) -> Path:
    path = directory / f"{name}.toml"
    path.write_text(text)
    return path


@pytest.mark.parametrize("path", sorted([*BUILTIN_DIR.glob("*.toml"), *EXAMPLES.glob("*.toml")]), ids=lambda p: p.stem)
def test_shipped_profiles_load(path):
    assert load_profile(path).name == path.stem


def test_examples_cover_every_container_runtime():
    runtimes = {load_profile(path).container.runtime.value for path in EXAMPLES.glob("*.toml")}
    runtimes |= {load_profile(BUILTIN_DIR / "local.toml").container.runtime.value}
    assert runtimes == {"none", "podman", "pyxis", "cscs", "apptainer"}


def test_the_operators_profiles_join_and_replace_the_builtin_ones(tmp_path):
    write(tmp_path, "cluster", VALID.format(name="cluster"))
    write(tmp_path, "local", VALID.format(name="local"))
    profiles = load_profiles(tmp_path)
    assert set(profiles) == {"cluster", "local"}
    assert set(profiles["local"].partitions) == {"gpu"}


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ('[sbatch_options.output]\nkind = "word"', "may not offer output: scalelab sets those itself"),
        ('[container]\nruntime = "pyxis"', "runtime pyxis needs container.image"),
        ('[container]\nruntime = "cscs"', "runtime cscs needs container.edf"),
        ('[container]\nruntime = "docker"', "container.runtime"),
        ('[env]\n"BAD NAME" = "x"', "env.BAD NAME"),
        ('[container]\nmounts = ["/data", "$(reboot)"]', "container.mounts.1"),
        ('[sbatch_options.qos]\nkind = "choice"', "kind 'choice' needs them"),
        ('[sbatch_options.mem]\nkind = "word"\n[sbatch_options."--wrap"]\nkind = "word"', "sbatch_options.--wrap"),
    ],
)
def test_mistakes_are_refused_with_the_file_and_field(tmp_path, extra, message):
    path = write(tmp_path, "cluster", VALID.format(name="cluster") + extra + "\n")
    with pytest.raises(ProfileError) as caught:
        load_profile(path)
    assert str(path) in str(caught.value) and message in str(caught.value)


@pytest.mark.parametrize(
    ("top", "field"),
    [('modules = ["ok", "$(reboot)"]', "modules.1"), ('worker_python = "relative/python"', "worker_python")],
)
def test_top_level_mistakes_are_named(tmp_path, top, field):
    path = write(tmp_path, "cluster", top + "\n" + VALID.format(name="cluster"))
    with pytest.raises(ProfileError, match=field):
        load_profile(path)


def test_a_profile_is_named_after_its_file(tmp_path):
    path = write(tmp_path, "cluster", VALID.format(name="other"))
    with pytest.raises(ProfileError, match="name it after its file, 'cluster'"):
        load_profile(path)


def test_a_default_partition_must_exist(tmp_path):
    path = write(tmp_path, "cluster", VALID.format(name="cluster").replace('"gpu"\n[', '"cpu"\n[', 1))
    with pytest.raises(ProfileError, match="default_partition 'cpu' is not among the partitions"):
        load_profile(path)


def test_broken_toml_and_missing_directories_are_named(tmp_path):
    with pytest.raises(ProfileError, match="is not valid TOML"):
        load_profile(write(tmp_path, "cluster", "name = "))
    with pytest.raises(ProfileError, match="does not exist"):
        load_profiles(tmp_path / "nowhere")


def test_the_default_profile_must_exist():
    assert load_catalog(None, "local").default == "local"
    with pytest.raises(ProfileError, match="the default cluster profile 'big'"):
        load_catalog(None, "big")


@pytest.mark.parametrize(
    ("option", "value", "accepted"),
    [
        (SbatchOption(kind=OptionKind.int, min=0, max=10), 3, "3"),
        (SbatchOption(kind=OptionKind.int, min=0, max=10), "11", None),
        (SbatchOption(kind=OptionKind.int), "1; reboot", None),
        (SbatchOption(kind=OptionKind.time), "01:00:00", "01:00:00"),
        (SbatchOption(kind=OptionKind.time), "1h", None),
        (SbatchOption(kind=OptionKind.choice, choices=["a100", "h100"]), "h100", "h100"),
        (SbatchOption(kind=OptionKind.choice, choices=["a100", "h100"]), "v100", None),
        (SbatchOption(kind=OptionKind.word), "64G", "64G"),
        (SbatchOption(kind=OptionKind.word), "64G --wrap=x", None),
        (SbatchOption(kind=OptionKind.word), "$(id)", None),
        (SbatchOption(kind=OptionKind.memory), "64G", "64G"),
        (SbatchOption(kind=OptionKind.memory), "--help", None),
        (SbatchOption(kind=OptionKind.memory), "0", None),
        (SbatchOption(kind=OptionKind.int), "\uff11", None),  # a fullwidth 1: a digit, but not for sbatch
    ],
)
def test_sbatch_option_values_are_typed(option, value, accepted):
    if accepted is None:
        with pytest.raises(ValueError, match=r"must be|a time limit looks like"):
            option.check(value)
    else:
        assert option.check(value) == accepted

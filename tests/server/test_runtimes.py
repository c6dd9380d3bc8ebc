"""Each container runtime's answers, asked of its class alone: no profile file, no batch script, no subprocess
(the rendered scripts are checked whole by test_render's golden files and shellcheck)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import pytest

from contract.rundir import DIGEST_VAR, IMAGE_VAR
from server.runtimes import ContainerRuntime, DigestQuery, Runtime, Task, TaskWords, image_starting, runtime_for


@dataclass(frozen=True)
class Settings:
    """A profile's container table, as the runtimes read it."""

    image: str | None = None
    edf: str | None = None
    mounts: Sequence[str] = field(default_factory=list)
    extra_args: Sequence[str] = field(default_factory=list)


def task(uses_gpus: bool = True, env: Sequence[str] = ()) -> Task:
    command = [["sh", "-c", 'exec "$@"'], ["scalelab-task", "/home/alice/proj"], ["python3", "train.py"]]
    return Task(command, "/images/worker.sif", "/runs/r1", "/home/alice/proj", list(env), uses_gpus)


# (in a container, starts the image the script names, pinnable)
CAPABILITIES = {
    Runtime.none: (False, False, False),
    Runtime.podman: (True, True, True),
    Runtime.pyxis: (True, True, True),
    Runtime.cscs: (True, False, False),
    Runtime.apptainer: (True, True, True),
}


@pytest.mark.parametrize("runtime", list(Runtime))
def test_every_runtime_a_profile_can_name_has_its_class(runtime: Runtime):
    found = runtime_for(runtime)
    assert isinstance(found, ContainerRuntime)
    assert found.runtime is runtime
    assert (found.in_container, found.starts_image, found.pinnable) == CAPABILITIES[runtime]


def test_an_unknown_runtime_is_refused_with_the_known_ones():
    with pytest.raises(ValueError, match="no container runtime 'docker': scalelab knows none, podman, pyxis"):
        runtime_for("docker")  # type: ignore[arg-type]


def test_only_a_runtime_that_starts_the_named_image_pins_a_run_to_it():
    for runtime in Runtime:
        assert not runtime_for(runtime).pinnable or runtime_for(runtime).starts_image
    assert image_starting() == [Runtime.podman, Runtime.pyxis, Runtime.apptainer]


@pytest.mark.parametrize("runtime", [Runtime.podman, Runtime.pyxis, Runtime.apptainer])
def test_a_runtime_that_starts_an_image_needs_the_profile_to_name_one(runtime: Runtime):
    assert runtime_for(runtime).missing(Settings()) == f"runtime {runtime} needs container.image"
    assert runtime_for(runtime).missing(Settings(image="worker.sif")) is None


def test_cscs_needs_an_environment_definition_and_no_image():
    cscs = runtime_for(Runtime.cscs)
    assert cscs.missing(Settings(image="/images/worker.sqsh")) == (
        "runtime cscs needs container.edf: the environment definition file or name"
    )
    assert cscs.missing(Settings(edf="worker")) is None
    assert runtime_for(Runtime.none).missing(Settings()) is None


def test_the_image_a_run_names():
    profile = Settings(image="/images/worker.sqsh", edf="worker")
    pin = "/images/worker.sqsh@sha256:" + "ab" * 32
    assert runtime_for(Runtime.none).image_named(profile, pin) is None
    # The environment definition names what runs: the profile's image is for the record, and no run pins another.
    assert runtime_for(Runtime.cscs).image_named(profile, pin) == "/images/worker.sqsh"
    assert runtime_for(Runtime.cscs).image_named(Settings(edf="worker"), pin) is None
    for runtime in (Runtime.pyxis, Runtime.apptainer, Runtime.podman):
        assert runtime_for(runtime).image_named(profile, pin) == pin
        assert runtime_for(runtime).image_named(profile, None) == "/images/worker.sqsh"


def test_no_container_runs_the_task_as_it_is():
    words = runtime_for(Runtime.none).task_words(Settings(mounts=["/scratch"]), task())
    assert words == TaskWords([], task().command)


def test_pyxis_starts_each_task_through_srun_options_with_every_directory_mounted_once():
    settings = Settings(image="worker.sqsh", mounts=["/scratch", "/runs/r1"], extra_args=["--container-writable"])
    words = runtime_for(Runtime.pyxis).task_words(settings, task())
    assert words.srun_options == [
        "--container-image=/images/worker.sif",
        "--container-mounts=/runs/r1:/runs/r1,/home/alice/proj:/home/alice/proj,/scratch:/scratch",
        "--container-workdir=/home/alice/proj",
        "--container-writable",
    ]
    assert words.command == task().command


def test_cscs_names_the_environment_definition_alone():
    words = runtime_for(Runtime.cscs).task_words(
        Settings(edf="/capstor/worker.toml", extra_args=["--mpi=pmi2"]), task()
    )
    assert words == TaskWords(["--environment=/capstor/worker.toml", "--mpi=pmi2"], task().command)


@pytest.mark.parametrize("uses_gpus", [True, False])
def test_apptainer_execs_the_image_with_the_gpus_where_the_partition_gives_them(uses_gpus: bool):
    words = runtime_for(Runtime.apptainer).task_words(Settings(image="worker.sif"), task(uses_gpus))
    assert words.srun_options == []
    gpus = [["--nv"]] if uses_gpus else []
    assert words.command == [
        ["apptainer", "exec"],
        *gpus,
        ["--bind=/runs/r1,/home/alice/proj"],
        ["/images/worker.sif", "sh", "-c", 'exec "$@"'],
        *task().command[1:],
    ]


def test_podman_replaces_the_entrypoint_and_passes_slurms_view_and_the_runs_variables_once():
    env = ["NCCL_DEBUG", "OMP_NUM_THREADS", "NCCL_DEBUG"]
    words = runtime_for(Runtime.podman).task_words(Settings(image="worker:1"), task(env=env))
    passed = ["SLURM_*", "MASTER_ADDR", "MASTER_PORT", "PYTHONUNBUFFERED", IMAGE_VAR, DIGEST_VAR]
    assert words.srun_options == []
    assert words.command == [
        ["podman", "run", "--rm", "--network=host"],
        ["--entrypoint=sh"],
        ["--workdir=/home/alice/proj"],
        ["--volume=/runs/r1:/runs/r1"],
        ["--volume=/home/alice/proj:/home/alice/proj"],
        *([f"--env={name}"] for name in [*passed, "NCCL_DEBUG", "OMP_NUM_THREADS"]),
        ["--device=nvidia.com/gpu=all"],
        ["/images/worker.sif", "-c", 'exec "$@"'],
        *task().command[1:],
    ]


def test_only_podman_is_asked_for_the_digest_of_an_image_named_by_a_tag():
    query = runtime_for(Runtime.podman).digest_query("registry.example/worker:1")
    assert query == DigestQuery(
        "Podman tells the digest of the image it has under that name; if it cannot, podman run will say why.",
        ["podman", "image", "inspect", "--format", "{{.Digest}}", "registry.example/worker:1"],
    )
    for runtime in (Runtime.none, Runtime.pyxis, Runtime.cscs, Runtime.apptainer):
        assert runtime_for(runtime).digest_query("registry.example/worker:1") is None


def test_why_no_digest_where_the_reason_is_the_runtimes_own():
    cscs, podman = runtime_for(Runtime.cscs), runtime_for(Runtime.podman)
    assert "the cluster profile does not name it" in (cscs.why_no_digest("/images/worker.sqsh", Settings()) or "")
    assert cscs.why_no_digest("/images/worker.sqsh", Settings(image="/images/worker.sqsh")) is None
    assert podman.why_no_digest("worker:1", Settings(image="worker:1")) == (
        "podman could not tell it when the job started: the job's output says why"
    )
    # A file's or a tag's reason is the image's, not the runtime's: the run page gives it (server.images).
    assert podman.why_no_digest("/images/worker.sif", Settings()) is None
    for runtime in (Runtime.none, Runtime.pyxis, Runtime.apptainer):
        assert runtime_for(runtime).why_no_digest("worker:1", Settings(image="worker:1")) is None

"""Every runtime records the digest of the image a run runs in where it can be known: an image file's sha256 (a SIF,
an enroot squashfs), or the digest an image is named by; the run page says why when it cannot be.

Apptainer, enroot and the CSCS container engine do not run here: the batch script's part about the image runs for
real in bash, on a real file, and the rest of the script is checked by the golden files and shellcheck.
"""

from __future__ import annotations

import hashlib
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from contract.records import StartRecord, parse_metric_line
from contract.spec import RunSpec
from contract.states import RunState
from server.render import BatchJob, render_script
from server.services.submission import pinned_image
from tests.conftest import make_client
from tests.factories import experiment_row, run_row, spec
from tests.server.test_provenance import ran_on
from tests.server.test_render import EXAMPLE_PROFILES, job

IMAGE_COMMENT = "# The worker records the image it runs in, and its digest where the runtime can tell it."
DIGEST = "sha256:" + "0123456789abcdef" * 4
FILE_RUNTIMES = {"apptainer": "worker.sif", "pyxis": "worker.sqsh", "cscs": "worker.sqsh"}


def image_file(tmp_path: Path, name: str) -> tuple[Path, str]:
    """A real image file, and the digest its content has."""
    path = tmp_path / name
    path.write_bytes(b"hsqs" + bytes(range(256)) * 64)
    return path, "sha256:" + hashlib.sha256(path.read_bytes()).hexdigest()


def on_image(runtime: str, named: str, **changes) -> BatchJob:
    """The runtime's example profile, naming `named` (CSCS's environment definition names what runs; the profile
    names the same image for the record)."""
    batch = job(runtime, **changes)
    container = batch.profile.container.model_copy(update={"image": named})
    return BatchJob(**{**batch.__dict__, "profile": batch.profile.model_copy(update={"container": container})})


def image_part(script: str) -> str:
    """The script's lines about the image: from the comment that opens them to the blank line that ends them."""
    lines = script.splitlines()
    start = lines.index(IMAGE_COMMENT)
    return "\n".join(lines[start : lines.index("", start)])


def run_in_bash(part: str) -> subprocess.CompletedProcess[str]:
    """The part as the batch script runs it (its shell options), then what it exported."""
    shown = 'printf "%s|%s\\n" "${SCALELAB_IMAGE:-}" "${SCALELAB_IMAGE_DIGEST:-}"'
    return subprocess.run(["bash", "-c", f"set -euo pipefail\n{part}\n{shown}"], capture_output=True, text=True)


@pytest.mark.parametrize("runtime", sorted(FILE_RUNTIMES))
def test_an_image_files_digest_is_its_sha256_taken_when_the_job_starts(runtime, tmp_path):
    path, digest = image_file(tmp_path, FILE_RUNTIMES[runtime])
    part = image_part(render_script(spec(gpus=2), on_image(runtime, str(path))))
    result = run_in_bash(part)
    assert result.returncode == 0, result.stderr
    assert result.stdout == f"{path}|{digest}\n"
    # The file replaced between two starts of the job (a requeue): the second records what it runs now.
    path.write_bytes(b"another image")
    assert run_in_bash(part).stdout == f"{path}|sha256:{hashlib.sha256(b'another image').hexdigest()}\n"


@pytest.mark.parametrize("runtime", sorted(FILE_RUNTIMES))
def test_an_image_file_that_cannot_be_read_leaves_the_digest_unknown_without_stopping_the_job(runtime, tmp_path):
    missing = tmp_path / FILE_RUNTIMES[runtime]
    result = run_in_bash(image_part(render_script(spec(gpus=2), on_image(runtime, str(missing)))))
    assert result.returncode == 0, result.stderr
    assert result.stdout == f"{missing}|\n"
    assert str(missing) in result.stderr  # sha256sum says why, in the job's output


@pytest.mark.parametrize(
    ("runtime", "image"),
    [
        ("pyxis", f"nvcr.io#nvidia/pytorch@{DIGEST}"),
        ("apptainer", f"docker://ghcr.io/team/worker@{DIGEST}"),
        ("cscs", f"nvcr.io#nvidia/pytorch@{DIGEST}"),
        ("podman", f"localhost/scalelab-worker@{DIGEST}"),
    ],
)
def test_an_image_named_by_its_digest_records_that_digest(runtime, image):
    result = run_in_bash(image_part(render_script(spec(gpus=2), on_image(runtime, image))))
    assert result.returncode == 0, result.stderr
    assert result.stdout == f"{image}|{DIGEST}\n"


@pytest.mark.parametrize(
    ("runtime", "image"),
    [
        ("pyxis", "nvcr.io#nvidia/pytorch:25.01-py3"),
        ("apptainer", "docker://ghcr.io/team/worker:1.2"),
        ("cscs", "nvcr.io#nvidia/pytorch:25.01-py3"),
    ],
)
def test_an_image_named_by_a_tag_on_a_registry_records_no_digest(runtime, image):
    script = render_script(spec(gpus=2), on_image(runtime, image))
    assert "sha256sum" not in script and "podman" not in script
    assert run_in_bash(image_part(script)).stdout == f"{image}|\n"


def test_the_cscs_environment_definition_names_what_runs_and_the_profile_the_image_recorded(tmp_path):
    path, _ = image_file(tmp_path, "worker.sqsh")
    script = render_script(spec(gpus=2), on_image("cscs", str(path), image=f"elsewhere@{DIGEST}"))
    assert "--environment=scalelab" in script and "--container-image" not in script
    assert "elsewhere" not in script  # a CSCS run is not pinned: its environment definition decides
    assert f"export SCALELAB_IMAGE={path}" in script


@pytest.mark.parametrize("runtime", ["apptainer", "pyxis"])
def test_run_again_on_an_image_file_runs_that_file_and_stops_if_it_changed(runtime, tmp_path):
    path, digest = image_file(tmp_path, FILE_RUNTIMES[runtime])
    pinned = pinned_image(ran_on(str(path), digest))
    script = render_script(spec(gpus=2), job(runtime, image=pinned))
    # The runtime is given the file's path: a path with @sha256:... after it names no file.
    assert f"{path}@" not in script.split(IMAGE_COMMENT)[1].split("\n\n", 1)[1]
    assert run_in_bash(image_part(script)).stdout == f"{path}|{digest}\n"

    path.write_bytes(b"rebuilt since")
    result = run_in_bash(image_part(script))
    assert result.returncode != 0 and result.stdout == ""
    assert f"the image file {path} is not the one this run is pinned to ({digest})" in result.stderr


def test_a_programs_start_record_from_the_spec_carries_the_digest(tmp_path):
    path, digest = image_file(tmp_path, "worker.sqsh")
    (tmp_path / "train.py").write_text("")
    program = {"command": ["python", "train.py"], "workdir": str(tmp_path)}
    run_spec = RunSpec.model_validate({"kind": "program", "gpus": 2, "strategy": "ddp", "program": program})
    script = render_script(run_spec, on_image("pyxis", str(path)))
    # Everything before the launch runs: the image's part, the program's directory and the start record.
    head = script.split("# torch.distributed meets")[0]
    result = subprocess.run(["bash", "-c", head], capture_output=True, text=True, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    # The start record, before the probe's lines (the run's directory is not there: it says it cannot tell).
    record = parse_metric_line(next(line for line in result.stdout.splitlines() if '"kind":"start"' in line))
    assert isinstance(record, StartRecord)
    assert (record.image, record.image_digest) == (str(path), digest)


@pytest.fixture
def example_client(settings, local_scheduler) -> Iterator[TestClient]:
    """A server that offers the example profiles, one per runtime."""
    with make_client(settings.model_copy(update={"profiles_dir": EXAMPLE_PROFILES}), local_scheduler) as client:
        yield client


@pytest.mark.parametrize(
    ("image", "profile", "why"),
    [
        ("nvcr.io#nvidia/pytorch:25.01-py3", "pyxis", "named by a tag on a registry"),
        ("/shared/images/scalelab-worker.sif", "apptainer", "sha256 the batch script did not take"),
        ("/capstor/scratch/cscs/alice/scalelab-worker.sqsh", "cscs", "the cluster profile does not name it"),
        ("localhost/scalelab-worker:latest", "podman", "podman could not tell it"),
    ],
)
def test_the_run_page_says_why_the_digest_is_not_known(example_client, session, tmp_path, image, profile, why):
    run = run_row(session, experiment_row(session), tmp_path, state=RunState.running, profile=profile, image=image)
    html = example_client.get(f"/runs/{run.id}").text
    assert 'id="run-image-digest-unknown"' in html, html
    assert why in html


def test_the_run_page_shows_a_known_digest_and_no_excuse(client, session, tmp_path):
    run = run_row(session, experiment_row(session), tmp_path, image="/shared/w.sif", image_digest=DIGEST)
    html = client.get(f"/runs/{run.id}").text
    assert DIGEST in html and "run-image-digest-unknown" not in html

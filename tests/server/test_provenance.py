"""A run records the image, versions and revision it ran with, and "run again" names that image by its digest."""

from __future__ import annotations

import pytest

from contract.records import StartRecord, format_record
from contract.rundir import OUTPUT_FILE
from server.models import Run
from server.render import render_script
from server.runstate import why_not_rerun
from server.runtimes import Runtime
from server.services.ingestion.parsing import ingest
from server.services.submission import RunNotRepeatable, pinned_image
from tests.factories import experiment_row, run_row, spec
from tests.server.test_render import job

DIGEST = "sha256:" + "0123456789abcdef" * 4


def start_line(**provenance: str | None) -> str:
    record = StartRecord(
        world_size=2, nodes=1, device="cpu", backend="gloo", strategy="ddp", torch_version="2.13.0+cpu", hostname="h"
    )
    return format_record(record.model_copy(update=provenance))


def test_the_latest_start_record_sets_the_runs_provenance(session, tmp_path):
    run = run_row(session, experiment_row(session), tmp_path)
    first = {"image": "localhost/scalelab-worker:latest", "image_digest": DIGEST, "worker_version": "0.1.0"}
    (tmp_path / OUTPUT_FILE).write_text(start_line(**first, source_revision="abc") + "\n")
    ingest(session, run)
    session.commit()
    session.refresh(run)
    assert (run.image, run.image_digest, run.worker_version, run.torch_version, run.source_revision) == (
        "localhost/scalelab-worker:latest",
        DIGEST,
        "0.1.0",
        "2.13.0+cpu",
        "abc",
    )
    # A requeued job that started outside any image says so: nothing of the first start lingers.
    with (tmp_path / OUTPUT_FILE).open("a") as output:
        output.write(start_line(worker_version="0.1.0") + "\n")
    ingest(session, run)
    session.commit()
    session.refresh(run)
    assert (run.image, run.image_digest, run.source_revision) == (None, None, None)


def test_an_inference_run_that_recorded_its_digest_can_run_again(session, tmp_path):
    """The worker's inference start record carries the provenance as training's does: "run again" reads it."""
    inference = spec(kind="inference", model="gpt", strategy="single", checkpoint=str(tmp_path / "trained"))
    run = run_row(session, experiment_row(session), tmp_path, run_spec=inference)
    assert (
        why_not_rerun(run, Runtime.podman)
        == f"run {run.id} did not record the digest of an image it ran in: it cannot be pinned"
    )
    (tmp_path / OUTPUT_FILE).write_text(
        start_line(image="localhost/scalelab-worker:latest", image_digest=DIGEST) + "\n"
    )
    ingest(session, run)
    session.commit()
    session.refresh(run)
    assert why_not_rerun(run, Runtime.podman) is None
    assert pinned_image(run) == f"localhost/scalelab-worker@{DIGEST}"


def ran_on(image: str | None, digest: str | None) -> Run:
    return Run(
        id="r1",
        experiment_id="e",
        position=0,
        scheduler="slurm",
        spec={},
        run_dir="/r",
        image=image,
        image_digest=digest,
    )


@pytest.mark.parametrize(
    ("image", "pinned"),
    [
        ("localhost/scalelab-worker:latest", f"localhost/scalelab-worker@{DIGEST}"),
        ("localhost/scalelab-worker", f"localhost/scalelab-worker@{DIGEST}"),
        ("registry:5000/team/worker:1.2", f"registry:5000/team/worker@{DIGEST}"),
        ("registry:5000/team/worker", f"registry:5000/team/worker@{DIGEST}"),
        (f"localhost/scalelab-worker@{DIGEST}", f"localhost/scalelab-worker@{DIGEST}"),
        ("nvcr.io#nvidia/pytorch:25.01-py3", f"nvcr.io#nvidia/pytorch@{DIGEST}"),
    ],
)
def test_the_pinned_image_is_the_name_without_its_tag_at_the_digest(image, pinned):
    assert pinned_image(ran_on(image, DIGEST)) == pinned


@pytest.mark.parametrize(
    ("image", "digest", "message"),
    [
        (None, None, "did not record the digest"),
        ("/shared/images/worker.sqsh", None, "did not record the digest"),
        ("localhost/scalelab-worker:latest", "sha256:short", "cannot be pinned to"),
        ("localhost/x;reboot:latest", DIGEST, "cannot be pinned to"),
    ],
)
def test_an_image_without_a_proper_digest_is_not_pinned(image, digest, message):
    with pytest.raises(RunNotRepeatable, match=message):
        pinned_image(ran_on(image, digest))


@pytest.mark.parametrize("runtime", ["podman", "pyxis", "apptainer"])
def test_a_pinned_image_replaces_the_profiles_image_in_the_batch_script(runtime):
    pinned = f"localhost/scalelab-worker@{DIGEST}"
    script = render_script(spec(gpus=2), job(runtime, image=pinned))
    assert f"export SCALELAB_IMAGE={pinned}" in script
    assert script.count(pinned) >= 2, script  # exported for the record, and started
    assert ":latest" not in script and ".sqsh" not in script and ".sif" not in script


def test_runs_without_an_image_name_none():
    for runtime in ("local", "cscs"):
        assert "SCALELAB_IMAGE" not in render_script(spec(gpus=2), job(runtime, image=f"x@{DIGEST}"))

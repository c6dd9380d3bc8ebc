"""The worker's provenance fields come from what the batch script and the image tell it."""

from __future__ import annotations

from worker import __version__
from worker.provenance import provenance

DIGEST = "sha256:" + "ab" * 32


def test_the_batch_script_and_the_image_name_image_digest_and_revision():
    found = provenance(
        {
            "SCALELAB_IMAGE": "localhost/scalelab-worker:latest",
            "SCALELAB_IMAGE_DIGEST": DIGEST,
            "SCALELAB_SOURCE_REVISION": "cead188",
        }
    )
    assert found == {
        "worker_version": __version__,
        "image": "localhost/scalelab-worker:latest",
        "image_digest": DIGEST,
        "source_revision": "cead188",
    }


def test_an_image_named_by_its_digest_carries_it():
    found = provenance({"SCALELAB_IMAGE": f"localhost/scalelab-worker@{DIGEST}"})
    assert found["image_digest"] == DIGEST


def test_outside_a_container_only_the_version_is_known():
    # An empty digest is what the batch script passes when the runtime could not tell it.
    assert provenance({"SCALELAB_IMAGE_DIGEST": ""}) == {
        "worker_version": __version__,
        "image": None,
        "image_digest": None,
        "source_revision": None,
    }

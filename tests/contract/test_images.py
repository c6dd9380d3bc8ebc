"""What an image's name tells of its digest."""

from __future__ import annotations

import pytest

from contract.images import is_file, named_digest

DIGEST = "sha256:" + "0123456789abcdef" * 4


@pytest.mark.parametrize(
    ("image", "file"),
    [
        ("/shared/images/scalelab-worker.sif", True),
        ("./images/worker.sqsh", True),
        ("../worker", True),
        ("worker.sif", True),  # Apptainer: a file in the job's directory
        ("images/worker.squashfs", True),
        ("nvcr.io#nvidia/pytorch:25.01-py3", False),
        ("localhost/scalelab-worker:latest", False),
        ("docker://ghcr.io/team/worker.sif", False),  # a scheme names a registry, whatever the name ends with
        (f"/shared/images/worker.sif@{DIGEST}", True),  # a pinned file is still a file
    ],
)
def test_what_names_an_image_file(image, file):
    assert is_file(named_digest(image)[0]) is file


@pytest.mark.parametrize(
    ("image", "parts"),
    [
        (f"localhost/w@{DIGEST}", ("localhost/w", DIGEST)),
        (f"/i/w.sif@{DIGEST}", ("/i/w.sif", DIGEST)),
        ("localhost/w:latest", ("localhost/w:latest", None)),
        ("localhost/w@sha256:short", ("localhost/w@sha256:short", None)),  # not a digest: the name as it is
    ],
)
def test_the_digest_an_image_is_named_by(image, parts):
    assert named_digest(image) == parts

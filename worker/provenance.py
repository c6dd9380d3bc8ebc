"""Where the worker runs from: its version, and the image and source revision the batch script and image name."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TypedDict

from contract.rundir import DIGEST_VAR, IMAGE_VAR, REVISION_VAR
from worker import __version__


class Provenance(TypedDict):
    worker_version: str
    image: str | None
    image_digest: str | None
    source_revision: str | None


def provenance(environ: Mapping[str, str]) -> Provenance:
    """The start record's provenance fields; what is not known stays None."""
    image = environ.get(IMAGE_VAR) or None
    digest = environ.get(DIGEST_VAR) or None
    if digest is None and image is not None and "@" in image:
        digest = image.rsplit("@", 1)[1]  # an image named by its digest carries it
    return Provenance(
        worker_version=__version__, image=image, image_digest=digest, source_revision=environ.get(REVISION_VAR) or None
    )

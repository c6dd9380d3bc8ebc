"""Where the worker runs from: its version, and the image and source revision the batch script and image name."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TypedDict

from contract.images import named_digest
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
    # The batch script tells the digest where it can; an image named by its digest (say by a CSCS environment
    # definition's env, which the batch script does not read) carries it.
    digest = environ.get(DIGEST_VAR) or (named_digest(image)[1] if image is not None else None)
    return Provenance(
        worker_version=__version__, image=image, image_digest=digest, source_revision=environ.get(REVISION_VAR) or None
    )

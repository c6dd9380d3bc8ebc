"""Why a run that recorded its image recorded no digest of it: what the run page says instead of the digest."""

from __future__ import annotations

from contract.images import is_file, named_digest
from server.profiles import Container
from server.runtimes import runtime_for


def why_no_digest(image: str | None, digest: str | None, container: Container | None) -> str | None:
    """None where there is nothing to explain: a digest was recorded, or no image (the run has not started, or ran
    in none). `container` is the run's profile's, None where the profile is no longer offered."""
    if image is None or digest is not None:
        return None
    if named_digest(image)[1] is not None:
        return "the record of its start did not carry the digest its name gives: the job's output may say why"
    own = runtime_for(container.runtime).why_no_digest(image, container) if container is not None else None
    if own is not None:
        return own
    if is_file(image):
        return (
            "it is an image file whose sha256 the batch script did not take: the file could not be read when the "
            "job started (the job's output says why), or the run is older than scalelab's recording of file digests"
        )
    return (
        "it is named by a tag on a registry, which names whatever was pushed under it last, and the runtime does not "
        "tell which image it fetched: name the image by its digest (name@sha256:...) or use an image file (a SIF or "
        "a squashfs) to have it recorded"
    )

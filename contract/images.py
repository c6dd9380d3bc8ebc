"""What a container image's name tells of its digest: one rule for the batch script, the worker and the run page.

An image is named in one of three ways, whatever the runtime: by a digest (`name@sha256:...`, which names exactly
one image), as a file (a SIF or an enroot squashfs, named by its path: its digest is its content's sha256), or by a
tag on a registry (which names whatever was pushed last under it: only the runtime that fetched it could tell).
"""

from __future__ import annotations

import re

DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")
_NAMED_BY_DIGEST = re.compile(r"^(?P<name>.+)@(?P<digest>sha256:[0-9a-f]{64})$")


def named_digest(image: str) -> tuple[str, str | None]:
    """The image's name without its digest, and the digest it is named by, if it is (`name@sha256:...`)."""
    match = _NAMED_BY_DIGEST.match(image)
    return (match["name"], match["digest"]) if match else (image, None)


# What image files are called: Apptainer takes `worker.sif` for a file in the job's directory as well.
_FILE_SUFFIXES = (".sif", ".sqsh", ".squashfs")


def is_file(image: str) -> bool:
    """Whether the image is a file named by its path: Pyxis and the CSCS engine take a path that starts with / or .
    for a squashfs file; Apptainer takes any name without a scheme (docker://) for a path, but scalelab only hashes
    what is unmistakably one (a registry's name with a tag, `name:1.2`, could be a file name too)."""
    return "://" not in image and (image.startswith(("/", "./", "../")) or image.endswith(_FILE_SUFFIXES))

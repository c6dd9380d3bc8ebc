"""Sizes the server refuses beyond, which the client checks too: it names the file at fault before sending
anything, rather than after sending megabytes the server would turn away."""

from __future__ import annotations

# One imported log, in characters.
MAX_IMPORT_FILE_CHARS = 16 * 1024 * 1024
# All the files of one import together: the server holds a request in memory whole.
MAX_IMPORT_CHARS = 64 * 1024 * 1024

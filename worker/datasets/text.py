"""Character-level text that every machine has offline: the source of some of Python's own standard library."""

from __future__ import annotations

import sysconfig
from pathlib import Path

import torch

from contract.configs import TEXT_MAX_CHARS, TEXT_TRAIN_FRACTION, GptConfig
from contract.spec import RunSpec
from worker.datasets.bundle import DataBundle, Split

# Single-file modules in every Python from 3.11 on, read in this order; missing ones are skipped.
SOURCES = (
    "argparse.py",
    "calendar.py",
    "configparser.py",
    "contextlib.py",
    "dataclasses.py",
    "difflib.py",
    "fractions.py",
    "functools.py",
    "heapq.py",
    "textwrap.py",
)
MIN_CHARS = 50_000


def corpus() -> str:
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    texts = [(stdlib / name).read_text(encoding="utf-8") for name in SOURCES if (stdlib / name).is_file()]
    text = "\n".join(texts)[:TEXT_MAX_CHARS]
    if len(text) < MIN_CHARS:
        raise FileNotFoundError(
            f"the text corpus needs Python's standard library sources in {stdlib}: found only "
            f"{len(text)} characters of {', '.join(SOURCES)}"
        )
    return text


def windows(tokens: torch.Tensor, context: int) -> Split:
    """Non-overlapping windows of `context` tokens; the targets are the same windows one token later."""
    count = (len(tokens) - 1) // context
    if count < 1:
        raise ValueError(
            f"context {context} is too long for the text corpus: a split holds only {len(tokens)} characters"
        )
    inputs = tokens[: count * context].view(count, context)
    targets = tokens[1 : count * context + 1].view(count, context)
    return Split(inputs, targets)


def vocabulary(text: str) -> list[str]:
    """The characters of the corpus in a fixed order: token i is vocabulary[i] (generation decodes with it)."""
    return sorted(set(text))


def load(spec: RunSpec, rank: int) -> DataBundle:
    text = corpus()
    vocab = vocabulary(text)
    index = {char: i for i, char in enumerate(vocab)}
    tokens = torch.tensor([index[char] for char in text], dtype=torch.long)
    context = GptConfig.of(spec).context
    cut = int(len(tokens) * TEXT_TRAIN_FRACTION)
    return DataBundle(
        windows(tokens[:cut], context), windows(tokens[cut:], context), len(vocab), (context,), "language"
    )

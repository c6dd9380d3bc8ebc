"""Seeded synthetic data in the shape the spec's model reads: vectors, images or token sequences."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch.nn import functional as F

from contract import configs
from contract.spec import Model, RunSpec
from worker.datasets.bundle import DataBundle, Split

# Shapes and sizes are in contract.configs (the server's memory estimate counts them); how the data is drawn is here.

# Images, for cnn and resnet18.
IMAGE_SHIFT = 4  # pixels a pattern may move, so that position alone does not give the class away
PATTERN_SCALE = 0.2  # against pixel noise of deviation 1: faint enough that a few images stay ambiguous

# Token sequences, for gpt.
SUCCESSORS = 4  # tokens that may follow each token: a small model can learn the table


def vectors(seed: int) -> DataBundle:
    """Gaussian clusters around seeded class centres: learnable, yet not separable to 100%."""
    gen = torch.Generator().manual_seed(seed)
    centres = torch.randn(configs.CLASSES, configs.SYNTHETIC_FEATURES, generator=gen) * 1.5

    def draw(n: int) -> Split:
        targets = torch.randint(configs.CLASSES, (n,), generator=gen)
        inputs = centres[targets] + torch.randn(n, configs.SYNTHETIC_FEATURES, generator=gen) * 2.0
        return Split(inputs, targets)

    train, val = configs.SYNTHETIC_VECTORS
    return DataBundle(draw(train), draw(val), configs.CLASSES, (configs.SYNTHETIC_FEATURES,), "classification")


def images(seed: int) -> DataBundle:
    """A smooth colour pattern per class, shifted (wrapping round) by a few pixels, plus pixel noise."""
    gen = torch.Generator().manual_seed(seed)
    channels, height, width = configs.IMAGE_SHAPE
    coarse = torch.randn(configs.CLASSES, channels, 4, 4, generator=gen) * PATTERN_SCALE
    patterns = F.interpolate(coarse, size=(height, width), mode="bilinear", align_corners=False)

    def draw(n: int) -> Split:
        targets = torch.randint(configs.CLASSES, (n,), generator=gen)
        dy, dx = torch.randint(-IMAGE_SHIFT, IMAGE_SHIFT + 1, (2, n, 1), generator=gen)
        rows = (torch.arange(height) + dy) % height
        cols = (torch.arange(width) + dx) % width
        shifted = patterns[
            targets[:, None, None, None],
            torch.arange(channels)[None, :, None, None],
            rows[:, None, :, None],
            cols[:, None, None, :],
        ]
        inputs = shifted + torch.randn(n, *configs.IMAGE_SHAPE, generator=gen)
        return Split(inputs, targets)

    train, val = configs.SYNTHETIC_IMAGES
    return DataBundle(draw(train), draw(val), configs.CLASSES, configs.IMAGE_SHAPE, "classification")


def tokens(seed: int, context: int) -> DataBundle:
    """Sequences from a seeded Markov chain: each token is followed by one of a few others, with fixed odds."""
    gen = torch.Generator().manual_seed(seed)
    # Each token may go on to the next in a cycle through all of them, so every token keeps turning up.
    vocab = configs.SYNTHETIC_VOCAB
    following = (torch.arange(vocab) + 1).remainder(vocab)[:, None]
    others = torch.rand(vocab, vocab, generator=gen).argsort(dim=1)[:, : SUCCESSORS - 1]
    successors = torch.cat([following, others], dim=1)
    odds = torch.rand(vocab, SUCCESSORS, generator=gen) + 0.1
    cumulative = (odds / odds.sum(dim=1, keepdim=True)).cumsum(dim=1)

    def draw(n: int) -> Split:
        sequence = [torch.randint(vocab, (n,), generator=gen)]
        # Inverse-CDF sampling: torch.multinomial is some twenty times slower at this size.
        uniform = torch.rand(context, n, 1, generator=gen)
        for u in uniform:
            current = sequence[-1]
            choice = torch.searchsorted(cumulative[current], u).clamp_(max=SUCCESSORS - 1)
            sequence.append(successors[current, choice.squeeze(1)])
        stream = torch.stack(sequence, dim=1)
        return Split(stream[:, :-1].contiguous(), stream[:, 1:].contiguous())

    train, val = configs.SYNTHETIC_SEQUENCES
    return DataBundle(draw(train), draw(val), vocab, (context,), "language")


SHAPES: dict[Model, Callable[[RunSpec], DataBundle]] = {
    Model.mlp: lambda spec: vectors(spec.seed),
    Model.cnn: lambda spec: images(spec.seed),
    Model.resnet18: lambda spec: images(spec.seed),
    Model.gpt: lambda spec: tokens(spec.seed, configs.GptConfig.of(spec).context),
}


def load(spec: RunSpec, rank: int) -> DataBundle:
    try:
        build = SHAPES[spec.model]
    except KeyError:
        raise ValueError(f"synthetic data has no shape for model {spec.model!r}") from None
    return build(spec)

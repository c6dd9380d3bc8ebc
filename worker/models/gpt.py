"""A small decoder-only transformer (nanoGPT's shape), for character-level language modelling, and its spec:
tensor parallelism splits each block's layers as contract.configs.GptConfig.block_linears names them, a pipeline
stage keeps some of the blocks, and the blocks are FSDP's, checkpointing's and compilation's units.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import TYPE_CHECKING

import torch
from torch import nn
from torch.nn import functional as F

from contract.configs import GptConfig
from contract.spec import Model, RunSpec
from contract.splits import even_groups
from worker.datasets.bundle import DataBundle
from worker.models.spec import ModelSpec
from worker.parallel.dims import DegreeError

if TYPE_CHECKING:
    from torch.distributed.tensor.parallel import ParallelStyle

INIT_STD = 0.02

# One block's key/value cache for generation: (batch, heads, max length, head size) each.
KV = tuple[torch.Tensor, torch.Tensor]


class Attention(nn.Module):
    def __init__(self, width: int, heads: int) -> None:
        super().__init__()
        self.head_dim = width // heads
        self.q = nn.Linear(width, width)
        self.k = nn.Linear(width, width)
        self.v = nn.Linear(width, width)
        self.proj = nn.Linear(width, width)

    def forward(
        self,
        x: torch.Tensor,
        mask: torch.Tensor | None = None,
        cache: KV | None = None,
        index: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Training: causal attention over `x`. Generation: `mask` (B, 1, T, S) says which keys each query sees,
        and with a `cache` this step's keys and values are written at positions `index` and the whole cache read."""
        batch, time, _ = x.shape
        # Heads counted from the projections' width: under tensor parallelism each rank holds only some of them.
        q, k, v = (layer(x).view(batch, time, -1, self.head_dim).transpose(1, 2) for layer in (self.q, self.k, self.v))
        if cache is not None and index is not None:
            # Fixed-size buffers written in place: every decoding step has the same shapes, so compiles once.
            cache[0].index_copy_(2, index, k)
            cache[1].index_copy_(2, index, v)
            k, v = cache
        if mask is None:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        out: torch.Tensor = self.proj(y.transpose(1, 2).reshape(batch, time, -1))
        return out


class FeedForward(nn.Module):
    def __init__(self, width: int, ratio: int) -> None:
        super().__init__()
        self.fc = nn.Linear(width, ratio * width)
        self.proj = nn.Linear(ratio * width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.proj(F.gelu(self.fc(x)))
        return out


class Block(nn.Module):
    def __init__(self, config: GptConfig) -> None:
        super().__init__()
        width = config.width
        self.ln1 = nn.LayerNorm(width)
        self.attn = Attention(width, config.heads)
        self.ln2 = nn.LayerNorm(width)
        self.mlp = FeedForward(width, config.mlp_ratio)

    def forward(
        self,
        x: torch.Tensor,
        mask: torch.Tensor | None = None,
        cache: KV | None = None,
        index: torch.Tensor | None = None,
    ) -> torch.Tensor:
        x = x + self.attn(self.ln1(x), mask, cache, index)
        out: torch.Tensor = x + self.mlp(self.ln2(x))
        return out


class GPT(nn.Module):
    def __init__(self, vocab: int, config: GptConfig) -> None:
        super().__init__()
        width, depth = config.width, config.depth
        if width % config.heads:
            raise ValueError(f"gpt width ({width}) must be divisible by heads ({config.heads})")
        self.config = config  # what the spec's plans read: the block's layers, the heads
        self.tok_emb: nn.Embedding | None = nn.Embedding(vocab, width)
        self.pos_emb: nn.Embedding | None = nn.Embedding(config.context, width)
        blocks = [Block(config) for _ in range(depth)]
        self.blocks = nn.ModuleDict({str(i): block for i, block in enumerate(blocks)})
        self.norm: nn.LayerNorm | None = nn.LayerNorm(width)
        self.head: nn.Linear | None = nn.Linear(width, vocab)
        self.apply(_init_weights)
        # GPT-2's scaling: each block adds two residual branches, so their outputs start smaller with depth.
        for block in blocks:
            for proj in (block.attn.proj, block.mlp.proj):
                nn.init.normal_(proj.weight, std=INIT_STD / math.sqrt(2 * depth))

    def forward(
        self,
        x: torch.Tensor,
        mask: torch.Tensor | None = None,
        positions: torch.Tensor | None = None,
        cache: list[KV] | None = None,
        index: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Token ids (B, T) to logits (B, T, vocab); a pipeline stage without embeddings takes hidden states
        (B, T, width), and one without the head returns them. Generation passes each token's `positions` (B, T),
        an attention `mask`, and a key/value cache per block (see Attention.forward)."""
        if self.tok_emb is not None:
            x = self.tok_emb(x)
            if self.pos_emb is not None:
                x = x + self.pos_emb(torch.arange(x.shape[1], device=x.device) if positions is None else positions)
        for number, block in enumerate(self.blocks.values()):
            x = block(x, mask, None if cache is None else cache[number], index)
        if self.norm is not None:
            x = self.norm(x)
        if self.head is not None:
            x = self.head(x)
        return x


def _init_weights(module: nn.Module) -> None:
    if isinstance(module, nn.Linear | nn.Embedding):
        nn.init.normal_(module.weight, std=INIT_STD)
    if isinstance(module, nn.Linear) and module.bias is not None:
        nn.init.zeros_(module.bias)


def build(spec: RunSpec, bundle: DataBundle) -> nn.Module:
    if bundle.task != "language":
        raise ValueError(f"gpt models token sequences, but data set '{spec.dataset}' is for {bundle.task}")
    (context,) = bundle.sample_shape
    # Positions for the sequences it is given: the data sets cut them to the same config's context, and a caller
    # with sequences of its own (a test's short ones) gets a table that fits them.
    return GPT(bundle.num_classes, replace(GptConfig.of(spec), context=context))


def _gpt(model: nn.Module) -> GPT:
    if not isinstance(model, GPT):
        raise TypeError(f"expected gpt's GPT, got {type(model).__name__}")
    return model


def blocks(model: nn.Module) -> list[nn.Module]:
    return list(_gpt(model).blocks.values())


def tensor_plan(model: nn.Module, tp: int) -> dict[str, ParallelStyle]:
    """Attention heads and the feed-forward hidden units split over the group; embeddings and norms replicated."""
    # Imported on use, as worker.parallel imports its strategies (DTensor costs every rank's start seconds).
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel

    gpt = _gpt(model)
    if why := gpt.config.why_heads_do_not_split(tp):
        raise DegreeError(why)
    styles = {"column": ColwiseParallel, "row": RowwiseParallel}
    return {
        f"blocks.{key}.{linear.name}": styles[linear.split]()
        for key in gpt.blocks
        for linear in gpt.config.block_linears()
        if linear.split is not None
    }


def pipeline_stage(model: nn.Module, stage: int, stages: int) -> nn.Module:
    """Keep this stage's blocks; the embeddings live on the first stage, the norm and head on the last (the model's
    forward skips what is None: the stage before or after provides it)."""
    gpt = _gpt(model)
    keys = list(gpt.blocks.keys())
    if len(keys) < stages:
        raise DegreeError(f"gpt has {len(keys)} blocks: too few for {stages} pipeline stages (raise depth)")
    mine = {keys[i] for i in even_groups(len(keys), stages)[stage]}
    for key in keys:
        if key not in mine:
            del gpt.blocks[key]
    if stage != 0:
        gpt.tok_emb = gpt.pos_emb = None
    if stage != stages - 1:
        gpt.norm = gpt.head = None
    return gpt


SPEC = ModelSpec(
    model=Model.gpt,
    config=GptConfig,
    build=build,
    tensor_parallel=tensor_plan,
    fsdp_units=blocks,
    pipeline_stage=pipeline_stage,
    checkpoint_units=blocks,
    compile_units=blocks,
)

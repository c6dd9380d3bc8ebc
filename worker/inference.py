"""Generating text from a finished gpt training run's checkpoint, on one process or tensor parallel.

Prompts are generated for in batches, left-padded to one length so that every batch has the same shapes (a
compiled model then compiles once): padding keys are masked out of attention and positions count from each
prompt's first real token, so a prompt's text does not depend on its batch. Decoding keeps a key/value cache of
fixed size per block and feeds one token per step.
"""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch import nn
from torch.distributed.checkpoint.state_dict import get_model_state_dict, set_model_state_dict

from contract.configs import GptConfig
from contract.records import InferenceRecord, RequestRecord
from contract.rundir import CHECKPOINTS_DIR, GENERATIONS_FILE, PROMPTS_FILE, SPEC_FILE
from contract.spec import Dataset, Model, RunSpec
from worker.checkpoint import checkpoint_path, latest_epoch
from worker.datasets import text
from worker.distributed import DistEnv
from worker.memory import Peaks
from worker.models import gpt
from worker.parallel.compile import compile_units
from worker.parallel.dims import ParallelDims
from worker.parallel.tp import apply_tp
from worker.precision import PrecisionPolicy
from worker.report import Reporter
from worker.start import start_record


class InferenceError(ValueError):
    """The checkpoint or the prompts cannot be generated from."""


@dataclass(frozen=True)
class Tokenizer:
    """Characters to token ids and back, in the vocabulary the model was trained with."""

    vocab: list[str]

    def encode(self, prompt: str) -> list[int]:
        index = {char: i for i, char in enumerate(self.vocab)}
        # Characters the model never saw have no token: they are left out.
        ids = [index[char] for char in prompt if char in index]
        # A prompt left empty starts from a line break, as text does after one.
        return ids or [index.get("\n", 0)]

    def decode(self, ids: list[int]) -> str:
        return "".join(self.vocab[i] for i in ids)


@dataclass(frozen=True)
class Sampling:
    temperature: float = 0.0
    top_k: int | None = None
    seed: int = 0


@dataclass
class Loaded:
    model: nn.Module
    tokenizer: Tokenizer
    context: int
    local_heads: int
    head_dim: int
    depth: int
    parameters: int


def training_spec(run_dir: Path) -> RunSpec:
    path = run_dir / SPEC_FILE
    try:
        trained = RunSpec.model_validate_json(path.read_bytes())
    except OSError as exc:
        raise InferenceError(f"cannot read the training run's spec {path}: {exc.strerror}") from None
    if trained.model is not Model.gpt or trained.dataset is not Dataset.text:
        raise InferenceError(
            f"the checkpoint's run trained {trained.model} on {trained.dataset}: generation needs gpt on text"
        )
    return trained


def load_model(spec: RunSpec, dist_env: DistEnv, device: torch.device) -> Loaded:
    """The trained model, split over the tensor-parallel group if the spec asks, with the checkpoint's weights
    resharded onto that layout by torch.distributed.checkpoint (whatever layout they were saved from)."""
    if spec.checkpoint is None:
        raise InferenceError("the spec names no checkpoint")
    run_dir = Path(spec.checkpoint)
    trained = training_spec(run_dir)
    directory = run_dir / CHECKPOINTS_DIR
    epoch = latest_epoch(directory)
    if epoch is None:
        raise InferenceError(
            f"the training run {run_dir} has no complete checkpoint: train it with checkpoint_every set"
        )
    tokenizer = Tokenizer(text.vocabulary(text.corpus()))
    config = GptConfig.of(trained)
    model: nn.Module = gpt.GPT(len(tokenizer.vocab), config)
    parameters = sum(p.numel() for p in model.parameters())
    mesh = ParallelDims.from_spec(spec, dist_env.world_size, dist_env.nodes).mesh(device.type, spec)
    if spec.tp > 1:
        model = apply_tp(model, mesh, spec, gpt.SPEC)
    model = model.to(device).eval()
    state = get_model_state_dict(model)
    # Only the model's entries are read: the optimizer state beside them stays on disk.
    dcp.load({"model": state}, checkpoint_id=checkpoint_path(directory, epoch))  # type: ignore[attr-defined]
    set_model_state_dict(model, state)
    if spec.compile:
        model = compile_units(model, gpt.SPEC)
    local_heads = config.heads // spec.tp
    return Loaded(model, tokenizer, config.context, local_heads, config.head_dim, config.depth, parameters)


def read_prompts(path: Path) -> list[str]:
    """One prompt per line; blank lines are not prompts."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise InferenceError(f"cannot read the prompts {path}: {exc.strerror}") from None
    prompts = [line for line in lines if line.strip()]
    if not prompts:
        raise InferenceError(f"the prompts file {path} holds no prompt")
    return prompts


def choose(logits: torch.Tensor, sampling: Sampling, generator: torch.Generator) -> torch.Tensor:
    """The next token of each row: the likeliest (greedy), or drawn at the temperature among the top k."""
    if sampling.temperature == 0:
        return logits.argmax(dim=-1)
    scaled = logits.float() / sampling.temperature
    if sampling.top_k is not None and sampling.top_k < scaled.shape[-1]:
        kth = scaled.topk(sampling.top_k, dim=-1).values[:, -1:]
        scaled = scaled.masked_fill(scaled < kth, float("-inf"))
    probs = torch.softmax(scaled, dim=-1)
    # Drawn on the CPU: one generator gives the same draws on every device and every rank.
    return torch.multinomial(probs.cpu(), 1, generator=generator).squeeze(-1).to(logits.device)


@dataclass
class BatchTiming:
    ttft_s: float = 0.0
    total_s: float = 0.0
    step_s: list[float] = field(default_factory=list)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _attention_mask(valid: torch.Tensor, queries: torch.Tensor) -> torch.Tensor:
    """(B, 1, Q, S): query at slot q sees the valid keys at slots up to q, and always itself (a padding query
    with no key to see would turn into NaN, and its NaN would reach the real tokens through the cache)."""
    slots = torch.arange(valid.shape[1], device=valid.device)
    causal = slots[None, :] <= queries[:, None]  # (Q, S)
    itself = slots[None, :] == queries[:, None]
    return ((valid[:, None, :] & causal[None]) | itself[None])[:, None]


class Decoder:
    """Generates for batches of token lists on every rank alike; rank 0's choices are everyone's."""

    def __init__(
        self,
        loaded: Loaded,
        precision: PrecisionPolicy,
        sampling: Sampling,
        device: torch.device,
        tp_group: bool = False,
    ) -> None:
        self.loaded = loaded
        self.precision = precision
        self.sampling = sampling
        self.device = device
        self.tp_group = tp_group
        self.generator = torch.Generator().manual_seed(sampling.seed)

    def _next(self, logits: torch.Tensor) -> torch.Tensor:
        tokens = choose(logits[:, -1], self.sampling, self.generator)
        if self.tp_group:
            # The ranks' logits agree to rounding only: rank 0 decides, so that no rank goes its own way.
            dist.broadcast(tokens, src=0)
        return tokens

    def _forward(self, tokens: torch.Tensor, **kwargs: torch.Tensor | list[gpt.KV] | None) -> torch.Tensor:
        with torch.no_grad(), self.precision.autocast():
            out: torch.Tensor = self.loaded.model(tokens, **kwargs)
        return out

    def _pad(self, batch: list[list[int]], length: int) -> tuple[torch.Tensor, torch.Tensor]:
        tokens = torch.zeros(len(batch), length, dtype=torch.long)
        valid = torch.zeros(len(batch), length, dtype=torch.bool)
        for row, ids in enumerate(batch):
            tokens[row, length - len(ids) :] = torch.tensor(ids, dtype=torch.long)
            valid[row, length - len(ids) :] = True
        return tokens.to(self.device), valid.to(self.device)

    def generate(
        self, batch: list[list[int]], prompt_length: int, new_tokens: int, use_cache: bool = True
    ) -> tuple[list[list[int]], BatchTiming]:
        """`new_tokens` tokens after each prompt (each at most `prompt_length` tokens, left-padded to it)."""
        timing = BatchTiming()
        _sync(self.device)
        started = time.perf_counter()
        tokens, valid_prompt = self._pad(batch, prompt_length)
        slots = prompt_length + new_tokens
        valid = torch.zeros(len(batch), slots, dtype=torch.bool, device=self.device)
        valid[:, :prompt_length] = valid_prompt
        sequence = torch.zeros(len(batch), slots, dtype=torch.long, device=self.device)
        sequence[:, :prompt_length] = tokens
        # Each token's position counts from its prompt's first real token.
        positions = (valid.long().cumsum(dim=1) - 1).clamp(min=0)
        first_new = valid_prompt.sum(dim=1)
        cache = self._cache(len(batch), slots) if use_cache else None
        prefill = torch.arange(prompt_length, device=self.device)
        kwargs: dict[str, torch.Tensor | list[gpt.KV] | None] = {
            "cache": cache,
            "index": prefill if use_cache else None,
        }
        mask = _attention_mask(valid if use_cache else valid[:, :prompt_length], prefill)
        logits = self._forward(tokens, mask=mask, positions=positions[:, :prompt_length], **kwargs)
        last = started
        for step in range(new_tokens):
            slot = prompt_length + step
            sequence[:, slot] = self._next(logits)
            valid[:, slot] = True
            positions[:, slot] = first_new + step
            _sync(self.device)
            now = time.perf_counter()
            if step == 0:
                timing.ttft_s = now - started
            else:
                timing.step_s.append(now - last)
            last = now
            if step == new_tokens - 1:
                break
            if use_cache:
                at = torch.tensor([slot], device=self.device)
                mask = _attention_mask(valid, at)
                logits = self._forward(
                    sequence[:, slot : slot + 1],
                    mask=mask,
                    positions=positions[:, slot : slot + 1],
                    cache=cache,
                    index=at,
                )
            else:
                seen = torch.arange(slot + 1, device=self.device)
                mask = _attention_mask(valid[:, : slot + 1], seen)
                logits = self._forward(sequence[:, : slot + 1], mask=mask, positions=positions[:, : slot + 1])
        timing.total_s = time.perf_counter() - started
        generated = sequence[:, prompt_length:].tolist()
        return generated, timing

    def _cache(self, batch: int, slots: int) -> list[gpt.KV]:
        loaded = self.loaded
        dtype = self.precision.dtype or torch.float32
        shape = (batch, loaded.local_heads, slots, loaded.head_dim)
        return [
            (torch.zeros(shape, dtype=dtype, device=self.device), torch.zeros(shape, dtype=dtype, device=self.device))
            for _ in range(loaded.depth)
        ]


def percentile(values: list[float], q: float) -> float:
    """The q-th percentile (0-100), interpolated between the nearest ranks."""
    if not values:
        return 0.0
    ordered = sorted(values)
    at = (len(ordered) - 1) * q / 100
    low, high = math.floor(at), math.ceil(at)
    return ordered[low] + (ordered[high] - ordered[low]) * (at - low)


@dataclass
class Request:
    index: int
    prompt: str
    ids: list[int]


def _batches(requests: list[Request], size: int) -> list[list[Request]]:
    return [requests[i : i + size] for i in range(0, len(requests), size)]


def write_generations(path: Path, rows: list[dict[str, object]]) -> None:
    """Written whole, then renamed into place: the server never reads half a file."""
    partial = path.with_name(f".{path.name}.partial")
    partial.write_text("".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows), encoding="utf-8")
    os.replace(partial, path)


def run(
    spec: RunSpec,
    run_dir: Path,
    dist_env: DistEnv,
    device: torch.device,
    reporter: Reporter,
    report_memory: Callable[[], Peaks],
) -> None:
    """Load, warm up, generate for every prompt, write the generations (rank 0), and report the figures."""
    precision = PrecisionPolicy(spec.precision, device)
    started = time.perf_counter()
    loaded = load_model(spec, dist_env, device)
    load_time = time.perf_counter() - started
    reporter.record(start_record(spec, dist_env, device, loaded.parameters))
    if spec.max_new_tokens >= loaded.context:
        raise InferenceError(
            f"max_new_tokens ({spec.max_new_tokens}) must be below the model's context ({loaded.context})"
        )
    prompts = read_prompts(run_dir / PROMPTS_FILE)
    # Prompts keep their last tokens: the prompt and what follows it must fit the context the model knows.
    room = loaded.context - spec.max_new_tokens
    requests = [Request(i, p, loaded.tokenizer.encode(p)[-room:]) for i, p in enumerate(prompts)]
    prompt_length = max(len(r.ids) for r in requests)
    size = min(spec.global_batch_size, len(requests))
    decoder = Decoder(loaded, precision, Sampling(spec.temperature, spec.top_k, spec.seed), device, spec.tp > 1)
    batches = _batches(requests, size)

    def padded(batch: list[Request]) -> list[list[int]]:
        # The last batch is filled up with its first prompt: every batch then has the same shapes.
        return [r.ids for r in batch] + [batch[0].ids] * (size - len(batch))

    # One batch before the clock starts: a compiled model compiles here; an eager one warms its kernels.
    warm = time.perf_counter()
    decoder.generate(padded(batches[0]), prompt_length, spec.max_new_tokens)
    compile_time = time.perf_counter() - warm
    decoder.generator.manual_seed(spec.seed)  # the timed generation draws as if the warm-up had not been
    rows: list[dict[str, object]] = []
    timings: list[BatchTiming] = []
    generation_started = time.perf_counter()
    for batch in batches:
        generated, timing = decoder.generate(padded(batch), prompt_length, spec.max_new_tokens)
        timings.append(timing)
        for request, ids in zip(batch, generated, strict=False):
            rows.append(
                {
                    "index": request.index,
                    "prompt": request.prompt,
                    "completion": loaded.tokenizer.decode(ids),
                    "prompt_tokens": len(request.ids),
                    "new_tokens": len(ids),
                }
            )
            reporter.record(
                RequestRecord(
                    index=request.index,
                    prompt_tokens=len(request.ids),
                    new_tokens=len(ids),
                    ttft_s=timing.ttft_s,
                    tokens_per_s=len(ids) / timing.total_s,
                )
            )
    generation_time = time.perf_counter() - generation_started
    if dist_env.is_main:
        write_generations(run_dir / GENERATIONS_FILE, rows)
    peak = report_memory()
    per_request = [len(batch) * [spec.max_new_tokens / t.total_s] for batch, t in zip(batches, timings, strict=True)]
    ttfts = [t.ttft_s for batch, t in zip(batches, timings, strict=True) for _ in batch]
    steps = [s for t in timings for s in t.step_s]
    reporter.record(
        InferenceRecord(
            tp=spec.tp,
            compile=spec.compile,
            precision=spec.precision.value,
            batch_size=size,
            requests=len(requests),
            new_tokens=len(requests) * spec.max_new_tokens,
            load_time_s=load_time,
            compile_time_s=compile_time if spec.compile else None,
            ttft_s=sum(ttfts) / len(ttfts),
            ttft_p50_s=percentile(ttfts, 50),
            tokens_per_s=len(requests) * spec.max_new_tokens / generation_time,
            request_tokens_per_s=sum(v for values in per_request for v in values) / len(requests),
            latency_p50_s=percentile(steps, 50),
            latency_p95_s=percentile(steps, 95),
            generation_time_s=generation_time,
            peak_memory_bytes=peak.held,
            memory_kind=peak.kind,
            peak_rss_bytes=peak.rss,
        )
    )
    reporter.progress(
        f"generated {len(requests) * spec.max_new_tokens} tokens for {len(requests)} prompts in "
        f"{generation_time:.2f} s (load {load_time:.2f} s, warm-up {compile_time:.2f} s)"
    )

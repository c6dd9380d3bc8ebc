"""Generation from a checkpoint: the key/value cache, batching, sampling, and single against tensor parallel."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import get_model_state_dict

from contract.configs import GptConfig
from contract.rundir import (
    CHECKPOINTS_DIR,
    DIGEST_VAR,
    GENERATIONS_FILE,
    IMAGE_VAR,
    PROMPTS_FILE,
    REVISION_VAR,
    SPEC_FILE,
)
from contract.spec import Precision
from tests.factories import spec
from tests.worker.launch import run_worker
from worker.datasets import text
from worker.inference import Decoder, Loaded, Sampling, Tokenizer, percentile
from worker.models import gpt
from worker.precision import PrecisionPolicy

WIDTH, DEPTH, HEADS, CONTEXT = 32, 2, 2, 32
PROMPTS = ["def main(", "class Foo:", "", "import os, sys", "  return x", "for i in range(", "x"]


def _model(vocab: int) -> gpt.GPT:
    """A gpt with weights large enough that its likeliest tokens differ from place to place (a freshly built one
    predicts nearly uniformly, and a greedy comparison of near-ties would test rounding, not the code)."""
    torch.manual_seed(7)
    model = gpt.GPT(vocab, GptConfig(depth=DEPTH, width=WIDTH, heads=HEADS, context=CONTEXT))
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.normal_(0, 0.4)
    return model.eval()


def _decoder(model: gpt.GPT, sampling: Sampling | None = None) -> Decoder:
    loaded = Loaded(model, Tokenizer([chr(c) for c in range(32, 127)]), CONTEXT, HEADS, WIDTH // HEADS, DEPTH, 0)
    cpu = torch.device("cpu")
    return Decoder(loaded, PrecisionPolicy(Precision.fp32, cpu), sampling or Sampling(), cpu)


def _batch(decoder: Decoder) -> list[list[int]]:
    return [decoder.loaded.tokenizer.encode(prompt) for prompt in PROMPTS]


def test_kv_cache_generates_what_recomputing_the_whole_sequence_generates() -> None:
    decoder = _decoder(_model(95))
    batch = _batch(decoder)
    length = max(map(len, batch))
    cached, timing = decoder.generate(batch, length, 12, use_cache=True)
    recomputed, _ = decoder.generate(batch, length, 12, use_cache=False)
    assert cached == recomputed
    assert len({tuple(row) for row in cached}) > 3  # the prompts lead to different text
    assert sum(len(set(row)) > 1 for row in cached) >= 3  # and do not just repeat one token
    assert timing.ttft_s > 0 and len(timing.step_s) == 11


def test_a_prompt_generates_the_same_alone_and_left_padded_in_a_batch() -> None:
    decoder = _decoder(_model(95))
    batch = _batch(decoder)
    together, _ = decoder.generate(batch, max(map(len, batch)), 10)
    for ids, expected in zip(batch, together, strict=True):
        alone, _ = decoder.generate([ids], len(ids), 10)
        assert alone == [expected]


def test_sampling_repeats_with_its_seed_and_top_1_is_greedy() -> None:
    model = _model(95)
    batch = _batch(_decoder(model))
    length = max(map(len, batch))
    first, _ = _decoder(model, Sampling(temperature=1.5, seed=3)).generate(batch, length, 12)
    again, _ = _decoder(model, Sampling(temperature=1.5, seed=3)).generate(batch, length, 12)
    other, _ = _decoder(model, Sampling(temperature=1.5, seed=4)).generate(batch, length, 12)
    assert first == again != other
    greedy, _ = _decoder(model).generate(batch, length, 12)
    top_1, _ = _decoder(model, Sampling(temperature=1.5, top_k=1, seed=5)).generate(batch, length, 12)
    assert top_1 == greedy != first


def test_bf16_generation_keeps_its_cache_in_bf16_and_mostly_agrees_with_fp32() -> None:
    model = _model(95)
    decoder = _decoder(model)
    batch = _batch(decoder)
    length = max(map(len, batch))
    cpu = torch.device("cpu")
    bf16 = Decoder(decoder.loaded, PrecisionPolicy(Precision.bf16, cpu), Sampling(), cpu)
    assert bf16._cache(2, 8)[0][0].dtype == torch.bfloat16
    low, _ = bf16.generate(batch, length, 8)
    full, _ = decoder.generate(batch, length, 8)
    assert [len(row) for row in low] == [8] * len(batch)
    # Rounding may change a near tie, but not the first token of most prompts.
    assert sum(a[0] == b[0] for a, b in zip(low, full, strict=True)) >= len(batch) // 2


def test_percentile_interpolates_between_ranks() -> None:
    assert percentile([4.0, 1.0, 3.0, 2.0], 50) == 2.5
    assert percentile([1.0, 2.0, 3.0, 4.0, 5.0], 95) == pytest.approx(4.8)
    assert percentile([], 50) == 0.0


def _training_run(directory: Path) -> Path:
    """A finished gpt run's directory, as training leaves it: its spec, and a DCP checkpoint of epoch 1."""
    trained = spec(model="gpt", dataset="text", width=WIDTH, depth=DEPTH, heads=HEADS, context=CONTEXT)
    directory.mkdir()
    (directory / SPEC_FILE).write_text(trained.model_dump_json())
    model = _model(len(text.vocabulary(text.corpus())))
    dcp.save({"model": get_model_state_dict(model)}, checkpoint_id=directory / CHECKPOINTS_DIR / "epoch-1")  # type: ignore[attr-defined]
    return directory


def _infer(tmp_path: Path, name: str, processes: int, checkpoint: Path, **fields: Any) -> list[dict[str, object]]:
    run_dir = tmp_path / name
    run_dir.mkdir()
    (run_dir / PROMPTS_FILE).write_text("\n".join(PROMPTS) + "\n")
    run = run_worker(
        tmp_path,
        processes,
        run_dir=run_dir,
        kind="inference",
        model="gpt",
        strategy="tp" if processes > 1 else "single",
        checkpoint=str(checkpoint),
        max_new_tokens=10,
        global_batch_size=4,
        **fields,
    )
    assert run.returncode == 0, run.stderr
    (result,) = run.of_kind("inference")
    assert result.tp == processes and result.requests == len(PROMPTS) - 1 and result.new_tokens == 60
    assert result.tokens_per_s > 0 and result.latency_p95_s >= result.latency_p50_s > 0 and result.ttft_s > 0
    assert sorted(record.rank for record in run.of_kind("memory")) == list(range(processes))
    assert [record.index for record in run.of_kind("request")] == list(range(len(PROMPTS) - 1))
    assert run.of_kind("end")[0].status == "completed"
    lines = (run_dir / GENERATIONS_FILE).read_text().splitlines()
    return [json.loads(line) for line in lines]


@pytest.mark.filterwarnings("ignore:torch.distributed is disabled:UserWarning")  # the test saves in one process
def test_single_and_tensor_parallel_generate_the_same_text(tmp_path: Path) -> None:
    """Real processes: the checkpoint is resharded onto two tensor-parallel ranks by torch.distributed.checkpoint."""
    checkpoint = _training_run(tmp_path / "trained")
    single = _infer(tmp_path, "single", 1, checkpoint)
    tensor_parallel = _infer(tmp_path, "tp", 2, checkpoint)
    assert single == tensor_parallel
    assert [row["prompt"] for row in single] == [prompt for prompt in PROMPTS if prompt]
    assert len({row["completion"] for row in single}) > 3
    sampled = _infer(tmp_path, "sampled", 2, checkpoint, temperature=1.2, top_k=8, seed=11)
    assert sampled == _infer(tmp_path, "sampled-single", 1, checkpoint, temperature=1.2, top_k=8, seed=11)
    assert sampled != single


def test_a_run_without_a_checkpoint_fails_with_a_reason(tmp_path: Path) -> None:
    trained = tmp_path / "trained"
    trained.mkdir()
    (trained / SPEC_FILE).write_text(spec(model="gpt", dataset="text").model_dump_json())
    run_dir = tmp_path / "infer"
    run_dir.mkdir()
    (run_dir / PROMPTS_FILE).write_text("hello\n")
    run = run_worker(
        tmp_path, 1, run_dir=run_dir, kind="inference", model="gpt", strategy="single", checkpoint=str(trained)
    )
    assert run.returncode != 0
    (end,) = run.of_kind("end")
    assert end.status == "failed" and "no complete checkpoint" in end.error


@pytest.mark.filterwarnings("ignore:torch.distributed is disabled:UserWarning")  # the test saves in one process
def test_an_inference_run_records_its_image_digest_and_hardware(tmp_path: Path) -> None:
    """The start record of inference is training's: provenance and the nodes' hardware included, so that an
    inference run can be run again pinned to the image it ran in."""
    checkpoint = _training_run(tmp_path / "trained")
    run_dir = tmp_path / "infer"
    run_dir.mkdir()
    (run_dir / PROMPTS_FILE).write_text("hello\n")
    digest = "sha256:" + "cd" * 32
    run = run_worker(
        tmp_path,
        1,
        run_dir=run_dir,
        env={IMAGE_VAR: "localhost/scalelab-worker:latest", DIGEST_VAR: digest, REVISION_VAR: "cead188"},
        kind="inference",
        model="gpt",
        strategy="single",
        checkpoint=str(checkpoint),
        max_new_tokens=4,
    )
    assert run.returncode == 0, run.stderr
    (start,) = run.of_kind("start")
    assert (start.image, start.image_digest, start.source_revision) == (
        "localhost/scalelab-worker:latest",
        digest,
        "cead188",
    )
    assert start.worker_version is not None
    assert start.nodes_hardware is not None and len(start.nodes_hardware) == 1

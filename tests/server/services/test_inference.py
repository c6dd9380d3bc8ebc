"""Inference rows read ingestion's verdicts: what an earlier attempt of the run printed no longer counts."""

from __future__ import annotations

from contract.records import InferenceRecord, MemoryRecord, StartRecord, WorkerRecord, format_record
from contract.rundir import OUTPUT_FILE
from server.services.inference import inference_rows
from server.services.ingestion.parsing import ingest
from tests.factories import experiment_row, run_row, spec

START = StartRecord(world_size=2, nodes=1, device="cpu", backend="gloo", strategy="tp", torch_version="2", hostname="h")


def memory(rank: int, peak: int) -> MemoryRecord:
    return MemoryRecord(epoch=0, rank=rank, peak_allocated_bytes=peak, memory_kind="cpu_max_rss")


def figures(tokens_per_s: float) -> InferenceRecord:
    return InferenceRecord(
        tp=2, compile=False, precision="fp32", batch_size=2, requests=3, new_tokens=24, load_time_s=0.5, ttft_s=0.01,
        ttft_p50_s=0.01, tokens_per_s=tokens_per_s, request_tokens_per_s=90.0, latency_p50_s=0.002,
        latency_p95_s=0.004, generation_time_s=0.3, peak_memory_bytes=2000, memory_kind="cpu_max_rss",
    )  # fmt: skip


def test_a_restarted_inference_run_shows_only_its_last_attempt(session, tmp_path):
    experiment = experiment_row(session)
    attempts: dict[str, list[WorkerRecord]] = {
        # The second attempt printed its figures: they alone count, with its one rank's memory.
        "again": [START, memory(0, 10), memory(1, 11), figures(100.0), START, memory(0, 20), figures(200.0)],
        # The second attempt died before its figures: the first attempt's do not stand in for them.
        "died": [START, memory(0, 10), memory(1, 11), figures(100.0), START, memory(0, 30)],
    }
    runs = []
    for position, (name, records) in enumerate(attempts.items()):
        (tmp_path / name).mkdir()
        (tmp_path / name / OUTPUT_FILE).write_text("".join(format_record(record) + "\n" for record in records))
        run_spec = spec(kind="inference", model="gpt", checkpoint="/c", strategy="tp", gpus=2)
        run = run_row(session, experiment, tmp_path / name, run_spec=run_spec, position=position)
        ingest(session, run)
        session.commit()
        runs.append(run)
    again, died = inference_rows(session, runs)
    assert (again.tokens_per_s, again.memory_per_rank) == (200.0, [20])
    assert (died.tokens_per_s, died.peak_memory_bytes, died.memory_per_rank) == (None, None, [30])

"""Inference experiments: the trained run a checkpoint comes from, and the figures of inference runs."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from pydantic import ValidationError
from sqlmodel import Session, col, select

from contract.configs import GptConfig
from contract.records import InferenceRecord, MemoryRecord
from contract.rundir import SPEC_FILE
from contract.spec import Dataset, Model, RunKind, RunSpec
from contract.states import RunState
from server import runfiles
from server.errors import NotFound
from server.models import Generation, GenerationsPublic, InferenceRow, Metric, Run, User
from server.profiles import within
from server.runfiles import Unreadable
from server.services import rundirs
from server.services.runs import get_run, runs_query


class CheckpointError(ValueError):
    """The named checkpoint cannot be generated from; the message says why."""


@dataclass(frozen=True)
class Trained:
    """A finished gpt training run to generate from."""

    run_dir: Path
    spec: RunSpec

    @property
    def context(self) -> int:
        return GptConfig.of(self.spec).context


# A run's spec.json is a few kilobytes: a larger one is not a spec the service wrote.
MAX_SPEC_BYTES = 1024 * 1024


def has_checkpoint(run_dir: Path, owner: int | None) -> bool:
    return bool(rundirs.checkpoint_epochs(run_dir, owner))


def gpt_on_text(spec: RunSpec, what: str) -> None:
    """Refuse a run that is not a gpt trained on text: nothing else can be generated from."""
    if spec.kind is not RunKind.train or spec.model is not Model.gpt or spec.dataset is not Dataset.text:
        raise CheckpointError(
            f"{what} is not a gpt trained on text (it is {spec.kind} of {spec.model} on {spec.dataset})"
        )


def _checked(run_dir: Path, spec: RunSpec, what: str, owner: int | None) -> Trained:
    gpt_on_text(spec, what)
    if not has_checkpoint(run_dir, owner):
        raise CheckpointError(f"{what} saved no checkpoint: train it with checkpoint_every set")
    return Trained(run_dir, spec)


def trained_run(run: Run | None, run_id: str) -> Trained:
    """A scalelab run chosen by id: it must have completed."""
    if run is None:
        raise CheckpointError(f"there is no run {run_id!r}")
    if run.state is not RunState.completed:
        raise CheckpointError(f"run {run_id} has not completed (it is {run.state})")
    return _checked(Path(run.run_dir), RunSpec.model_validate(run.spec), f"run {run_id}", rundirs.file_owner(run))


def trained_at(path: str, roots: list[str]) -> Trained:
    """A training run's directory named by path: only under a root the cluster profile allows."""
    resolved = Path(path).resolve()
    if not within(resolved, map(Path, roots)):
        allowed = ", ".join(roots) or "none: choose a scalelab run by id instead"
        raise CheckpointError(f"{path} is not under a checkpoint root of the cluster profile ({allowed})")
    try:
        # Whose directory it is cannot be known: only links, FIFOs and the like are refused.
        data = runfiles.read_file(resolved, SPEC_FILE, MAX_SPEC_BYTES)
    except (Unreadable, OSError):
        data = None
    if data is None:
        raise CheckpointError(f"{path} holds no readable {SPEC_FILE}: it is not a scalelab run's directory")
    try:
        spec = RunSpec.model_validate_json(data)
    except ValidationError:
        raise CheckpointError(f"{path}/{SPEC_FILE} is not a valid run spec") from None
    return _checked(resolved, spec, path, None)


def inference_rows(session: Session, runs: Sequence[Run]) -> list[InferenceRow]:
    """Each inference run's figures, from its latest inference record and its memory records (two queries)."""
    ids = [run.id for run in runs if run.spec.get("kind") == RunKind.inference.value]
    # Ingestion's verdicts leave what an earlier attempt printed out: one inference record and one memory record
    # per rank count (in output order all the same, should a rank ever print more than one).
    metrics = session.exec(
        select(Metric)
        .where(col(Metric.run_id).in_(ids), col(Metric.kind).in_(("inference", "memory")), col(Metric.counts))
        .order_by(col(Metric.run_id), col(Metric.offset))
    ).all()
    latest: dict[str, InferenceRecord] = {}
    memory: dict[str, dict[int, int]] = {}
    for metric in metrics:
        if metric.kind == "inference":
            latest[metric.run_id] = InferenceRecord.model_validate(metric.record)
        else:
            record = MemoryRecord.model_validate(metric.record)
            memory.setdefault(metric.run_id, {})[record.rank] = record.peak_allocated_bytes
    rows = []
    for run in runs:
        if run.id not in ids:
            continue
        spec = RunSpec.model_validate(run.spec)
        found = latest.get(run.id)
        per_rank = memory.get(run.id, {})
        rows.append(
            InferenceRow(
                run_id=run.id,
                state=run.state,
                strategy=spec.strategy,
                tp=spec.tp,
                compile=spec.compile,
                precision=spec.precision.value,
                batch_size=spec.global_batch_size,
                tokens_per_s=found.tokens_per_s if found else None,
                request_tokens_per_s=found.request_tokens_per_s if found else None,
                ttft_s=found.ttft_s if found else None,
                latency_p50_s=found.latency_p50_s if found else None,
                latency_p95_s=found.latency_p95_s if found else None,
                load_time_s=found.load_time_s if found else None,
                compile_time_s=found.compile_time_s if found else None,
                peak_memory_bytes=found.peak_memory_bytes if found else None,
                memory_per_rank=[per_rank[rank] for rank in sorted(per_rank)],
                memory_kind=found.memory_kind if found else None,
                ingest_done=run.ingest_done,
            )
        )
    return rows


def parse_generations(data: bytes) -> list[Generation]:
    """The lines of a generations file; a line that is not a generation is left out."""
    generations = []
    for line in data.decode("utf-8", errors="replace").splitlines():
        try:
            generations.append(Generation.model_validate_json(line))
        except ValidationError:
            continue
    return generations


def generations(session: Session, run_id: str) -> GenerationsPublic:
    """An inference run's generations; empty, not complete, until the run has written them."""
    run = get_run(session, run_id)
    if run.spec.get("kind") != RunKind.inference.value:
        raise NotFound(f"run {run_id} is not an inference run: it has no generations")
    try:
        data = rundirs.read_generations(Path(run.run_dir), rundirs.file_owner(run))
    except Unreadable as exc:
        raise NotFound(f"run {run_id}: {exc}") from None
    found = parse_generations(data)
    return GenerationsPublic(run_id=run.id, data=found, count=len(found), complete=bool(data))


# The form offers the newest finished gpt runs to generate from; an older one can still be named by id in the API.
MAX_CHECKPOINT_CHOICES = 100


def checkpoint_choices(session: Session, viewer: User) -> list[dict[str, str]]:
    """Completed gpt training runs on text that saved a checkpoint, of those the viewer may see: what an inference
    experiment can load."""
    query = runs_query(states=[RunState.completed], model=Model.gpt, viewer=viewer).limit(4 * MAX_CHECKPOINT_CHOICES)
    choices = []
    for run in session.exec(query).all():
        spec = run.spec
        trained_on_text = spec.get("kind", "train") == "train" and spec.get("dataset") == "text"
        if not trained_on_text or not has_checkpoint(Path(run.run_dir), rundirs.file_owner(run)):
            continue
        shape = ", ".join(f"{name} {spec[name]}" for name in ("width", "depth", "heads", "context") if spec.get(name))
        layout = f"{spec['strategy']} on {spec['gpus']} GPUs"
        choices.append({"id": run.id, "label": f"{run.id}: gpt {shape or 'of the default size'}, {layout}"})
        if len(choices) == MAX_CHECKPOINT_CHOICES:
            break
    return choices

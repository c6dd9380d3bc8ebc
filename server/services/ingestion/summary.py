"""A run's summary folded from its records (the latest figures beside the history), and the provenance its latest
start tells: plain objects in, plain objects changed, no database."""

from __future__ import annotations

from collections.abc import Iterable

from contract.records import EndRecord, EpochRecord, InferenceRecord, MetricRecord, StartRecord
from server.models import Run, RunSummary

# The kinds apply_record folds into the summary; the others (steps, most of a history) leave it as it is.
FOLDED_KINDS = frozenset({"start", "epoch", "inference", "end"})


def apply_record(summary: RunSummary, record: MetricRecord) -> None:
    """Fold one record into the run's latest figures."""
    if isinstance(record, StartRecord):
        summary.world_size = record.world_size
        summary.device = record.device
        summary.total_time_s = summary.end_status = None
    elif isinstance(record, EpochRecord):
        summary.epochs_done += 1
        if summary.first_epoch_time_s is None:
            summary.first_epoch_time_s = record.epoch_time_s
        summary.epoch_time_sum_s += record.epoch_time_s
        summary.last_train_loss = record.train_loss
        summary.last_val_loss = record.val_loss
        summary.last_val_accuracy = record.val_accuracy
        summary.last_samples_per_s = record.samples_per_s
        if record.peak_memory_bytes is not None:
            summary.peak_memory_bytes = max(summary.peak_memory_bytes or 0, record.peak_memory_bytes)
            summary.peak_memory_kind = record.memory_kind
        if record.peak_rss_bytes is not None:
            summary.peak_rss_bytes = max(summary.peak_rss_bytes or 0, record.peak_rss_bytes)
    elif isinstance(record, InferenceRecord):
        summary.peak_memory_bytes = record.peak_memory_bytes
        summary.peak_memory_kind = record.memory_kind
        summary.peak_rss_bytes = record.peak_rss_bytes
    elif isinstance(record, EndRecord):
        summary.total_time_s = record.total_time_s
        summary.end_status = record.status


def refold(summary: RunSummary, epochs: Iterable[EpochRecord]) -> None:
    """Rebuild the summary's epoch figures from the epochs that count, in epoch order."""
    for name in ("first_epoch_time_s", "last_train_loss", "last_val_loss", "last_val_accuracy"):
        setattr(summary, name, None)
    summary.last_samples_per_s = summary.peak_memory_bytes = summary.peak_memory_kind = summary.peak_rss_bytes = None
    summary.epochs_done, summary.epoch_time_sum_s = 0, 0.0
    for record in sorted(epochs, key=lambda epoch: epoch.epoch):
        apply_record(summary, record)


def record_provenance(run: Run, record: StartRecord) -> None:
    """The run's latest start tells what it runs in: a requeued job may have started on a newer image."""
    run.image = record.image
    run.image_digest = record.image_digest
    run.worker_version = record.worker_version
    run.torch_version = record.torch_version
    run.source_revision = record.source_revision

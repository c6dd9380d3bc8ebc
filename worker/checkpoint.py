"""Checkpoints in the run directory with torch.distributed.checkpoint, and resuming from the latest one.

Every rank writes its own shards (FSDP, TP and pipeline stages included) into one directory per epoch; a
checkpoint counts only once rank 0 has renamed it into place after all ranks finished writing, so a job
killed mid-save resumes from the previous one. Each checkpoint also keeps its epoch's metric record: a job
killed just after saving may not have had that line written to its output yet (it passes through Slurm's I/O
forwarding), so the next start prints it again and no epoch goes missing from the run's history.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn

from contract.records import EpochRecord
from contract.rundir import CHECKPOINT_RECORD_FILE, checkpoint_epoch, checkpoint_name, partial_checkpoint_name
from worker.stopping import StopSignal


def latest_epoch(directory: Path) -> int | None:
    """The last epoch with a complete checkpoint in `directory`, if any."""
    if not directory.is_dir():
        return None
    epochs = [epoch for p in directory.iterdir() if (epoch := checkpoint_epoch(p.name)) is not None]
    return max(epochs, default=None)


def checkpoint_path(directory: Path, epoch: int) -> Path:
    return directory / checkpoint_name(epoch)


class Checkpoints:
    def __init__(self, directory: Path, model: nn.Module, optimizer: torch.optim.Optimizer, is_main: bool) -> None:
        self.directory = directory
        self.model = model
        self.optimizer = optimizer
        self.is_main = is_main

    def latest(self) -> int | None:
        """The last epoch with a complete checkpoint, if any."""
        return latest_epoch(self.directory)

    def save(self, epoch: int, record: EpochRecord) -> None:
        # torch.distributed.checkpoint on use, as worker.parallel imports its strategies: it brings DTensor, and
        # most runs never save.
        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint.state_dict import get_state_dict

        model_state, optim_state = get_state_dict(self.model, self.optimizer)
        partial = self.directory / partial_checkpoint_name(epoch)
        if self.is_main:
            shutil.rmtree(partial, ignore_errors=True)
            partial.mkdir(parents=True)
        dist.barrier()
        dcp.save({"model": model_state, "optim": optim_state}, checkpoint_id=partial)  # type: ignore[attr-defined]
        dist.barrier()  # every rank has written its shards
        if self.is_main:
            (partial / CHECKPOINT_RECORD_FILE).write_text(record.model_dump_json())
            partial.rename(checkpoint_path(self.directory, epoch))
        dist.barrier()

    def record(self, epoch: int) -> EpochRecord | None:
        """The metric record of the epoch a checkpoint holds (None for checkpoints saved before it was kept)."""
        path = checkpoint_path(self.directory, epoch) / CHECKPOINT_RECORD_FILE
        return EpochRecord.model_validate_json(path.read_text()) if path.is_file() else None

    def load(self, epoch: int) -> None:
        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

        model_state, optim_state = get_state_dict(self.model, self.optimizer)
        # dcp.load fills the state's tensors in place, resharded to this run's layout.
        dcp.load({"model": model_state, "optim": optim_state}, checkpoint_id=checkpoint_path(self.directory, epoch))  # type: ignore[attr-defined]
        set_state_dict(self.model, self.optimizer, model_state_dict=model_state, optim_state_dict=optim_state)


def any_rank(holds: bool, device: torch.device) -> bool:
    """Whether `holds` is true on any rank: for decisions every rank must take alike, as saving is collective."""
    flag = torch.tensor([1 if holds else 0], device=device)
    dist.all_reduce(flag, op=dist.ReduceOp.MAX)
    return bool(flag.item())


def stop_agreed(stop: StopSignal, device: torch.device) -> bool:
    """Whether any rank was signalled: all ranks must stop together."""
    return any_rank(stop.signal is not None, device)

"""The run directory, the only channel between the server and a job: every name in it, and what the job exits with.

Compute nodes usually cannot reach the login node, so all the worker tells the server goes through these files
(on a file system both share), and the batch script tells the worker what it needs through these variables.
"""

from __future__ import annotations

import re

# Files the server writes before submitting. Where jobs run as their users, the job makes the directory and writes
# the spec and prompts itself from its batch script (server/render.py), and the server keeps the script elsewhere.
SPEC_FILE = "spec.json"  # the run spec (an inference run reads its checkpoint's training spec by this name too)
SCRIPT_FILE = "job.sbatch"
PROMPTS_FILE = "prompts.txt"  # an inference run's prompts, one per line (in the script only as base64, if at all)
# Files the job writes.
OUTPUT_FILE = "output.log"  # the job's stdout and stderr, with the worker's metric lines
GENERATIONS_FILE = "generations.jsonl"  # what an inference run generated, one prompt per line
CHECKPOINTS_DIR = "checkpoints"  # a training run's checkpoints, one directory per epoch
# Every rank's Python stacks, dumped on STACKS_SIGNAL (contract/stacks.py): one file per rank, appended per dump.
STACKS_DIR = "stacks"
# The signal that asks every rank for its stacks: not the checkpoint's (SIGUSR1, SIGTERM; worker/stopping.py).
STACKS_SIGNAL = "USR2"

# A checkpoint counts once its directory has this name: rank 0 renames it into place after every rank wrote.
_COMPLETE_CHECKPOINT = re.compile(r"^epoch-(\d+)$")
# Inside a complete checkpoint: the metric record of the epoch it holds.
CHECKPOINT_RECORD_FILE = "record.json"


def stacks_name(rank: int) -> str:
    """The file in STACKS_DIR that rank `rank` dumps its stacks to."""
    return f"rank-{rank}.txt"


def checkpoint_name(epoch: int) -> str:
    """The directory name of the complete checkpoint of `epoch`."""
    return f"epoch-{epoch}"


def partial_checkpoint_name(epoch: int) -> str:
    """Where the checkpoint of `epoch` is written before it is complete (hidden, and never taken for one)."""
    return f".epoch-{epoch}.partial"


def checkpoint_epoch(name: str) -> int | None:
    """The epoch a complete checkpoint's directory name holds; None for anything else in the directory."""
    match = _COMPLETE_CHECKPOINT.match(name)
    return int(match.group(1)) if match else None


# EX_TEMPFAIL: the worker stopped early on purpose (Slurm signalled the time limit or a preemption) after saving a
# checkpoint; the batch script requeues the job on it.
EXIT_INTERRUPTED = 75
# A user's program, or its working directory, is not there: the batch script stops before launching anything, with
# a line on stderr that names what is missing (2, as a shell's own builtins exit on such a misuse).
EXIT_NO_PROGRAM = 2
# The image file a run again is pinned to is no longer the one its original ran on: the batch script stops before
# launching, with a line on stderr that names the file and the digest it should have.
EXIT_IMAGE_CHANGED = 3

# What the batch script tells the worker: the image it runs in and, where the runtime can tell, its digest.
IMAGE_VAR = "SCALELAB_IMAGE"
DIGEST_VAR = "SCALELAB_IMAGE_DIGEST"
# What the worker image tells it: the source revision it was built from.
REVISION_VAR = "SCALELAB_SOURCE_REVISION"

# What the batch script tells a user's program (contract.program) besides torch.distributed's variables: the
# strategy it is compared under (a label), the seed of its repeat, its run's id and directory.
STRATEGY_VAR = "SCALELAB_STRATEGY"
SEED_VAR = "SCALELAB_SEED"
RUN_ID_VAR = "SCALELAB_RUN_ID"
RUN_DIR_VAR = "SCALELAB_RUN_DIR"

# Test-only: seconds the built-in worker sleeps in each training step, counted in its epoch time. The regression
# test's end-to-end check slows a run of an unchanged spec with it, as a slower cluster would; set in the environment
# of whatever runs sbatch (Slurm passes it on), never by a request. Nothing else reads it.
TEST_ONLY_STEP_DELAY_VAR = "SCALELAB_TEST_ONLY_STEP_DELAY_S"
TEST_ONLY_STEP_DELAY_MAX_S = 10.0

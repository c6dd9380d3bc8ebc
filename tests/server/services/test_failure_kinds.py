"""The failure kinds' conditions on synthetic endings: each kind from the words Slurm, torch, Python and the launchers
really print (the gloo and import lines as the local Slurm's jobs printed them), each with its sentence."""

from __future__ import annotations

import pytest

from contract.states import FailureKind, RunState
from server.models.run import FAILURE_DETAIL_CHARS
from server.runstate import FAILED_STATES
from server.services.failure_kinds import ADVICE, Ending, classify

_IMPORT = [
    "Traceback (most recent call last):",
    '  File "<string>", line 1, in <module>',
    "ModuleNotFoundError: No module named 'no_such_module'",
]
_PROGRAM = [
    "Traceback (most recent call last):",
    '  File "train.py", line 3, in <module>',
    "ZeroDivisionError: division by zero",
    "srun: error: vm: task 0: Exited with exit code 1",
]
# Two gloo ranks, rank 1 late to an all_reduce with a 3 s timeout (what the local Slurm's job printed).
_GLOO = [
    "[rank0]: Traceback (most recent call last):",
    "[rank0]:     work.wait()",
    "[rank0]: RuntimeError: [/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:78] "
    "Timed out waiting 3000ms for recv operation to complete",
    "srun: error: vm: task 0: Exited with exit code 1",
    "[rank1]: RuntimeError: [/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:561] Connection "
    "closed by peer [127.0.0.1]:34223. This is typically caused by a remote worker crashing.",
]
_NCCL = [
    "[rank0]:[E ProcessGroupNCCL.cpp:616] [Rank 0] Watchdog caught collective operation timeout: "
    "WorkNCCL(SeqNum=7, OpType=ALLREDUCE, Timeout(ms)=600000) ran for 600123 milliseconds before timing out.",
]
_CUDA_OOM = [
    "Traceback (most recent call last):",
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; 79.15 GiB total capacity)",
]
_CGROUP_OOM = [
    "slurmstepd: error: Detected 1 oom-kill event(s) in StepId=14604003.0. Some of your processes may have been "
    "killed by the cgroup out-of-memory handler.",
    "srun: error: node7: task 0: Out Of Memory",
]
# torch's host allocator, as it refused a tensor larger than the machine (what this machine's torch printed).
_CPU_OOM = (
    "RuntimeError: [enforce fail at alloc_cpu.cpp:127] err == 0. DefaultCPUAllocator: can't allocate memory: you "
    "tried to allocate 1125899906842624 bytes. Error code 12 (Cannot allocate memory)"
)

CASES = [
    pytest.param(Ending(RunState.timeout, "0:15", "TimeLimit"), FailureKind.time_limit, "TimeLimit", id="timeout"),
    pytest.param(Ending(RunState.node_fail, "0:0", "NodeDown"), FailureKind.node_failure, "NodeDown", id="node_fail"),
    pytest.param(Ending(RunState.out_of_memory, "0:125"), FailureKind.out_of_memory, "OUT_OF_MEMORY", id="slurm-oom"),
    pytest.param(Ending(RunState.failed, "1:0", None, _CUDA_OOM), FailureKind.out_of_memory, "CUDA out of", id="cuda"),
    pytest.param(Ending(RunState.failed, "0:9", None, _CGROUP_OOM), FailureKind.out_of_memory, "oom-kill", id="cgroup"),
    pytest.param(
        Ending(RunState.failed, "1:0", None, ["RuntimeError: CUDA out of memory. Tried to allocate 20.00 MiB"]),
        FailureKind.out_of_memory,
        "Tried to allocate",
        id="worker-end-record",
    ),
    pytest.param(
        Ending(RunState.failed, "1:0", None, ["[rank0]: " + _CPU_OOM]),
        FailureKind.out_of_memory,
        "can't allocate",
        id="host",
    ),
    pytest.param(
        Ending(RunState.failed, "1:0", None, _IMPORT), FailureKind.import_error, "no_such_module", id="import"
    ),
    pytest.param(
        Ending(RunState.failed, "1:0", None, ["ImportError: libcuda.so.1: cannot open shared object file"]),
        FailureKind.import_error,
        "libcuda",
        id="driver",
    ),
    pytest.param(Ending(RunState.failed, "1:0", None, _GLOO), FailureKind.collective_timeout, "3000ms", id="gloo"),
    pytest.param(Ending(RunState.failed, "0:6", None, _NCCL), FailureKind.collective_timeout, "Watchdog", id="nccl"),
    pytest.param(Ending(RunState.failed, "1:0", None, _PROGRAM), FailureKind.program_error, "ZeroDivision", id="raise"),
    pytest.param(
        Ending(
            RunState.failed,
            "127:0",
            None,
            ["/var/spool/slurmd/job01/slurm_script: line 9: trian.py: command not found"],
        ),
        FailureKind.launcher_error,
        "command not found",
        id="not-found",
    ),
    pytest.param(Ending(RunState.failed, "127:0"), FailureKind.launcher_error, "code 127", id="exit-127"),
    pytest.param(
        Ending(RunState.failed, "255:0", None, ["FATAL:   While checking container encryption: could not open image"]),
        FailureKind.launcher_error,
        "FATAL",
        id="apptainer",
    ),
    pytest.param(
        Ending(
            RunState.failed,
            "1:0",
            None,
            [
                "torch.distributed.elastic.multiprocessing.errors.ChildFailedError:",
                "srun: error: vm: task 0: Exited with exit code 1",
            ],
        ),
        FailureKind.launcher_error,
        "ChildFailedError",
        id="torchrun",
    ),
    pytest.param(
        Ending(RunState.failed, "3:0", None, ["loss went to nan"]), FailureKind.program_error, "code 3", id="exit"
    ),
    pytest.param(Ending(RunState.failed, "0:11"), FailureKind.program_error, "signal 11", id="segfault"),
    pytest.param(Ending(RunState.failed), FailureKind.launcher_error, "printed anything", id="nothing"),
]


@pytest.mark.parametrize(("ending", "kind", "quoted"), CASES)
def test_each_kind_from_its_evidence_with_its_sentence(ending: Ending, kind: FailureKind, quoted: str) -> None:
    verdict = classify(ending)
    assert verdict is not None
    assert verdict.kind is kind
    assert quoted in verdict.evidence
    assert verdict.detail.endswith(ADVICE[kind])
    assert quoted in verdict.detail


def test_every_kind_has_a_sentence_and_every_one_but_hung_a_condition() -> None:
    assert set(ADVICE) == set(FailureKind)
    found = {case.values[1] for case in CASES}
    assert found == set(FailureKind) - {FailureKind.hung}  # the watchdog's, never decided here


@pytest.mark.parametrize("state", [RunState.cancelled, RunState.preempted, RunState.submit_failed, RunState.completed])
def test_an_end_that_is_not_a_failure_has_no_kind(state: RunState) -> None:
    assert state not in FAILED_STATES
    assert classify(Ending(state, "1:0", None, _IMPORT)) is None


def test_the_cause_comes_before_its_consequences() -> None:
    # A rank that ran out of memory leaves the others waiting in a collective: memory is the cause.
    assert classify(Ending(RunState.failed, "1:0", None, [*_GLOO, *_CUDA_OOM])).kind is FailureKind.out_of_memory  # type: ignore[union-attr]
    # srun's line follows every failed task; a traceback says what failed.
    assert classify(Ending(RunState.failed, "1:0", None, _PROGRAM)).kind is FailureKind.program_error  # type: ignore[union-attr]


def test_a_strangers_line_is_quoted_bounded() -> None:
    line = "ValueError: " + "x" * 100_000
    verdict = classify(Ending(RunState.failed, "1:0", None, [line]))
    assert verdict is not None and verdict.kind is FailureKind.program_error
    assert len(verdict.detail) <= FAILURE_DETAIL_CHARS
    assert len(verdict.evidence) < 600

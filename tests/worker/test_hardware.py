"""The hardware each process got: parsing, merging per host, and what a real run reports."""

from __future__ import annotations

import os

import pytest

from tests.worker.launch import run_worker
from worker.hardware import ProcessHardware, by_node, cpu_ranges, physical_cores

pytestmark = pytest.mark.torch

CPUINFO = """processor\t: 0
physical id\t: 0
core id\t: 0

processor\t: 1
physical id\t: 0
core id\t: 0

processor\t: 2
physical id\t: 0
core id\t: 1

processor\t: 3
physical id\t: 1
core id\t: 0
"""


def test_hyperthreads_of_one_core_count_once():
    assert physical_cores(CPUINFO) == 3


def test_cpuinfo_without_topology_is_unknown():
    assert physical_cores("processor\t: 0\nmodel name\t: x\n") is None


@pytest.mark.parametrize(
    ("cpus", "text"), [({0, 1, 2, 3, 8}, "0-3,8"), ({5}, "5"), ({0, 2, 3, 4, 7, 8}, "0,2-4,7-8"), (set(), "")]
)
def test_cpu_ranges(cpus, text):
    assert cpu_ranges(cpus) == text


def process(rank: int, host: str, cpus: set[int], threads: int = 1) -> ProcessHardware:
    return ProcessHardware(rank, host, 2, 4, frozenset(cpus), threads, None)


def test_ranks_of_a_host_share_its_cpus():
    nodes = by_node([process(2, "b", {0}), process(0, "a", {0, 1}), process(1, "a", {1, 2}, threads=2)])
    a, b = nodes
    assert (a.host, a.ranks, a.cpus_given, a.affinity, a.intra_op_threads) == ("a", [0, 1], 3, "0-2", 2)
    assert a.oversubscribed  # 2 processes x 2 threads on 3 CPUs
    assert (b.host, b.ranks, b.cpus_given, b.oversubscribed) == ("b", [2], 1, False)


def hardware_of(tmp_path, processes: int):
    run = run_worker(tmp_path, processes, model="mlp", strategy="ddp", epochs=1, steps_per_epoch=2)
    assert run.returncode == 0, run.stderr[-3000:]
    (start,) = run.of_kind("start")
    (node,) = start.nodes_hardware
    assert node.ranks == list(range(processes))
    assert node.hardware_threads == os.cpu_count()
    assert node.cpus_given == len(os.sched_getaffinity(0))
    assert node.physical_cores is None or node.physical_cores <= node.hardware_threads
    # limit_cpu_threads shares the CPUs out, but never gives a process less than one thread.
    assert node.intra_op_threads == max(1, node.cpus_given // processes)
    return start, node


def test_four_processes_on_few_cores_are_oversubscribed(tmp_path):
    start, node = hardware_of(tmp_path, 4)
    if node.cpus_given >= 4:
        pytest.skip(f"{node.cpus_given} CPUs given: four processes each get their own; CI's 2 cores oversubscribe")
    assert node.oversubscribed and start.oversubscribed_hosts() == [node.host]


def test_one_process_is_not_oversubscribed(tmp_path):
    start, node = hardware_of(tmp_path, 1)
    assert not node.oversubscribed and start.oversubscribed_hosts() == []

"""Each flag's condition and sentence, from plain values: no database, no run, no records read."""

from __future__ import annotations

from collections.abc import Set
from typing import Any

import pytest

from contract.records import NodeHardware, StartRecord
from contract.spec import RunSpec
from server.models import Flag, FlagCode
from server.services import flags
from server.services.statistics import Point


def start(*nodes: NodeHardware) -> StartRecord:
    return StartRecord(
        world_size=sum(len(node.ranks) for node in nodes) or 1, nodes=len(nodes) or 1, device="cpu", backend="gloo",
        strategy="ddp", torch_version="2", hostname="n1", nodes_hardware=list(nodes) or None,
    )  # fmt: skip


def node(host: str, ranks: int, threads: int, cpus: int) -> NodeHardware:
    return NodeHardware(
        host=host, ranks=list(range(ranks)), physical_cores=cpus, hardware_threads=cpus, cpus_given=cpus,
        affinity=f"0-{cpus - 1}", intra_op_threads=threads,
    )  # fmt: skip


def facts(**changes: Any) -> flags.RunFacts:
    """A completed run of 4 planned epochs, all done, long and quiet enough to raise nothing."""
    quiet: dict[str, Any] = {
        "final": True, "ingest_done": True, "silent": False, "epochs_done": 4, "planned_epochs": 4,
        "epoch_times": [3.0, 2.0, 2.0, 2.0], "median_epoch_s": 2.0, "step_time_slowest_s": 0.1,
        "step_time_fastest_s": 0.1, "start": start(),
    }  # fmt: skip
    return flags.RunFacts(**{**quiet, **changes})


def test_a_quiet_run_raises_nothing():
    assert flags.run_flags(facts()) == []


# ---- a point's flags ------------------------------------------------------------------------------------------------


def test_a_point_above_ideal_is_superlinear():
    assert flags.check_superlinear(flags.SUPERLINEAR, 2, 1) is None
    flag = flags.check_superlinear(5.77, 2, 1)
    assert flag is not None and (flag.code, flag.severity) == (FlagCode.superlinear, "warning")
    assert flag.message.startswith("efficiency 5.77 at 2 GPUs is above 1: better than ideal against 1.")
    assert "isolation exclusive and repeats >= 3" in flag.message


def test_a_point_whose_interval_holds_a_neighbours_mean_is_noisy():
    quiet = Point(gpus=1, mean=10.0, ci_low=9.9, ci_high=10.1, n=3)
    wide = Point(gpus=2, mean=9.0, ci_low=5.0, ci_high=11.0, n=3)
    single = Point(gpus=4, mean=4.0, ci_low=None, ci_high=None, n=1)
    raised = flags.check_noisy([quiet, wide, single])
    assert list(raised) == [2]
    assert raised[2].code == FlagCode.noisy
    assert "the point at 2 GPUs is noisy: its 95 % interval (n = 3) reaches" in raised[2].message
    assert flags.check_noisy([quiet, single]) == {}


def test_only_a_points_flags_are_shown_beside_it():
    point = [flags.noisy(2, 3), flags.superlinear(1.2, 2, 1)]
    assert flags.point_flags([flags.too_short("x"), *point, flags.no_metrics()]) == point


# ---- a run's own flags ----------------------------------------------------------------------------------------------


def test_a_run_that_did_fewer_epochs_than_planned_is_incomplete():
    assert flags.check_incomplete(4, 4, final=True) is None
    assert flags.check_incomplete(0, 4, final=False) is None  # nothing done yet: nothing to say
    assert flags.check_incomplete(1, None, final=True) is None  # a program: how many it runs is its own
    ended = flags.check_incomplete(4, 6, final=True)
    assert ended is not None and ended.severity == "warning" and ended.message.startswith("ran 4 of 6 epochs")
    running = flags.check_incomplete(2, 6, final=False)
    assert running is not None and running.severity == "info"
    assert running.message == "still running: 2 of 6 epochs so far; its figures will change."
    assert FlagCode.incomplete in {flag.code for flag in flags.run_flags(facts(epochs_done=3))}


def test_a_silent_program_is_flagged_once_its_output_is_read():
    assert flags.check_no_metrics(silent=True, ingest_done=False) is None
    assert flags.check_no_metrics(silent=False, ingest_done=True) is None
    flag = flags.check_no_metrics(silent=True, ingest_done=True)
    assert flag == flags.no_metrics()
    assert flag.severity == "warning" and "[METRIC]" in flag.message and "contract/metrics.py" in flag.message


def test_too_few_or_too_short_timed_epochs_are_too_short():
    few = flags.check_too_short([5.0, 3.5], final=True)
    assert few is not None and few.code == FlagCode.too_short
    assert few.message == (
        "too short to time: only 1 timed epoch (the first is warm-up and not timed); run at least 4 epochs so that "
        "3 are timed."
    )
    short = flags.check_too_short([5.0, 0.3, 0.3, 0.3], final=True)
    assert short is not None and "a timed epoch took 0.30 s, under 1 s" in short.message
    assert flags.check_too_short([5.0, 2.0, 2.0, 2.0], final=True) is None
    assert flags.check_too_short([], final=True) is None


def test_a_live_run_is_too_short_only_once_it_has_timed_enough_epochs():
    assert flags.check_too_short([5.0, 2.0], final=False) is None
    assert flags.check_too_short([5.0, 0.3, 0.3], final=False) is None
    assert flags.check_too_short([5.0, 0.3, 0.3, 0.3], final=False) is not None  # as many timed as it takes


def test_a_first_epoch_longer_than_half_the_timed_work_dominates():
    # 60 s of first epoch against a median of 2 s over 3 timed epochs: 58 s of excess against 3 s.
    flag = flags.check_warmup_dominated([60.0, 2.0, 2.0, 2.0], 2.0)
    assert flag is not None and (flag.code, flag.severity) == (FlagCode.warmup_dominated, "info")
    assert flag.message.startswith(
        "the first epoch (warm-up: start-up, allocation, compilation) took 60.00 s, 58.00 s more than a timed "
        "epoch's median (2.00 s): more than half of 3 timed epochs at that median (6.00 s)."
    )
    assert flags.check_warmup_dominated([5.0, 2.0, 2.0, 2.0], 2.0) is None  # 3 s of excess, not more than 3 s
    assert flags.check_warmup_dominated([60.0], None) is None  # nothing timed
    assert flags.check_warmup_dominated([60.0, 2.0], None) is None


def test_the_warmup_message_weighs_what_its_rule_weighs():
    """Issue 31: 4.4 s of first epoch against timed epochs of 0.5 s but for one disturbed 15 s one (22 s together):
    the rule weighs the median x count (1.5 s), so the message must not say the sum, nor call it "most of the run"."""
    flag = flags.check_warmup_dominated([4.4, 0.5, 15.0, 0.5, 0.5], 0.5)
    assert flag is not None
    assert "3.90 s more than a timed epoch's median (0.50 s)" in flag.message, flag.message
    assert "4 timed epochs at that median (2.00 s)" in flag.message, flag.message
    assert "16.50" not in flag.message and "most of the run" not in flag.message


def test_a_rank_slower_than_the_fastest_by_more_than_the_threshold_straggles():
    assert flags.check_straggler(0.08 * flags.STRAGGLER, 0.08) is None
    assert flags.check_straggler(None, 0.08) is None and flags.check_straggler(0.13, None) is None
    flag = flags.check_straggler(0.13, 0.08)
    assert flag is not None and flag.code == FlagCode.straggler
    assert "the slowest rank took 130.0 ms per step against the fastest's 80.0 ms (1.62x)" in flag.message


def test_more_processes_x_threads_than_cpus_given_is_oversubscribed():
    assert flags.check_oversubscribed(None) is None
    assert flags.check_oversubscribed(start()) is None  # a worker before the hardware was told
    assert flags.check_oversubscribed(start(node("n1", 2, 1, 2))) is None
    flag = flags.check_oversubscribed(start(node("n1", 4, 1, 2), node("n2", 2, 1, 2), node("n3", 8, 2, 4)))
    assert flag is not None and flag.code == FlagCode.oversubscribed
    # Both crowded hosts named; the most crowded one (16 threads on 4 CPUs) quoted.
    assert flag.message.startswith("oversubscribed on n1, n3: 8 processes x 2 threads on 4 CPUs given")
    assert FlagCode.oversubscribed in {f.code for f in flags.run_flags(facts(start=start(node("n1", 4, 1, 2))))}


def test_other_jobs_on_the_runs_nodes_make_it_shared():
    assert flags.check_shared_node(None) is None and flags.check_shared_node([]) is None
    flag = flags.check_shared_node(["41", "42"])
    assert flag is not None and flag.code == FlagCode.shared_node
    assert flag.message.startswith("other jobs ran on the run's nodes while it ran (41, 42)")
    assert "Run the experiment with isolation exclusive" in flag.message


def test_shared_node_does_not_advise_the_isolation_the_experiment_already_asked_for():
    flag = flags.check_shared_node(["41"], exclusive=True)
    assert flag is not None and flag.code == FlagCode.shared_node
    assert "with isolation exclusive" not in flag.message, flag.message
    assert "asked for isolation exclusive, and other jobs still shared the nodes" in flag.message
    assert "run it again when the nodes are quiet" in flag.message


def test_a_runs_own_flags_are_each_condition_raised():
    loud = facts(
        final=False, epochs_done=4, planned_epochs=6, epoch_times=[60.0, 0.3, 0.3, 0.3, 0.3], median_epoch_s=0.3,
        step_time_slowest_s=0.13, step_time_fastest_s=0.08, start=start(node("n1", 4, 1, 2)),
    )  # fmt: skip
    raised = {flag.code for flag in flags.run_flags(loud)}
    assert raised == {"incomplete", "too_short", "warmup_dominated", "straggler", "oversubscribed"}
    assert {flag.code for flag in flags.run_flags(facts(silent=True, epochs_done=0, planned_epochs=None))} == {
        "no_metrics"
    }


# ---- runs that should agree -----------------------------------------------------------------------------------------


def first_loss(run_id: str, loss: float | None, gpus: int = 2, same: str | None = "e", precision: str = "fp32"):
    return flags.FirstLoss(run_id=run_id, same_model=same, gpus=gpus, precision=precision, loss=loss)


def test_runs_that_should_agree_on_the_first_loss_and_do_not_are_flagged_against_the_fewest_gpus():
    runs = [
        first_loss("two", 0.5, gpus=2),
        first_loss("one", 0.5 * (1 + 1e-7), gpus=1),  # the reference: fewest GPUs
        first_loss("off", 0.6, gpus=4),
        first_loss("other", 0.9, same="f"),  # another model: alone in its group
        first_loss("program", 0.1, same=None),  # a program's runs need not agree
        first_loss("none", None),  # no first epoch
    ]
    raised = flags.check_loss_mismatches(runs)
    assert list(raised) == ["off"]
    assert raised["off"].message.startswith(
        "the first epoch's training loss 0.6 differs from 0.5000001 of run one, which has the same seed, data and "
        "global batch, by more than the relative 1e-05"
    )


def test_half_precision_is_allowed_a_wider_loss_difference():
    assert flags.LOSS_TOLERANCE["bf16"] > flags.LOSS_TOLERANCE["fp32"]
    runs = [first_loss("a", 0.5, gpus=1, precision="bf16"), first_loss("b", 0.505, precision="bf16")]
    assert flags.check_loss_mismatches(runs) == {}
    assert list(flags.check_loss_mismatches([first_loss("a", 0.5, gpus=1), first_loss("b", 0.505)])) == ["b"]


def test_runs_that_differ_only_in_layout_should_train_the_same_model():
    ddp = RunSpec.model_validate({"gpus": 1, "strategy": "ddp"})
    fsdp = RunSpec.model_validate({"gpus": 4, "strategy": "fsdp"})
    other_seed = RunSpec.model_validate({"gpus": 1, "strategy": "ddp", "seed": 7})
    assert flags.same_model("e", ddp) == flags.same_model("e", fsdp)
    assert flags.same_model("e", ddp) != flags.same_model("e", other_seed)
    assert flags.same_model("e", ddp) != flags.same_model("f", ddp)
    program = RunSpec.model_validate({"kind": "program", "program": {"command": ["python", "t.py"], "workdir": "/w"}})
    assert flags.same_model("e", program) is None


# ---- order ----------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("twice", [False, True])
def test_flags_come_warnings_first_each_code_together_and_once(twice: bool):
    warm = flags.warmup_dominated(60.0, 2.0, 3)
    given: list[Flag] = [warm, flags.straggler(0.13, 0.08), flags.noisy(2, 3), flags.incomplete(1, 2, final=True)]
    ordered = flags.worst_first(given + given if twice else given)
    assert [flag.code for flag in ordered] == ["incomplete", "noisy", "straggler", "warmup_dominated"]


# ---- shared_workdir: a run found what a sibling wrote ----------------------------------------------------------


def use(run_id: str, found: Set[flags.FileVersion] = frozenset(), wrote: Set[flags.FileVersion] = frozenset(),
        experiment: str = "e1") -> flags.WorkdirUse:  # fmt: skip
    return flags.WorkdirUse(run_id, experiment, frozenset(found), frozenset(wrote))


SNAPSHOT = ("snapshot.pt", 1_700_000_000_123_456_789, 4096)


def test_runs_that_started_with_the_version_a_sibling_wrote_are_flagged_naming_the_file_and_the_writer():
    raised = flags.check_shared_workdir(
        [use("r1", wrote={SNAPSHOT}), use("r2", found={SNAPSHOT, ("train.py", 5, 10)}), use("r3", found={SNAPSHOT})]
    )
    assert set(raised) == {"r2", "r3"}
    (flag,) = raised["r2"]
    assert flag == raised["r3"][0] and flag.code == FlagCode.shared_workdir and flag.severity == "warning"
    assert flag.message.startswith("runs r2 and r3 started with snapshot.pt written by run r1 in the workdir")
    assert "Use cwd run_dir, or write under SCALELAB_RUN_DIR." in flag.message


def test_no_flag_for_another_version_another_experiment_a_runs_own_file_or_nothing_known():
    rewritten = (SNAPSHOT[0], SNAPSHOT[1] + 1, SNAPSHOT[2])  # the same name, another version: not the one r1 left
    assert not flags.check_shared_workdir([use("r1", wrote={SNAPSHOT}), use("r2", found={rewritten})])
    assert not flags.check_shared_workdir([use("r1", wrote={SNAPSHOT}), use("r2", found={SNAPSHOT}, experiment="e2")])
    # A requeued run that finds what its own first attempt wrote found nothing of a sibling's.
    assert not flags.check_shared_workdir([use("r1", found={SNAPSHOT}, wrote={SNAPSHOT})])
    assert not flags.check_shared_workdir([use("r1"), use("r2")])


def test_the_sentence_names_a_few_files_and_counts_the_others():
    wrote = {(f"part-{at}.bin", at, 1) for at in range(5)}
    (flag,) = flags.check_shared_workdir([use("r1", wrote=wrote), use("r2", found=wrote)])["r2"]
    assert "run r2 started with part-0.bin, part-1.bin, part-2.bin and 2 more written by run r1" in flag.message


# ---- CPUs: more threads than CPUs given, or more CPU time than allocated ---------------------------------------


def test_a_programs_batch_script_hardware_is_judged_by_the_same_rule():
    """The batch script's record of a program: 4 processes given OMP_NUM_THREADS=1 on a node whose affinity is 2
    CPUs, though Slurm allocated 4 (the local Slurm binds nothing)."""
    crowded = NodeHardware(
        host="vm", ranks=[0, 1, 2, 3], physical_cores=2, hardware_threads=2, cpus_given=2, affinity="0-1",
        intra_op_threads=1, cpus_allocated=4,
    )  # fmt: skip
    flag = flags.check_oversubscribed(start(crowded))
    assert flag is not None and "4 processes x 1 threads on 2 CPUs" in flag.message
    assert flags.check_oversubscribed(start(crowded.model_copy(update={"ranks": [0, 1]}))) is None


def test_more_cpu_time_than_allocated_is_flagged_past_a_margin_for_whole_seconds():
    assert flags.check_cpus_beyond_allocation(None, 1) is None
    assert flags.check_cpus_beyond_allocation(1.32, None) is None
    assert flags.check_cpus_beyond_allocation(flags.CPUS_BEYOND, 1) is None
    flag = flags.check_cpus_beyond_allocation(1.32, 1)
    assert flag is not None and (flag.code, flag.severity) == (FlagCode.cpus_beyond_allocation, "warning")
    assert "1.32x the CPU time of the 1 CPU Slurm" in flag.message
    assert "speed-up against it too low" in flag.message and "OMP_NUM_THREADS" in flag.message


# ---- time to accuracy ---------------------------------------------------------------------------------------------


def outcome(reached: bool, stopped: bool = False) -> flags.TargetOutcome:
    return flags.TargetOutcome("val_accuracy >= 0.95", reached, 0.93 if not reached else 0.96, 5, stopped)


def test_a_run_that_ended_without_reaching_its_target_is_flagged_once_all_its_output_is_read():
    flag = flags.check_target_not_reached(outcome(False), ended=True, epochs=6)
    assert flag is not None and flag.code == FlagCode.target_not_reached
    assert "6 epochs without reaching val_accuracy >= 0.95 (its best was 0.93 at epoch 5)" in flag.message
    assert "more epochs" in flag.message and "lr_scaling" in flag.message
    assert flags.check_target_not_reached(outcome(False), ended=False, epochs=6) is None
    assert flags.check_target_not_reached(outcome(True), ended=True, epochs=6) is None
    assert flags.check_target_not_reached(None, ended=True, epochs=6) is None


def test_a_run_stopped_at_its_target_is_not_incomplete():
    assert flags.check_incomplete(3, 6, True, stopped_at_target=True) is None
    assert flags.check_incomplete(3, 6, True) is not None


def epochs_point(gpus: int, mean: float, half: float | None = None, n: int = 1) -> Point:
    low, high = (None, None) if half is None else (mean - half, mean + half)
    return Point(gpus=gpus, mean=mean, ci_low=low, ci_high=high, n=n)


def test_single_runs_differing_by_a_whole_epoch_or_more_are_flagged_saying_the_noise_is_unknown():
    slower = flags.check_convergence(epochs_point(4, 5), epochs_point(1, 4))
    assert slower is not None and slower.code == FlagCode.slower_convergence and slower.severity == "info"
    assert "noise of repeats is unknown" in slower.message
    faster = flags.check_convergence(epochs_point(4, 3), epochs_point(1, 4))
    assert faster is not None and faster.code == FlagCode.converged_suspiciously_fast
    assert faster.severity == "warning" and "data split" in faster.message
    assert flags.check_convergence(epochs_point(4, 4), epochs_point(1, 4)) is None
    assert flags.check_convergence(epochs_point(4, 4.5, 1, 2), epochs_point(1, 4)) is None  # half an epoch


def test_repeats_are_flagged_only_where_their_intervals_part():
    assert flags.check_convergence(epochs_point(4, 6, 1.5, 3), epochs_point(1, 4, 1, 3)) is None  # 4.5-7.5 | 3-5
    slower = flags.check_convergence(epochs_point(4, 7, 1, 3), epochs_point(1, 4, 1, 3))
    assert slower is not None and slower.code == FlagCode.slower_convergence and "intervals apart" in slower.message
    faster = flags.check_convergence(epochs_point(4, 2, 0.5, 3), epochs_point(1, 4, 1, 3))
    assert faster is not None and faster.code == FlagCode.converged_suspiciously_fast


def test_the_time_to_target_flags_are_not_the_throughput_advices():
    assert flags.TARGET_CODES.isdisjoint(flags.POINT_CODES)


def test_a_regression_verdict_is_a_flag_with_its_sentence():
    slower = flags.check_regression("regressed", "ddp", 4, 1.5, (1.4, 1.6), 0.05, True)
    assert slower is not None and slower.code == "regressed" and slower.severity == "warning"
    assert "ddp at 4 GPUs regressed: 1.50x" in slower.message
    assert "learned from the profile's A/A pairs" in slower.message
    faster = flags.check_regression("improved", "ddp", 4, 0.5, (0.4, 0.6), 0.22, False)
    assert faster is not None and faster.severity == "info" and "the default" in faster.message
    assert faster.message.count("22%") == 1
    for quiet in ("indistinguishable", "no_verdict"):
        assert flags.check_regression(quiet, "ddp", 4, 1.0, (0.9, 1.1), 0.05, True) is None
    assert "too_short" in flags.reference_flagged(["too_short", "too_short"])


# ---- fabric_degraded ------------------------------------------------------------------------------------------------

EXPECTED = flags.FabricExpected(
    low_bytes_per_s=2e9, high_bytes_per_s=5e9, source="nccl-tests on the nodes, 2026-11", basis="profile_reference"
)


def test_a_pre_flight_below_the_band_is_flagged_with_measured_expected_and_source():
    flag = flags.check_fabric_degraded("inter_node", 64 * 2**20, 1.2e9, EXPECTED)
    assert flag is not None and (flag.code, flag.severity) == (FlagCode.fabric_degraded, "warning")
    assert "measured 1.2 GB/s bus bandwidth (inter_node, all-reduce of 64 MiB)" in flag.message
    assert "below the 2-5 GB/s expected (nccl-tests on the nodes, 2026-11)" in flag.message


@pytest.mark.parametrize("measured", [2e9, 3.5e9, 5e9, 9e9])
def test_a_pre_flight_at_or_above_the_band_s_low_end_is_not_flagged(measured):
    assert flags.check_fabric_degraded("intra_node", 2**20, measured, EXPECTED) is None


def test_no_reference_no_flag():
    assert flags.check_fabric_degraded("intra_node", 2**20, 1.0, None) is None

"""The centre targets' table says, for each figure, whether its bound is met, on the side the figure is better."""

from __future__ import annotations

from benches.targets import Target, table_of


def test_a_target_is_met_on_its_own_side():
    rate = Target("ingestion", "records/s", 15_000, 120_000, 100_000, higher_is_better=True)
    cpu = Target("one run", "ms CPU", 2.3, 1.4, 1.0, higher_is_better=False, note="serialisation")
    assert rate.met and not cpu.met
    printed = table_of([rate, cpu]).splitlines()
    assert printed[2].split()[-1] == "yes"
    assert "NO" in printed[3] and printed[3].endswith("serialisation")
    assert ">= 100,000" in printed[2] and "<= 1" in printed[3]

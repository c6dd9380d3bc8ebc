"""A run's time from its launch records: the sum of its launches; unknown while one is under way or when one was
killed with its job; and the launch record's bounds, whose absurd values are refused before the database."""

from __future__ import annotations

import pytest

from contract.records import LaunchRecord, MetricParseError, parse_metric_line, parse_record_json
from server.services.launches import run_time

T0 = 1_764_000_000.0


def launch(event: str, at: float, attempt: int = 0, status: int | None = None) -> LaunchRecord:
    return LaunchRecord.model_validate({"event": event, "at": T0 + at, "attempt": attempt, "exit_status": status})


def test_a_requeued_job_s_time_is_the_sum_of_its_launches():
    launches = [launch("start", 0), launch("end", 10, 0, 75), launch("start", 100, 1), launch("end", 105.5, 1, 0)]
    timed = run_time(launches, final=True)
    assert timed.seconds == pytest.approx(15.5) and (timed.launches, timed.why_none) == (2, None)


def test_a_launch_under_way_or_killed_leaves_the_time_unknown_and_says_why():
    live = run_time([launch("start", 0)], final=False)
    assert (live.seconds, live.why_none) == (None, "a launch is under way")
    killed = run_time([launch("start", 0), launch("start", 50, 1), launch("end", 60, 1, 0)], final=True)
    assert killed.seconds is None and killed.launches == 1 and "killed with the job" in (killed.why_none or "")
    assert run_time([launch("start", 0)], final=True).seconds is None
    # An end of another attempt, or before its start, tells no time.
    assert run_time([launch("start", 0), launch("end", 5, 1, 0)], final=True).seconds is None
    assert run_time([launch("start", 5), launch("end", 1, 0, 0)], final=True).seconds is None
    assert "no launch record" in (run_time([], final=True).why_none or "")


LINE = '[METRIC] {"v":1,"kind":"launch","event":"end","at":1764000000.5,"attempt":0,"exit_status":1}'


def test_a_launch_line_as_the_batch_script_prints_it_is_read_by_both_parsers():
    record = parse_metric_line(LINE)
    assert isinstance(record, LaunchRecord) and record.exit_status == 1
    assert parse_record_json(LINE.removeprefix("[METRIC] ").encode()) == record


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ('"at":1764000000.5', '"at":1e30'),  # no clock's
        ('"at":1764000000.5', '"at":-1'),
        ('"attempt":0', '"attempt":-1'),
        ('"attempt":0', '"attempt":99999999'),
        ('"exit_status":1', '"exit_status":256'),
        (',"exit_status":1', ""),  # an end that does not say how it ended
        ('"event":"end"', '"event":"middle"'),
        ('"at":1764000000.5', '"at":"now"'),
    ],
)
def test_a_launch_record_with_an_absurd_value_is_refused(change, field):
    bad = LINE.replace(change, field)
    with pytest.raises(MetricParseError):
        parse_metric_line(bad)
    assert parse_record_json(bad.removeprefix("[METRIC] ").encode()) is None

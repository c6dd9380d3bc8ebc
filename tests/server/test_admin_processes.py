"""`python -m server`'s process options: --workers and the monitor command are parsed and refused as documented
(the processes themselves are exercised in tests/e2e/test_failover.py)."""

from __future__ import annotations

import logging

import pytest

from server.admin import _parser, main


def test_workers_below_one_are_refused_with_the_reason(capsys):
    handlers = list(logging.getLogger().handlers)
    with pytest.raises(SystemExit) as exited:
        main(["--workers", "0"])
    assert exited.value.code == 2
    assert "--workers must be at least 1, not 0" in capsys.readouterr().err
    # Refused before logging is set up: a handler on this test's captured stderr, left behind, made every later
    # log line of the same test process a "Logging error" once the capture had closed.
    assert logging.getLogger().handlers == handlers


def test_the_monitor_command_and_workers_are_parsed():
    args = _parser().parse_args(["--workers", "4", "monitor"])
    assert (args.workers, args.command) == (4, "monitor")
    assert _parser().parse_args([]).workers == 1

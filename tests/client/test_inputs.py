"""What clone's --set and --unset make of what a user types."""

from __future__ import annotations

import pytest

from client import cli


@pytest.mark.parametrize(
    ("text", "change"),
    [
        ("base.epochs=3", ("base", "epochs", 3)),
        ("base.lr=0.1", ("base", "lr", 0.1)),
        ("base.compile=true", ("base", "compile", True)),
        ("base.precision=bf16", ("base", "precision", "bf16")),
        ("resources.time_limit=00:20:00", ("resources", "time_limit", "00:20:00")),
        ('resources.sbatch_options={"mem": "4G"}', ("resources", "sbatch_options", {"mem": "4G"})),
        ("grid.gpus=1,2,4", ("grid", "gpus", [1, 2, 4])),
        ("grid.gpus=[1, 2]", ("grid", "gpus", [1, 2])),
        ("grid.strategy=ddp", ("grid", "strategy", ["ddp"])),
        ("grid.precision=fp32, bf16", ("grid", "precision", ["fp32", "bf16"])),
        ("repeats=3", ("", "repeats", 3)),
        ("isolation=shared", ("", "isolation", "shared")),
        ("scaling=weak", ("", "scaling", "weak")),
    ],
)
def test_set_reads_json_where_it_can_and_text_elsewhere(text, change):
    assert cli.build_parser().parse_args(["clone", "x", "--set", text]).set == [change]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--set", "epochs=3"], "a key is base.FIELD, grid.FIELD or resources.FIELD"),
        (["--set", "base.epochs"], "give KEY=VALUE"),
        (["--set", "grid.gpus=1,,2"], "an empty value in the list"),
        (["--set", "resources.sbatch_options.mem=4G"], "takes its whole table as JSON"),
        (["--unset", "name"], "a key is base.FIELD"),
        (["--unset", "repeats"], "'repeats' cannot be unset: --set repeats=VALUE replaces it"),
    ],
)
def test_a_change_that_is_not_one_is_a_usage_error(capsys, argv, message):
    with pytest.raises(SystemExit) as exit_:
        cli.main(["clone", "x", *argv])
    assert exit_.value.code == cli.EXIT_USAGE
    assert message in capsys.readouterr().err

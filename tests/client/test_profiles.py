"""scalelab profiles against the app in-process, on the example profiles."""

from __future__ import annotations

import json
import re

from client import cli
from tests.client.helpers import answering, scalelab, shown


def test_profiles_lists_partitions_with_their_limits_and_marks_the_defaults(profiles_client, capsys):
    code, out, _ = scalelab(profiles_client, capsys, "profiles")
    assert code == cli.EXIT_OK
    lines = out.splitlines()
    assert lines[0].split()[:8] == ["PROFILE", "RUNTIME", "PARTITION", "MAX", "NODES", "GPUS/NODE", "MAX", "TIME"]
    rows = [line.split() for line in lines[1:-1]]
    assert rows[0][:2] == ["apptainer", "apptainer"]
    assert rows[3][:9] == ["local", "*", "none", "debug", "*", "1", "8", "1-00:00:00", "-"]
    pyxis = lines.index(next(line for line in lines if line.startswith("pyxis ")))
    assert lines[pyxis].split()[:8] == ["pyxis", "pyxis", "gpu", "*", "16", "4", "1-00:00:00", "gpu"]
    # The second partition's line leaves the profile's columns empty.
    assert lines[pyxis + 1].split() == ["debug", "2", "4", "00:30:00", "gpu"]
    assert lines[-1].startswith("* the default")


def test_profiles_fit_a_narrow_terminal(profiles_client, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "70")
    for argv in (["profiles"], ["profiles", "pyxis"]):
        code, out, _ = scalelab(profiles_client, capsys, *argv)
        assert code == cli.EXIT_OK
        assert all(len(line) <= 70 for line in out.splitlines()), out


def test_one_profile_in_detail(profiles_client, capsys):
    code, out, _ = scalelab(profiles_client, capsys, "profiles", "pyxis")
    assert code == cli.EXIT_OK
    assert out.startswith("profile            pyxis\n")
    assert "image              /shared/images/scalelab-worker.sqsh\n" in out
    assert "account            ml-scaling\n" in out
    assert "at the time limit  Slurm signals the worker to save 120 s before it" in out
    assert "qos" not in shown(out[: out.index("PARTITION")])  # unset fields are left out
    partitions = out[out.index("PARTITION") :].splitlines()
    assert partitions[1].split() == ["gpu", "*", "16", "4", "1-00:00:00", "gpu", "80", "16"]
    options = out[out.index("sbatch options users may set (resources.sbatch_options):") :].splitlines()
    assert options[2].split()[:3] == ["constraint", "a100,", "h100"]
    assert [line.split()[0] for line in options[2:]] == ["constraint", "mem", "qos"]

    code, out, _ = scalelab(profiles_client, capsys, "profiles", "local")
    assert out.startswith("profile            local (the default)\n")
    nice = next(line for line in out.splitlines() if line.startswith("nice "))
    assert re.split(r"\s{2,}", nice) == ["nice", "a whole number, 0 to 10000", "lower the job's priority by this much"]


def test_profiles_as_json_are_what_the_api_returns(profiles_client, capsys):
    code, out, _ = scalelab(profiles_client, capsys, "profiles", "--json")
    assert code == cli.EXIT_OK
    listing = json.loads(out)
    assert listing == profiles_client.get("/api/profiles").json()
    assert (listing["default"], listing["count"]) == ("local", 5)
    code, out, _ = scalelab(profiles_client, capsys, "profiles", "cscs", "--json")
    assert json.loads(out) == profiles_client.get("/api/profiles/cscs").json()


def test_an_unknown_profile_is_exit_5(profiles_client, capsys):
    code, _, err = scalelab(profiles_client, capsys, "profiles", "nope")
    assert (code, err) == (cli.EXIT_NOT_FOUND, "scalelab: error: no cluster profile 'nope'\n")


def test_profiles_from_a_newer_server_show_and_pass_their_new_fields_through(profiles_client, capsys):
    profile = {**profiles_client.get("/api/profiles/pyxis").json(), "energy_budget_kwh": 40}
    code, out, _ = scalelab(answering(200, profile), capsys, "profiles", "pyxis", "--json")
    assert (code, json.loads(out)) == (cli.EXIT_OK, profile)

    listing = profiles_client.get("/api/profiles").json()
    listing = {**listing, "data": [{**item, "energy_budget_kwh": 40} for item in listing["data"]], "regions": ["eu"]}
    code, out, _ = scalelab(answering(200, listing), capsys, "profiles", "--json")
    assert (code, json.loads(out)) == (cli.EXIT_OK, listing)
    code, out, _ = scalelab(answering(200, listing), capsys, "profiles")
    assert code == cli.EXIT_OK and out.splitlines()[0].startswith("PROFILE")

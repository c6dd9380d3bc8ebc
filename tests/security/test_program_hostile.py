"""The hostile corpus in every field of a user's program that reaches its batch script: command words, env values,
parameter values and the working directory. Rendered, the script passes shellcheck; run with bash (against
stand-ins for srun and scontrol, and the real torchrun), it creates no canary and the program gets every value as
written.

Validation refuses many of these values long before a script is rendered (control characters, a workdir outside
its alphabet); here they go into the spec past validation (`model_copy`), so that what is tested is the script's
own quoting. NUL is left out: no argv or environment can hold it.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from pydantic import ValidationError

from contract.program import ProgramSpec
from server.render import render_script
from tests.hostile import HOSTILE, json_safe
from tests.server.test_render_program import (
    probe_job,
    probe_workdir,
    program_spec,
    run_script,
    unvalidated,
)


# The longest word or env value a ProgramSpec takes: the corpus's longer ones (100 kB, more with the canary's
# path in) would not fit an argv (the kernel takes 128 kB per string) and say nothing more.
LONGEST = 4096


def _texts(canary: Path) -> list[str]:
    texts = [item.with_canary(canary) for item in HOSTILE if isinstance(item.value, str) and json_safe(item.value)]
    return [text[:LONGEST] for text in texts if "\x00" not in text]


def _shellcheck(script: str, tmp_path: Path) -> None:
    if not shutil.which("shellcheck"):
        pytest.fail("shellcheck is not installed: scripts/test installs it (Debian package shellcheck)")
    path = tmp_path / "check.sbatch"
    path.write_text(script)
    result = subprocess.run(["shellcheck", "--severity=style", str(path)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout


@pytest.mark.parametrize(("launcher", "slurm"), [("srun", True), ("torchrun", True), ("torchrun", False)])
def test_hostile_words_env_and_params_reach_the_program_as_written_and_run_nothing(tmp_path, launcher, slurm):
    canary = tmp_path / "canary"
    texts = _texts(canary)
    assert len(texts) > 50
    workdir = probe_workdir(tmp_path)
    spec = unvalidated(
        program_spec(workdir=str(workdir), launcher=launcher),
        command=["python", "probe.py", *texts],
        env={f"V{number}": text for number, text in enumerate(texts)},
        params={f"p{number}": text for number, text in enumerate(texts)},
    )
    job = probe_job(tmp_path, launcher="srun" if slurm else "local")
    _shellcheck(render_script(spec, job), tmp_path)
    result = run_script(tmp_path, spec, job)
    assert result.returncode == 0, result.stderr[-2000:]
    assert not canary.exists()
    seen = json.loads((tmp_path / "run" / "probe-0.json").read_text())
    parameters = [word for number, text in enumerate(texts) for word in (f"--p{number}", text)]
    assert seen["argv"] == [*texts, *parameters]
    for number, text in enumerate(texts):
        assert seen["env"][f"V{number}"] == text, texts[number]
        assert seen["env"][f"SCALELAB_PARAM_P{number}"] == text, texts[number]


def test_a_hostile_first_word_runs_only_as_the_name_of_a_program(tmp_path):
    canary = tmp_path / "canary"
    workdir = probe_workdir(tmp_path)
    for text in _texts(canary):
        spec = unvalidated(program_spec(workdir=str(workdir)), command=[text, text])
        result = run_script(tmp_path, spec, probe_job(tmp_path))
        assert result.returncode != 0, text  # no such program (or no such file: the check stops the job)
        assert not canary.exists(), f"{text!r} ran a command"


def test_a_hostile_workdir_is_refused_or_inert(tmp_path):
    canary = tmp_path / "canary"
    for text in _texts(canary):
        try:
            ProgramSpec.model_validate({"command": ["python", "train.py"], "workdir": text})
        except ValidationError:
            pass
        else:  # a plain absolute path: not there, or not a directory, and named as such
            result = run_script(tmp_path, program_spec(workdir=text), probe_job(tmp_path))
            assert result.returncode == 2
            assert result.stderr.endswith(f"scalelab: cannot enter the working directory {text}\n")
            continue
        # Past validation, the renderer refuses whatever its alphabet leaves out, or the script runs nothing.
        spec = unvalidated(program_spec(), workdir=text)
        try:
            script = render_script(spec, probe_job(tmp_path))
        except ValueError as refused:
            assert "unsafe program workdir" in str(refused)
            continue
        _shellcheck(script, tmp_path)
        run_script(tmp_path, spec, probe_job(tmp_path))
    assert not canary.exists()

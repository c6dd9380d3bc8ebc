"""A program's env values are its owner's: possibly secrets (a token, a password) that the program needs. Everyone an
experiment is shared with sees which variables a run sets, but their values only its owner and the admins; everyone
else sees HIDDEN_VALUE in their place, in every view of a spec, a request or a batch script.

hide_env is the one redaction; the functions after it apply it to each shape a view answers with.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from contract.program import HIDDEN_VALUE
from server.models import User
from server.render import export_line
from server.runstate import may_change


def may_see_env(viewer: User | None, owner: str | None) -> bool:
    """The owner and the admins: those who may change the run may read what it was given."""
    return may_change(viewer, owner)


def hide_env(program: Mapping[str, Any]) -> dict[str, Any]:
    """A program (its JSON, as a spec or request holds it) with each env value replaced by HIDDEN_VALUE."""
    env = program.get("env")
    if not isinstance(env, Mapping) or not env:
        return dict(program)
    return {**program, "env": dict.fromkeys(env, HIDDEN_VALUE)}


def _with_program_hidden(holder: Mapping[str, Any]) -> dict[str, Any]:
    program = holder.get("program")
    return {**holder, "program": hide_env(program)} if isinstance(program, Mapping) else dict(holder)


def hidden_spec(spec: Mapping[str, Any]) -> dict[str, Any]:
    """A run's spec (its JSON) with its program's env values hidden."""
    return _with_program_hidden(spec)


def hidden_request(request: Mapping[str, Any]) -> dict[str, Any]:
    """An experiment's request (its JSON) with its program's env values hidden: a program is set in `base` only
    (never swept in the grid)."""
    base = request.get("base")
    return {**request, "base": _with_program_hidden(base)} if isinstance(base, Mapping) else dict(request)


def has_env(spec_or_base: Mapping[str, Any]) -> bool:
    """Whether a spec (or a request's base) holds a program with env values, which a view may have to hide."""
    program = spec_or_base.get("program")
    return isinstance(program, Mapping) and bool(program.get("env"))


def spec_for(viewer: User | None, owner: str | None, spec: dict[str, Any]) -> dict[str, Any]:
    """A run's spec as the viewer may see it (the same object where nothing is hidden)."""
    return spec if may_see_env(viewer, owner) or not has_env(spec) else hidden_spec(spec)


def request_for(viewer: User | None, owner: str | None, request: dict[str, Any]) -> dict[str, Any]:
    """An experiment's request as the viewer may see it (the same object where nothing is hidden)."""
    base = request.get("base")
    if may_see_env(viewer, owner) or not isinstance(base, Mapping) or not has_env(base):
        return request
    return hidden_request(request)


def _env_of(spec: Mapping[str, Any]) -> dict[str, str]:
    program = spec.get("program")
    env = program.get("env") if isinstance(program, Mapping) else None
    return {str(name): str(value) for name, value in env.items()} if isinstance(env, Mapping) else {}


def hidden_script(script: str, spec: Mapping[str, Any]) -> str:
    """A run's batch script with its program's env values hidden where the script holds them: each `export NAME=`
    line, as server/render.py writes it, and the spec the script carries as JSON (where the job
    writes its own directory)."""
    env = _env_of(spec)
    if not env:
        return script
    exports = {export_line(name, value): export_line(name, HIDDEN_VALUE) for name, value in env.items()}
    return "\n".join(_hidden_line(line, exports, env) for line in script.split("\n"))


def _hidden_line(line: str, exports: Mapping[str, str], env: Mapping[str, str]) -> str:
    if line in exports:
        return exports[line]
    if '"env":{' not in line:
        return line
    # The spec's JSON on one line: each place that holds this env, decoded where it starts and written hidden.
    decoder, hidden = json.JSONDecoder(), json.dumps(dict.fromkeys(env, HIDDEN_VALUE), separators=(",", ":"))
    parts, at = [], 0
    while (found := line.find('"env":{', at)) >= 0:
        start = found + len('"env":')
        try:
            value, end = decoder.raw_decode(line, start)
        except ValueError:
            break
        parts.append(line[at:start] + (hidden if value == env else line[start:end]))
        at = end
    return "".join(parts) + line[at:]


def script_for(viewer: User | None, owner: str | None, script: str | None, spec: Mapping[str, Any]) -> str | None:
    """A run's batch script as the viewer may see it."""
    if script is None or may_see_env(viewer, owner):
        return script
    return hidden_script(script, spec)

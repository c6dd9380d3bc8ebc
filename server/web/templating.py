"""Rendering the pages' templates, and the words they share with the pages' scripts (format.js, runs.js)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol

from fastapi import Request
from fastapi.responses import HTMLResponse
from fastapi.templating import Jinja2Templates
from markupsafe import Markup

from contract.spec import settings_of
from contract.states import FINAL_STATES, RunState
from server import __version__
from server.models import waiting_for_training
from server.web.headers import csp_nonce

FRONTEND = Path(__file__).resolve().parents[2] / "frontend"
STATIC_DIR = FRONTEND / "static"
templates = Jinja2Templates(directory=FRONTEND / "templates")


def render(request: Request, name: str, context: dict[str, Any], status_code: int = 200) -> HTMLResponse:
    root = root_of(request)
    base = {
        **_shared(root),
        "version": __version__,
        "static": lambda path: f"{root}/static/{path}?v={__version__}",
        "final_states": sorted(FINAL_STATES),
    }
    base["user"] = getattr(request.state, "user", None)
    base["csrf_token"] = getattr(request.state, "csrf_token", None)
    base["csp_nonce"] = csp_nonce(request)
    return templates.TemplateResponse(request, name, {**base, **context}, status_code=status_code)


def root_of(request: Request) -> str:
    root: str = request.scope.get("root_path", "")
    return root


def _shared(root: str) -> dict[str, Any]:
    """What every template may use, pages and fragments alike."""
    return {"root": root, "progress": progress_text, "reason": reason_text, "planned_epochs": planned_epochs}


def fragment(name: str, root: str, context: dict[str, Any]) -> Markup:
    """A piece of a page rendered on its own (to be kept and put into pages as it is): it sees what pages see but
    the request's own (its user, CSRF token), which must not be kept with it."""
    return Markup(templates.env.get_template(name).render({**_shared(root), **context}))  # noqa: S704 (autoescaped)


def duration_text(seconds: float) -> str:
    """Like format.js's duration(): the words the pages' scripts use when they update the same text."""
    if seconds < 60:
        return f"{max(0, round(seconds))} s"
    minutes = round(seconds / 60)
    return f"{minutes} min" if minutes < 60 else f"{minutes // 60} h {minutes % 60} min"


def planned_epochs(spec: dict[str, Any]) -> int | None:
    """The epochs a run will do; None for a program, which does not read `epochs` (its epochs are its own)."""
    epochs = settings_of(spec).get("epochs")
    return epochs if isinstance(epochs, int) else None


def progress_text(state: RunState, epochs_done: int, epochs: int | None, mean_epoch_time_s: float | None) -> str:
    """Like format.js's progress(): "epoch 2 of 5, about 3 min left" while running, "5 of 5 epochs" after; without a
    planned number of epochs (a program), the epochs done so far."""
    if not epochs:
        return f"{epochs_done} {'epoch' if epochs_done == 1 else 'epochs'} done" if epochs_done else ""
    if state is not RunState.running:
        return f"{epochs_done} of {epochs} epochs" if epochs_done else ""
    text = f"epoch {min(epochs_done + 1, epochs)} of {epochs}"
    if not epochs_done or not mean_epoch_time_s:
        return text
    return f"{text}, about {duration_text((epochs - epochs_done) * mean_epoch_time_s)} left"


class Reasoned(Protocol):
    """What reason_text reads of a run (a Run, or a row of the runs page)."""

    @property
    def waiting(self) -> bool: ...
    @property
    def state(self) -> RunState: ...
    @property
    def scheduler_reason(self) -> str | None: ...
    @property
    def message(self) -> str | None: ...
    @property
    def after_run(self) -> str | None: ...


# Why a run waits, where it was held without saying (services.submission.hold_for_slot says why: a limit the
# request set, or exclusive runs taking turns on shared nodes).
WAITING = "waits for its turn among the experiment's runs"


def reason_text(run: Reasoned) -> str:
    """Like runs.js's reason(): why a run waits, or what went wrong with it."""
    if run.waiting:
        return run.message or WAITING
    if words := waiting_for_training(run.state, run.scheduler_reason, run.after_run):
        return words
    if run.state in (RunState.submitted, RunState.pending) and run.scheduler_reason not in (None, "None"):
        return f"Slurm: {run.scheduler_reason}"
    if run.state.is_final and run.state is not RunState.completed:
        return run.message or (f"Slurm: {run.scheduler_reason}" if run.scheduler_reason not in (None, "None") else "")
    return ""

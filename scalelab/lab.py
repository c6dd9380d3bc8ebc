"""A connection to a scalelab server from Python (Lab), made by connect(); and the module's own submit, experiment
and experiments, which use the last connection made (or connect() with no arguments)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from client.api import DEFAULT_TIMEOUT_S, Client
from client.config import resolve
from client.inputs import read_experiment
from scalelab._experiment import Experiment


class Lab:
    """One scalelab server, and the token sent to it. Use it as a context manager, or call close(); a Lab that is
    only dropped closes when it is collected."""

    def __init__(self, client: Client) -> None:
        self.client = client

    @property
    def url(self) -> str:
        return self.client.url

    def __repr__(self) -> str:
        return f"<scalelab.Lab {self.url}>"

    def __enter__(self) -> Lab:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def close(self) -> None:
        self.client.close()

    def submit(self, request: Mapping[str, Any] | str | os.PathLike[str], *, skip_invalid: bool = False) -> Experiment:
        """Submit an experiment: a request as POST /api/experiments takes it (name, base, grid, resources...), or
        the path of a TOML file or a JSON one (its name ending in .json), as `scalelab submit` reads it.
        `skip_invalid` leaves out the grid combinations that cannot run (on_invalid "skip"; `skipped` on the
        experiment names them); without it, one such combination refuses the whole request (Invalid, naming it)."""
        body = dict(request) if isinstance(request, Mapping) else read_experiment(Path(request))
        if skip_invalid:
            body["on_invalid"] = "skip"
        created = self.client.submit(body)
        return Experiment(self.client, created, created.skipped)

    def experiment(self, experiment_id: str) -> Experiment:
        """An experiment by its id (NotFound where there is none this token may see)."""
        return Experiment(self.client, self.client.experiment(experiment_id))

    def experiments(self, *, limit: int = 100) -> list[Experiment]:
        """The experiments this token may see, newest first, at most `limit` (1 to 1000)."""
        return [Experiment(self.client, view) for view in self.client.experiments(limit=limit).data]


_last: Lab | None = None


def connect(url: str | None = None, token: str | None = None, *, timeout_s: float = DEFAULT_TIMEOUT_S) -> Lab:
    """Connect to a scalelab server, chosen as the `scalelab` command chooses it: `url` and `token` where given,
    else SCALELAB_URL and SCALELAB_TOKEN, else "url" and "token" in $XDG_CONFIG_HOME/scalelab/config.toml
    (~/.config/scalelab/config.toml), else http://127.0.0.1:8000 without a token.

    Asks the server once, so that a server that cannot be reached (ServerUnreachable) or a token it refuses
    (TokenRejected) is said here rather than at the first submission. The module's submit, experiment and
    experiments use the last Lab connected."""
    global _last
    server = resolve(url, token, os.environ)
    client = Client(server.url, server.token, timeout_s=timeout_s)
    try:
        client.experiments(limit=1)
    except BaseException:
        client.close()
        raise
    _last = Lab(client)
    return _last


def _lab() -> Lab:
    return _last if _last is not None else connect()


def submit(request: Mapping[str, Any] | str | os.PathLike[str], *, skip_invalid: bool = False) -> Experiment:
    """Lab.submit on the last connection (connect() with no arguments where there is none yet)."""
    return _lab().submit(request, skip_invalid=skip_invalid)


def experiment(experiment_id: str) -> Experiment:
    """Lab.experiment on the last connection (connect() with no arguments where there is none yet)."""
    return _lab().experiment(experiment_id)


def experiments(*, limit: int = 100) -> list[Experiment]:
    """Lab.experiments on the last connection (connect() with no arguments where there is none yet)."""
    return _lab().experiments(limit=limit)

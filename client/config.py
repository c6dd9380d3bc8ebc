"""Where the server is and which token to send: the config file, $XDG_CONFIG_HOME/scalelab/config.toml (a URL and
an API token), and how the command line and the Python API choose between it, the environment and what they are
given."""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from client.api import DEFAULT_URL
from client.command import UsageError

CONFIG_KEYS = frozenset({"url", "token"})


def config_path(environ: Mapping[str, str]) -> Path:
    return Path(environ.get("XDG_CONFIG_HOME") or Path.home() / ".config") / "scalelab" / "config.toml"


def read_config(path: Path) -> dict[str, Any]:
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise UsageError(f"cannot read the config file {path}: {exc}") from None
    unknown = sorted(set(data) - CONFIG_KEYS)
    if unknown:
        raise UsageError(f"{path}: unknown keys {', '.join(unknown)}; it may hold {', '.join(sorted(CONFIG_KEYS))}")
    wrong = sorted(key for key, value in data.items() if not isinstance(value, str))
    if wrong:
        raise UsageError(f"{path}: {', '.join(wrong)} must be a quoted string")
    return data


def _toml_string(value: str) -> str:
    # A TOML basic string is JSON's string syntax for these characters: escape backslashes, quotes and controls.
    escaped = "".join(c if c.isprintable() and c not in '"\\' else f"\\u{ord(c):04x}" for c in value)
    return f'"{escaped}"'


def write_config(path: Path, values: Mapping[str, str]) -> None:
    """Replace the file with `values` (a token is a secret: only its owner may read the file), atomically."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    text = "".join(f"{key} = {_toml_string(value)}\n" for key, value in sorted(values.items()))
    partial = path.with_name(f".{path.name}.partial")
    try:
        with os.fdopen(os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w", encoding="utf-8") as out:
            out.write(text)
        os.replace(partial, path)
    except OSError as exc:
        raise UsageError(f"cannot write the config file {path}: {exc.strerror}") from None


@dataclass(frozen=True)
class Connection:
    """The server to talk to, and the token to send it (None: none)."""

    url: str
    token: str | None


def resolve(url: str | None, token: str | None, environ: Mapping[str, str]) -> Connection:
    """What the caller gives (--url and --token, or connect's arguments), then the environment (SCALELAB_URL,
    SCALELAB_TOKEN), then the config file, then the default URL without a token."""
    config = read_config(config_path(environ))
    chosen_url = url or environ.get("SCALELAB_URL") or config.get("url") or DEFAULT_URL
    chosen_token = token or environ.get("SCALELAB_TOKEN") or config.get("token")
    return Connection(chosen_url, chosen_token or None)

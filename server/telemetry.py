"""The process's own measurements, written in Prometheus's text exposition format (version 0.0.4).

Small on purpose: two kinds (a counter with labels, a histogram without) cover what /metrics serves, so the
server needs no client library for them.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Iterable, Mapping, Sequence

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

Labels = tuple[tuple[str, str], ...]


def _escape(value: str) -> str:
    return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


def _labels(labels: Iterable[tuple[str, str]]) -> str:
    inner = ",".join(f'{name}="{_escape(value)}"' for name, value in labels)
    return f"{{{inner}}}" if inner else ""


def _number(value: float) -> str:
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if math.isnan(value):
        return "NaN"
    return repr(float(value)) if not float(value).is_integer() else str(int(value))


def family(name: str, kind: str, help_text: str, samples: Iterable[tuple[Labels, float]]) -> str:
    """One metric family: its HELP and TYPE lines, then one line per labelled sample."""
    lines = [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}"]
    lines += [f"{name}{_labels(labels)} {_number(value)}" for labels, value in samples]
    return "\n".join(lines) + "\n"


class Counter:
    """A count per label set that only goes up while the process lives."""

    def __init__(self, name: str, help_text: str) -> None:
        self.name, self.help_text = name, help_text
        self._values: dict[Labels, float] = {}
        self._lock = threading.Lock()

    def inc(self, labels: Mapping[str, str], amount: float = 1) -> None:
        key = tuple(sorted(labels.items()))
        with self._lock:
            self._values[key] = self._values.get(key, 0) + amount

    def value(self, labels: Mapping[str, str]) -> float:
        return self._values.get(tuple(sorted(labels.items())), 0)

    def render(self) -> str:
        with self._lock:
            samples = sorted(self._values.items())
        return family(self.name, "counter", self.help_text, samples)


class Histogram:
    """Observations counted into cumulative buckets, with their sum and count, as Prometheus expects."""

    def __init__(self, name: str, help_text: str, buckets: Sequence[float]) -> None:
        self.name, self.help_text = name, help_text
        self.bounds = sorted(buckets)
        self._counts = [0] * len(self.bounds)
        self._sum = 0.0
        self._count = 0
        self._lock = threading.Lock()

    def observe(self, value: float) -> None:
        with self._lock:
            self._sum += value
            self._count += 1
            for index, bound in enumerate(self.bounds):
                if value <= bound:
                    self._counts[index] += 1

    @property
    def count(self) -> int:
        return self._count

    def render(self) -> str:
        with self._lock:
            counts, total, count = list(self._counts), self._sum, self._count
        lines = [f"# HELP {self.name} {self.help_text}", f"# TYPE {self.name} histogram"]
        for bound, bucket in zip(self.bounds, counts, strict=True):
            lines.append(f'{self.name}_bucket{{le="{_number(bound)}"}} {bucket}')
        lines += [f'{self.name}_bucket{{le="+Inf"}} {count}', f"{self.name}_sum {_number(total)}"]
        lines.append(f"{self.name}_count {count}")
        return "\n".join(lines) + "\n"

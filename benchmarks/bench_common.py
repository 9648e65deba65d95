"""Shared by the benchmark scripts: argument checks that name the flag, and strict JSON output.

Not a benchmark itself. The scripts import it from their own folder (``benchmarks/`` is on
``sys.path`` when a script runs, and the scripts that are imported as modules add it).
"""

from __future__ import annotations

import argparse
import json
import math
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from iro_fed.cli import UsageError, check_int, check_names, check_output_file, check_seed
from iro_fed.problem_io import write_text_atomic

__all__ = [
    "UsageError",
    "check_int",
    "check_names",
    "check_output_file",
    "check_seed",
    "int_list",
    "json_ready",
    "usage_errors",
    "write_json",
    "IntRange",
]


def json_ready(value: Any) -> Any:
    """``value`` with NaN and infinities as None, numpy scalars and arrays as Python values,
    tuples as lists and paths as strings: what :func:`write_json` can write as valid JSON (a bare
    ``NaN`` in a results file breaks every strict JSON reader)."""
    if isinstance(value, dict):
        return {k: json_ready(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_ready(v) for v in value]
    if isinstance(value, np.ndarray):
        return json_ready(value.tolist())
    if isinstance(value, bool | np.bool_):
        return bool(value)
    if isinstance(value, int | np.integer):
        return int(value)
    if isinstance(value, float | np.floating):
        return float(value) if math.isfinite(value) else None
    if isinstance(value, Path):
        return str(value)
    return value


def write_json(path: str | os.PathLike, doc: Any, default: Callable[[Any], Any] | None = None) -> None:
    """Write ``doc`` as JSON atomically (a reader sees the old file or the whole new one); non-finite
    numbers become null (:func:`json_ready`), and ``allow_nan=False`` makes any that slip through an
    error instead of invalid JSON."""
    write_text_atomic(path, json.dumps(json_ready(doc), indent=2, allow_nan=False, default=default) + "\n")


def int_list(flag: str, text: str, low: int, high: int, what: str = "value") -> list[int]:
    """A comma list of integers, each in ``[low, high]``, at least one, none empty, none twice."""
    parts = [s.strip() for s in str(text).split(",")]
    if not any(parts):
        raise UsageError(f"{flag}: give at least one {what}, got {text!r}")
    values = []
    for i, part in enumerate(parts, start=1):
        if not part:
            raise UsageError(f"{flag}: empty {what} at position {i} of {len(parts)} in {text!r}")
        try:
            value = int(part)
        except ValueError:
            raise UsageError(f"{flag}: expected comma-separated integers, got {part!r} in {text!r}") from None
        check_int(flag, value, low, high)
        if value in values:
            raise UsageError(f"{flag}: {what} {value} given twice")
        values.append(value)
    return values


def usage_errors(parser: argparse.ArgumentParser, check: Callable[[], Any]) -> Any:
    """``check()``'s result; a UsageError it raises becomes ``parser.error`` (usage line, exit 2)."""
    try:
        return check()
    except UsageError as exc:
        parser.error(str(exc))


class IntRange:
    """An argparse ``type``: an integer in ``[low, high]`` (argparse names the flag on error)."""

    def __init__(self, low: int, high: int) -> None:
        self.low, self.high = low, high
        self.__name__ = f"integer in [{low}, {high}]"  # argparse's "invalid <name> value" message

    def __call__(self, text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        if not self.low <= value <= self.high:
            raise argparse.ArgumentTypeError(f"must be between {self.low} and {self.high}, got {value}")
        return value

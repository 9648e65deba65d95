"""Ctrl-C while ``iro`` builds or reads its command line exits 130 without a traceback (each
test failed before the fix: the KeyboardInterrupt escaped main())."""

from __future__ import annotations

import argparse
import subprocess
import sys

import pytest

import iro_fed.cli
from iro_fed.cli import EXIT_INTERRUPTED, main


def _interrupt(*_args: object, **_kwargs: object) -> None:
    raise KeyboardInterrupt


class _InterruptedParser(argparse.ArgumentParser):
    def parse_args(self, *_args: object, **_kwargs: object) -> argparse.Namespace:  # type: ignore[override]
        raise KeyboardInterrupt


def _main_catching(argv: list[str]) -> int:
    # an interrupt escaping main() would stop pytest itself: turn it into this test's failure
    try:
        return main(argv)
    except KeyboardInterrupt:
        pytest.fail("KeyboardInterrupt escaped main() (a traceback on the command line)")


@pytest.mark.parametrize("where", ["build_parser", "parse_args"])
def test_ctrl_c_while_parsing_exits_130(where, monkeypatch, capsys):
    if where == "build_parser":
        monkeypatch.setattr(iro_fed.cli, "build_parser", _interrupt)
    else:
        monkeypatch.setattr(iro_fed.cli, "build_parser", lambda: _InterruptedParser(prog="iro"))
    assert _main_catching(["solvers"]) == EXIT_INTERRUPTED
    err = capsys.readouterr().err
    assert err == "iro: interrupted\n"


def test_ctrl_c_while_parsing_prints_no_traceback_from_a_real_process():
    code = ("import sys, iro_fed.cli as c\n"
            "def stop():\n    raise KeyboardInterrupt\n"
            "c.build_parser = stop\n"
            "sys.exit(c.main(['solvers']))\n")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert run.returncode == EXIT_INTERRUPTED, run.stderr[-2000:]
    assert "Traceback" not in run.stderr and "iro: interrupted" in run.stderr

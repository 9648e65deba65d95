"""``edge-agent check --help`` explains ``--config`` and ``--port`` as ``edge-agent run --help``
does (it listed them with no text), run as a real subprocess."""

from __future__ import annotations

import re
import subprocess
import sys


def option_help(command: str) -> dict[str, str]:
    out = subprocess.run([sys.executable, "-m", "edge_agent", command, "--help"], capture_output=True, text=True,
                         timeout=120, check=True).stdout
    options = out.split("options:", 1)[1]
    found: dict[str, str] = {}
    # "  --config FILE   text..." with the text wrapped onto indented lines (or all on the next)
    for m in re.finditer(r"^  (--[a-z-]+)(?: [A-Z]+)?(?: +|\n {3,})?(.*?)(?=^  -|\Z)", options, re.M | re.S):
        found[m.group(1)] = " ".join(m.group(2).split())
    return found


def test_check_explains_its_options_as_run_does() -> None:
    run, check = option_help("run"), option_help("check")
    for flag in ("--config", "--port"):
        assert check[flag], f"edge-agent check --help: no text for {flag}"
        assert check[flag] == run[flag]
    assert "IRO_AGENT_" in check["--config"] and "listen.port" in check["--port"]

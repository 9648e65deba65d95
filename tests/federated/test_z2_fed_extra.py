"""``iro fed local`` and ``iro fed rounds`` without the 'fed' extra (Flower) exit 2 with one line
that names the command once: main prints "iro fed rounds: error: " before the message, which said
"iro fed needs the 'fed' extra" again; ``iro fed local`` crashed with a traceback instead, reading
the app's settings through a module that imports Flower before its guarded import."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# Flower missing, as on a host installed without the extra: every `import flwr...` fails.
NO_FLOWER = ("import sys; sys.modules['flwr'] = None\n"
             "from iro_fed.cli import main\n"
             "sys.exit(main(sys.argv[1:]))\n")


@pytest.mark.parametrize("argv", [["fed", "rounds", "--requests", "{tmp}/requests", "--federation", "local"],
                                  ["fed", "local", "--registry", "{tmp}/registry"],
                                  ["fed", "server", "--insecure"],
                                  ["fed", "node", "--insecure", "--superlink", "127.0.0.1:9092", "--site", "0"]])
def test_without_flower_the_error_names_the_command_once(argv: list[str], tmp_path: Path) -> None:
    args = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    done = subprocess.run([sys.executable, "-c", NO_FLOWER, *args], capture_output=True, text=True, timeout=120,
                          cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr  # no traceback
    command = " ".join(argv[:2])
    assert lines[0].startswith(f"iro {command}: error: the 'fed' extra is needed (pip install 'iro-fed[fed]'): "), lines
    assert lines[0].count("iro fed") == 1, lines
    assert not (tmp_path / "registry").exists()  # nothing made before the error

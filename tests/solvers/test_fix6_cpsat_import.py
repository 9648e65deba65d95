"""OR-Tools is imported when a cpsat solver is built, so the import (about a second) is not
charged to the first solve's time_limit_s. Checked in a fresh interpreter."""

from __future__ import annotations

import subprocess
import sys

CODE = """
import sys
import solvers
assert "ortools.sat.python.cp_model" not in sys.modules, "imported by the registry already"
solvers.make("cpsat", time_limit_s=1.0)
print("ortools.sat.python.cp_model" in sys.modules)
"""


def test_building_a_cpsat_solver_imports_or_tools() -> None:
    done = subprocess.run([sys.executable, "-c", CODE], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "True"

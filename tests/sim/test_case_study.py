"""examples/bank_case_study.py --short (what `make demo` runs) prints its A/B table."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from .helpers import needs_data

SCRIPT = Path(__file__).resolve().parents[2] / "examples" / "bank_case_study.py"

pytestmark = needs_data


def test_short_case_study_prints_the_table(capsys):
    spec = importlib.util.spec_from_file_location("bank_case_study", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.main(["--short", "--seed", "2"]) == 0
    out = capsys.readouterr().out
    for label in ("request success %", "utilization % of powered nodes", "batch completion min", "carbon kg CO2", "cost",
                  "A kube-default", "A+ kube-default", "B IRO-Fed", "B vs A+", "project brief"):
        assert label in out

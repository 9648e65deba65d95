"""The recording rules are valid and compute what they say (promtool check rules / test rules)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

DIR = Path(__file__).resolve().parents[2] / "deploy" / "prometheus"
PROMTOOL = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(PROMTOOL is None, reason="promtool is not installed (apt-get install prometheus)")


@needs_promtool
def test_promtool_check_rules():
    done = subprocess.run([PROMTOOL, "check", "rules", str(DIR / "iro-fed-rules.yaml")], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS: 19 rules found" in done.stdout


@needs_promtool
def test_promtool_unit_tests_of_the_rules():
    done = subprocess.run([PROMTOOL, "test", "rules", "iro-fed-rules.test.yaml"], capture_output=True, text=True,
                          timeout=60, cwd=DIR)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout


@needs_promtool
def test_promtool_rejects_a_broken_rule(tmp_path):
    # The check has teeth: a rule with a bad expression fails.
    bad = tmp_path / "bad.yaml"
    bad.write_text("groups:\n- name: g\n  rules:\n  - record: x:y:z\n    expr: sum by (node (foo)\n")
    done = subprocess.run([PROMTOOL, "check", "rules", str(bad)], capture_output=True, text=True, timeout=60)
    assert done.returncode != 0

"""A boolean setting given as text (``--set deterministic=true``) reads true and false as files do.

Was: ``solvers.base.parse_setting`` read yes / on / 1 as true and no / off / 0 as false (any
case), while problem and agent config files follow YAML 1.2's core schema, where only true and
false (True, TRUE, False, FALSE) are booleans: ``record: yes`` in an agent config is refused.
Now: the same six spellings; anything else is an InvalidSettingError naming the setting and
saying to use true or false (exit status 2 on the command line). It serves ``--set`` of the solver
commands, ``simulate --solver-set`` / simulator settings, the DQN ``--set`` and solver settings
given as strings (an agent's ``recommend.solver_params``).
"""

from __future__ import annotations

import json

import pytest

import solvers
from iro_fed.cli import main
from iro_fed.problem_io import load_yaml
from iro_fed.testing import random_problem_doc
from solvers.base import InvalidSettingError, Param, parse_setting

BOOL = Param(True, bool, "a bool")

NOT_BOOLEANS = ["yes", "no", "on", "off", "Yes", "ON", "1", "0", "y", "n", "t", "f", "tRuE", "fAlse", "", " ", "true false"]


@pytest.mark.parametrize("text", NOT_BOOLEANS)
def test_a_bool_setting_refuses_what_is_not_true_or_false(text):
    with pytest.raises(InvalidSettingError, match=r"^solver 's' setting 'b': cannot read .* as bool \(use true or false\)"):
        BOOL.convert("s", "b", text)


@pytest.mark.parametrize(
    "text, value",
    [("true", True), ("True", True), ("TRUE", True), (" true\t", True), ("false", False), ("False", False), ("FALSE", False)],
)
def test_a_bool_setting_reads_true_and_false(text, value):
    assert BOOL.convert("s", "b", text) is value


@pytest.mark.parametrize("text", NOT_BOOLEANS[:-3] + ["true", "True", "TRUE", "false", "False", "FALSE"])
def test_a_setting_and_a_problem_files_yaml_read_booleans_alike(text):
    from_yaml = load_yaml(f"v: {text}")["v"]
    try:
        from_set = parse_setting(text, bool, "v")
    except InvalidSettingError:
        assert not isinstance(from_yaml, bool)  # a string (yes, on) or an int (1) in a file
    else:
        assert from_set is from_yaml


@pytest.mark.parametrize("word", ["yes", "on", "1", "off"])
def test_the_cli_refuses_deterministic_yes_with_exit_2(tmp_path, capsys, word):
    problem = tmp_path / "p.json"
    problem.write_text(json.dumps(random_problem_doc(1)))
    out = tmp_path / "never.json"
    assert main(["solve", str(problem), "--solver", "cpsat", "--set", f"deterministic={word}", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "'deterministic'" in err and "true or false" in err
    assert not out.exists()


def test_a_solver_setting_given_as_a_string_refuses_yes():
    # the path of an agent config's recommend.solver_params ({memory_aware: yes} is the string 'yes')
    with pytest.raises(InvalidSettingError, match=r"setting 'memory_aware': cannot read 'yes' as bool"):
        solvers.make("iro-frag", memory_aware="yes")
    assert solvers.make("iro-frag", memory_aware="false").memory_aware is False


def test_a_simulator_setting_refuses_on():
    from iro_fed.sim.engine import SimConfig, SimConfigError

    with pytest.raises(SimConfigError, match=r"^setting 'power_down': cannot read 'on' as bool \(use true or false\)"):
        SimConfig().with_settings({"power_down": "on"})
    assert SimConfig().with_settings({"power_down": "false"}).power_down is False


def test_the_dqn_set_refuses_zero_naming_the_field():
    from iro_fed.learning import _config_pairs

    with pytest.raises(InvalidSettingError, match=r"^--set double: cannot read '0' as bool \(use true or false\)"):
        _config_pairs(["double=0"])
    assert _config_pairs(["double=false"]) == {"double": False}

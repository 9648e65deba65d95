"""Solver settings given as text (``--set seed=7``) read numbers as problem files do.

Was: ``solvers.base._parse_text`` used int() and float(), which also take ``1_0`` (10),
``١٠`` (Arabic-Indic digits, 10), ``\\x1c7`` (a control character counts as space) and
``1_000.5``; a problem file's YAML reads ``1_000`` as the string it looks like (YAML 1.2).
Now: ASCII digits, an optional sign, spaces and tabs around; else an error naming the setting
(exit status 2 on the command line). ``nan`` / ``inf`` are still read, for each setting's own
finite check to refuse them in its words.
"""

from __future__ import annotations

import json

import pytest

from iro_fed.cli import main
from iro_fed.problem_io import load_yaml
from iro_fed.testing import random_problem_doc
from solvers.base import InvalidSettingError, Param

INT = Param(0, int, "an int")
FLOAT = Param(0.5, float, "a float")

NOT_NUMBERS = ["1_0", "1_000", "٣", "١٠", "\x1c7", "7\x1c", "\u20037", "1 0", "+-1", "0x10", "0o17", "0b11", "", " "]


@pytest.mark.parametrize("text", NOT_NUMBERS + ["1e3", "1.5", "nan"])
def test_an_int_setting_refuses_what_is_not_a_decimal_integer(text):
    with pytest.raises(InvalidSettingError, match=r"^solver 's' setting 'seed': cannot read .* as int \(expected a decimal"):
        INT.convert("s", "seed", text)


@pytest.mark.parametrize("text", NOT_NUMBERS + ["1_000.5", "1.5_0", "١.٥", "1e", "e3", ".", "nan_", "infinit"])
def test_a_float_setting_refuses_what_is_not_a_decimal_number(text):
    with pytest.raises(InvalidSettingError, match=r"^solver 's' setting 'gap': cannot read .* as float \(expected a decimal"):
        FLOAT.convert("s", "gap", text)


@pytest.mark.parametrize(("text", "value"), [("7", 7), ("+7", 7), ("-7", -7), (" 7\t", 7), ("007", 7), ("0", 0)])
def test_an_int_setting_reads_decimal_integers(text, value):
    got = INT.convert("s", "seed", text)
    assert got == value and type(got) is int


@pytest.mark.parametrize(
    ("text", "value"),
    [("0.5", 0.5), ("-2.5E+2", -250.0), (".5", 0.5), ("5.", 5.0), ("1e-3", 0.001), ("3", 3.0), (" 2 ", 2.0)],
)
def test_a_float_setting_reads_decimal_numbers(text, value):
    got = FLOAT.convert("s", "gap", text)
    assert got == value and type(got) is float


@pytest.mark.parametrize("text", ["nan", "-inf", "Infinity"])
def test_nan_and_infinities_are_refused_as_not_finite(text):
    with pytest.raises(InvalidSettingError, match=r"^solver 's' setting 'gap': must be finite"):
        FLOAT.convert("s", "gap", text)


@pytest.mark.parametrize("text", ["1_000", "١٠", "0100", "-3", "2.5", "1e3", "1.5_0"])
def test_a_setting_and_a_problem_files_yaml_read_decimal_text_alike(text):
    from_yaml = load_yaml(f"v: {text}")["v"]
    try:
        from_set = FLOAT.convert("s", "gap", text)
    except InvalidSettingError:
        from_set = None
    if isinstance(from_yaml, str):
        assert from_set is None  # YAML: a string, refused where a number is wanted; --set: refused
    else:
        assert from_set == float(from_yaml)


def test_the_cli_refuses_an_underscored_seed_with_exit_2(tmp_path, capsys):
    problem = tmp_path / "p.json"
    problem.write_text(json.dumps(random_problem_doc(1)))
    out = tmp_path / "never.json"
    assert main(["solve", str(problem), "--solver", "best-fit", "--set", "seed=1_0", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "'seed'" in err and "cannot read '1_0' as int" in err
    assert not out.exists()


def test_a_simulator_setting_refuses_an_underscored_number():
    from iro_fed.sim.engine import SimConfig, SimConfigError

    with pytest.raises(SimConfigError, match=r"^setting 'queue_cap': cannot read '1_000' as "):
        SimConfig().with_settings({"queue_cap": "1_000"})
    assert SimConfig().with_settings({"queue_cap": " 1000 "}).queue_cap == 1000

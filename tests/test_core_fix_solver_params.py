"""Solver settings: a mutable default belongs to one solver, numpy scalars count as their Python
values, and a bad value is shown by the one helper that problem files use too."""

from __future__ import annotations

import numpy as np
import pytest

import solvers
from iro_fed.problem_io import ProblemValidationError, problem_from_dict
from solvers.base import InvalidSettingError


def test_a_dict_default_is_not_shared_between_solvers():
    # Before, every Fallback's primary_params was the class's one {}: a setting added to one
    # solver's appeared in every other solver's and in the declared default.
    a = solvers.make("fallback")
    b = solvers.make("fallback")
    a.primary_params["seed"] = 3
    assert b.primary_params == {}
    assert type(a).parameters["primary_params"].default == {}
    assert solvers.make("time-budget").solver_params is not solvers.make("time-budget").solver_params


@pytest.mark.parametrize(
    ("name", "setting", "value", "expected"),
    [
        ("best-fit", "seed", np.int64(5), 5),  # an int from a numpy sweep
        ("best-fit", "seed", np.uint8(7), 7),
        ("best-fit", "seed", np.int32(2**31 - 1), 2**31 - 1),
        ("time-budget", "budget_s", np.float32(0.5), 0.5),
        ("time-budget", "budget_s", np.int64(3), 3.0),
        ("fallback", "time_limit_s", np.float64(1.25), 1.25),
    ],
)
def test_numpy_scalars_are_taken_as_their_python_values(name, setting, value, expected):
    solver = solvers.make(name, **{setting: value})
    got = getattr(solver, setting)
    assert got == expected and type(got) is type(expected)  # a plain Python value, as get_params() reports


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (np.bool_(True), "'seed': expected a number, got True"),  # bool for an int, as True is
        (np.float64(2.5), "'seed': expected int, got float 2.5"),  # as 2.5 is
        (np.int64(-1), "'seed': must be >= 0, got -1"),
        (np.uint64(2**63), "'seed': must be <= 2147483647, got 9223372036854775808"),
    ],
)
def test_numpy_scalars_are_still_checked(value, message):
    with pytest.raises(InvalidSettingError) as err:
        solvers.make("best-fit", seed=value)
    assert message in str(err.value)


def test_a_nonfinite_numpy_float_is_refused():
    with pytest.raises(InvalidSettingError, match="'budget_s': must be finite, got inf"):
        solvers.make("time-budget", budget_s=np.float64("inf"))


def test_one_helper_shows_bad_values_in_both_places():
    from iro_fed.problem_io import show_value

    # The solvers' messages keep their wording for huge ints ...
    with pytest.raises(InvalidSettingError, match="got an integer of 1329 bits"):
        solvers.make("fallback", time_limit_s=10**400)
    assert show_value(10**400, int_bits=True) == "an integer of 1329 bits"
    assert show_value(10**400) == "an integer of about 401 digits"
    # ... and a setting given a long list shows its first items (problem files' bounded repr),
    # not the start of the list's full repr, which a YAML alias bomb makes gigabytes long.
    with pytest.raises(InvalidSettingError) as err:
        solvers.make("time-budget", budget_s=list(range(1000)))
    assert "expected float, got list [0, 1, 2, 3, 4, 5, 6, 7, ...]" in str(err.value)


def test_a_set_holding_a_huge_int_is_a_validation_error():
    # Before, problem_io's own copy of the helper called repr() on it: Python's ValueError about
    # int digits escaped instead of the error naming the field.
    with pytest.raises(ProblemValidationError) as err:
        problem_from_dict({"resources": {10**5000}, "domains": [], "nodes": [], "workloads": []})
    assert "resources: expected a list, got set (too large to print)" in str(err.value)

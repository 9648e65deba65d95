"""One JSON-value walker for the placement file and the simulator report (u2).

placement._jsonable and sim.engine.jsonable were two copies of the same walk with different rules;
both writers now call placement.jsonable. What the two did differently where one was plainly wrong
is now the same: a numpy bool was the text "True" in a placement file, a mapping other than a dict
its repr there, and a numpy array numpy's text ("[1 2]") in a simulator report. What stays a
policy: a NaN or infinity is kept (the placement file refuses it by field) or written as text.
"""

from __future__ import annotations

import json
import types
from pathlib import Path

import numpy as np

from iro_fed.placement import Placement, jsonable
from iro_fed.sim import engine
from iro_fed.testing import random_problem


def _value() -> dict:
    return {"i": np.int64(3), "f": np.float32(0.5), "b": np.bool_(True), "pb": False, "arr": np.array([1, 2]),
            "farr": np.array([[0.5, np.nan]]), "t": (1, (2.5, (np.int8(4),))), "nan": float("nan"),
            "inf": np.float64("inf"), "p": Path("x/y"), "m": types.MappingProxyType({"k": 1}), 7: None,
            "s": np.str_("z"), "set": {1}}


# The placement file: NaN/inf kept (write_json_atomic refuses them by field).
PLACEMENT = ('{"i": 3, "f": 0.5, "b": true, "pb": false, "arr": [1, 2], "farr": [[0.5, NaN]], '
             '"t": [1, [2.5, [4]]], "nan": NaN, "inf": Infinity, "p": "x/y", "m": {"k": 1}, "7": null, '
             '"s": "z", "set": "{1}"}')
# The simulator report: always writable, NaN/inf as text.
REPORT = ('{"i": 3, "f": 0.5, "b": true, "pb": false, "arr": [1, 2], "farr": [[0.5, "nan"]], '
          '"t": [1, [2.5, [4]]], "nan": "nan", "inf": "inf", "p": "x/y", "m": {"k": 1}, "7": null, '
          '"s": "z", "set": "{1}"}')


def test_the_placement_policy() -> None:
    assert json.dumps(jsonable(_value())) == PLACEMENT


def test_the_report_policy() -> None:
    assert json.dumps(engine.jsonable(_value())) == REPORT
    assert json.dumps(jsonable(_value(), as_text=True)) == REPORT
    out = engine.jsonable(_value())
    assert type(out["i"]) is int and type(out["f"]) is float and type(out["s"]) is str


def test_placement_to_dict_writes_params_and_info_as_before() -> None:
    problem = random_problem(0, nodes=3, pods=2)
    placement = Placement(np.full(problem.num_workloads, -1), params=_value(), info={"x": _value()})
    doc = placement.to_dict(problem)
    assert json.dumps(doc["params"]) == PLACEMENT
    assert json.dumps(doc["info"]) == '{"x": ' + PLACEMENT + "}"
    assert type(doc["params"]["i"]) is int and type(doc["params"]["f"]) is float

"""``write_json_atomic`` refuses NaN and infinities instead of writing text that is not JSON.

Was: json.dumps' default (allow_nan=True) wrote ``NaN`` / ``Infinity``, which every reader of
ours (``load_json``, strict) then refused. Now: a ValueError naming the file and the field, and
nothing written (an existing file is kept as it was).
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from iro_fed.problem_io import load_json, write_json_atomic


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ({"rows": [{"gap": 0.1}, {"gap": math.nan}]}, "rows[1].gap"),
        ({"bound": -math.inf}, "bound"),
        ([1.0, math.inf], "[1]"),
        ({"score": np.float64("nan")}, "score"),
        (math.nan, "the document"),
    ],
)
def test_a_non_finite_number_is_refused_naming_the_file_and_the_field(tmp_path, data, field):
    path = tmp_path / "out.json"
    with pytest.raises(ValueError, match=r"which JSON cannot hold") as exc:
        write_json_atomic(path, data)
    assert str(exc.value).startswith(f"{path}: {field} is ")
    assert not path.exists()
    assert list(tmp_path.iterdir()) == []  # no temporary file left either


def test_an_existing_file_is_kept_when_the_new_document_is_refused(tmp_path):
    path = tmp_path / "out.json"
    write_json_atomic(path, {"gap": None})
    before = path.read_bytes()
    with pytest.raises(ValueError, match=r"gap is nan"):
        write_json_atomic(path, {"gap": math.nan})
    assert path.read_bytes() == before
    assert load_json(path.read_text()) == {"gap": None}


def test_finite_numbers_and_null_are_written_as_before(tmp_path):
    path = tmp_path / "out.json"
    data = {"a": [1, 2.5, None, -0.0, 1e308], "b": {"c": True}}
    write_json_atomic(path, data)
    assert path.read_text() == json.dumps(data, indent=2) + "\n"
    assert load_json(path.read_text()) == data


def test_another_value_error_keeps_jsons_message(tmp_path):
    data: dict = {}
    data["self"] = data
    with pytest.raises(ValueError, match="Circular reference"):
        write_json_atomic(tmp_path / "out.json", data)
    assert list(tmp_path.iterdir()) == []

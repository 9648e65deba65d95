"""``iro solve`` and ``iro compare`` note a problem file's unknown fields on stderr, as ``iro
validate`` does. Before: ``weights.carbonn`` and ``workloads[0].request`` were dropped without a
word (the run used the default carbon weight and the pod's real requests), and only validate said so."""

from __future__ import annotations

import json

import pytest

from iro_fed.cli import main
from iro_fed.testing import random_problem_doc

NOTES = ("weights.carbonn: unknown field, ignored", "workloads[0].request: unknown field, ignored")


@pytest.fixture
def typo_file(tmp_path):
    doc = random_problem_doc(1)
    doc.setdefault("weights", {})["carbonn"] = 2.0
    doc["workloads"][0]["request"] = {"cpu": 1}
    path = tmp_path / "typo.json"
    path.write_text(json.dumps(doc))
    return path


@pytest.mark.parametrize("command", [["solve", "--solver", "best-fit"], ["compare", "--solvers", "best-fit"]])
def test_unknown_fields_are_noted_on_stderr(typo_file, capsys, command):
    assert main([command[0], str(typo_file), *command[1:]]) == 0
    err = capsys.readouterr().err
    for note in NOTES:
        assert f"note: {typo_file}: {note}" in err


@pytest.mark.parametrize("command", [["solve", "--solver", "best-fit"], ["compare", "--solvers", "best-fit"]])
def test_out_dash_keeps_stdout_clean_json(typo_file, capsys, command):
    assert main([command[0], str(typo_file), *command[1:], "--out", "-"]) == 0
    captured = capsys.readouterr()
    json.loads(captured.out)  # the notes went to stderr only
    assert all(note in captured.err for note in NOTES)


def test_validate_notes_as_before(typo_file, capsys):
    assert main(["validate", str(typo_file)]) == 0
    err = capsys.readouterr().err
    assert all(f"note: {typo_file}: {note}" in err for note in NOTES)


def test_a_clean_file_has_no_note(tmp_path, capsys):
    path = tmp_path / "clean.json"
    path.write_text(json.dumps(random_problem_doc(1)))
    assert main(["solve", str(path), "--solver", "best-fit", "--out", "-"]) == 0
    assert "unknown field" not in capsys.readouterr().err

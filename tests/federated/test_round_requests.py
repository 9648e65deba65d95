"""The round-request folder as a work queue (no Flower needed): nothing is lost or taken twice."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from iro_fed.federated.registry import PolicyRegistry
from iro_fed.federated.round_requests import RUN_FORMAT, RoundRequestQueue


def test_claim_moves_requests_to_running_and_finish_files_them_with_a_record(tmp_path, write_round_request):
    first, second = write_round_request(tmp_path, "edge-madrid"), write_round_request(tmp_path, "edge-oslo")
    queue = RoundRequestQueue(tmp_path)
    assert [p.name for p in queue.pending()] == sorted(Path(f).name for f in (first, second))
    claimed, rejected = queue.claim()
    assert rejected == [] and queue.pending() == []
    assert sorted(r.site for r in claimed) == ["edge-madrid", "edge-oslo"]
    assert all(r.path.parent == tmp_path / "rounds" / "running" for r in claimed)
    assert queue.claim() == ([], [])  # nothing is claimed twice
    record = queue.finish(claimed, True, {"rounds": [{"round": 1, "version": 3}]})
    doc = json.loads(record.read_text())
    assert doc["format"] == RUN_FORMAT and doc["ok"] is True and doc["sites"] == ["edge-madrid", "edge-oslo"]
    assert doc["rounds"] == [{"round": 1, "version": 3}] and "moving error 0.2000" in doc["reasons"][0]
    assert sorted(p.name for p in (tmp_path / "rounds" / "done").iterdir()) == sorted([*doc["requests"], record.name])
    assert list((tmp_path / "rounds" / "running").iterdir()) == []
    assert PolicyRegistry(tmp_path).versions() == []  # the registry folder can hold the queue


def test_failed_runs_are_kept_and_stopped_or_crashed_runs_put_back(tmp_path, write_round_request):
    write_round_request(tmp_path, "a")
    queue = RoundRequestQueue(tmp_path)
    claimed, _ = queue.claim()
    queue.release(claimed)  # stopped before it finished
    assert [p.name for p in queue.pending()] == [claimed[0].path.name]
    claimed, _ = queue.claim()
    # the consumer died here: a new one puts the request back before anything else
    assert [p.name for p in RoundRequestQueue(tmp_path).recover()] == [claimed[0].path.name]
    claimed, _ = queue.claim()
    record = queue.finish(claimed, False, {"error": "flwr run failed (status 1)"})
    assert record.parent == tmp_path / "rounds" / "failed" and json.loads(record.read_text())["ok"] is False
    assert (tmp_path / "rounds" / "failed" / claimed[0].path.name).is_file()
    again = queue.finish([], True, {})  # a second record in the same second gets its own name
    assert again != record


@pytest.mark.parametrize(("text", "why"), [
    ("{", "not JSON"),
    ("[1]", "expected a JSON object"),
    ('{"format": "iro-fed/round-request/9", "site": "a", "reason": "r", "requested_at": "t"}', "format"),
    ('{"format": "iro-fed/round-request/1", "site": "", "reason": "r", "requested_at": "t"}', "site"),
])
def test_files_that_are_not_requests_are_set_aside_with_the_reason(tmp_path, text, why, write_round_request):
    write_round_request(tmp_path, "ok")
    (tmp_path / "requests" / "zz-bad.json").write_text(text)
    (tmp_path / "requests" / ".zz-bad.json.tmp123").write_text("{")  # a writer's temporary file: left alone
    claimed, rejected = RoundRequestQueue(tmp_path).claim()
    assert [r.site for r in claimed] == ["ok"]
    assert [p.name for p, _ in rejected] == ["zz-bad.json"] and why in rejected[0][1]
    error = json.loads((tmp_path / "rounds" / "rejected" / "zz-bad.error").read_text())
    assert error["file"] == "zz-bad.json" and why in error["error"]
    assert [p.name for p in (tmp_path / "requests").iterdir()] == [".zz-bad.json.tmp123"]


def test_a_file_in_place_of_the_folder_is_refused(tmp_path):
    (tmp_path / "f").write_text("x")
    with pytest.raises(ValueError, match="not a folder"):
        RoundRequestQueue(tmp_path / "f")

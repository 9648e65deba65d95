"""Files of the round-request folder that share a name never replace one another (review finding):
``os.replace`` overwrote the first ``bad.json`` in ``rejected/`` (and its ``.error``) with the second,
and a hand-named request done twice kept only the second copy in ``done/``."""

from __future__ import annotations

import json
from pathlib import Path

from iro_fed.federated.round_requests import RoundRequestQueue


def _request(path: Path, site: str) -> None:
    path.write_text(json.dumps({"format": "iro-fed/round-request/1", "site": site, "reason": "drift",
                                "requested_at": "2024-01-01T00:00:00Z"}), encoding="utf-8")


def test_a_second_rejected_file_of_the_same_name_keeps_the_first(tmp_path: Path) -> None:
    queue = RoundRequestQueue(tmp_path)
    (tmp_path / "requests" / "bad.json").write_text("{not json", encoding="utf-8")
    assert [p.name for p, _ in queue.claim()[1]] == ["bad.json"]
    (tmp_path / "requests" / "bad.json").write_text('["a list"]', encoding="utf-8")
    rejected = queue.claim()[1]
    assert [p.name for p, _ in rejected] == ["bad-2.json"]
    folder = tmp_path / "rounds" / "rejected"
    assert (folder / "bad.json").read_text(encoding="utf-8") == "{not json"  # was: '["a list"]'
    assert (folder / "bad-2.json").read_text(encoding="utf-8") == '["a list"]'
    assert "not JSON" in json.loads((folder / "bad.error").read_text())["error"]
    assert "expected a JSON object" in json.loads((folder / "bad-2.error").read_text())["error"]


def test_a_request_name_done_twice_keeps_both_requests(tmp_path: Path) -> None:
    queue = RoundRequestQueue(tmp_path)
    for site in ("edge-madrid", "edge-oslo"):
        _request(tmp_path / "requests" / "retrain.json", site)
        claimed, _ = queue.claim()
        record = json.loads(queue.finish(claimed, True, {"rounds": []}).read_text())
        assert record["sites"] == [site]
    done = tmp_path / "rounds" / "done"
    sites = sorted(json.loads(p.read_text())["site"] for p in done.glob("retrain*.json"))
    assert sites == ["edge-madrid", "edge-oslo"]  # was: ["edge-oslo"], the first request overwritten
    assert queue.pending() == [] and list((tmp_path / "rounds" / "running").iterdir()) == []

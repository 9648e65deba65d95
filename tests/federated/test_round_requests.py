"""The round-request folder as a work queue (no Flower needed): nothing is lost or taken twice."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from iro_fed.federated.registry import PolicyRegistry
from iro_fed.federated.round_requests import RUN_FORMAT, ClaimLostError, ConsumerBusyError, RoundRequestQueue

REPO = Path(__file__).resolve().parents[2]

# A consumer as its own process: claims what waits, prints the claimed names, then on "finish" on
# stdin files them as done and prints the record's path.
_CONSUMER = """
import json, sys
from iro_fed.federated.round_requests import RoundRequestQueue
queue = RoundRequestQueue(sys.argv[1])
claimed, _ = queue.claim()
print(json.dumps([r.path.name for r in claimed]), flush=True)
if sys.stdin.readline().strip() == "finish":
    print(queue.finish(claimed, True, {"rounds": []}), flush=True)
"""


def start_consumer(root: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", _CONSUMER, str(root)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO)


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
    queue.unlock()
    consumer = start_consumer(tmp_path)  # a real consumer process claims it ...
    (name,) = json.loads(consumer.stdout.readline())
    consumer.kill()  # ... and dies mid-run (SIGKILL: nothing of its own runs any more)
    consumer.wait(timeout=60)
    assert [p.name for p in (tmp_path / "rounds" / "running").iterdir()] == [name]
    # a new consumer puts the request back before anything else
    queue = RoundRequestQueue(tmp_path)
    assert [p.name for p in queue.recover()] == [name]
    claimed, _ = queue.claim()
    record = queue.finish(claimed, False, {"error": "flwr run failed (status 1)"})
    assert record.parent == tmp_path / "rounds" / "failed" and json.loads(record.read_text())["ok"] is False
    assert (tmp_path / "rounds" / "failed" / claimed[0].path.name).is_file()
    again = queue.finish([], True, {})  # a second record in the same second gets its own name
    assert again != record


def test_a_live_consumers_claims_are_not_recovered_and_a_second_consumer_is_refused(tmp_path, write_round_request):
    # Review finding: a second `iro fed rounds` started beside a running one put the first one's
    # claim back in requests/ at start-up, ran it again, and the first one's finish() raised
    # FileNotFoundError.
    write_round_request(tmp_path, "edge-madrid")
    consumer = start_consumer(tmp_path)
    try:
        (name,) = json.loads(consumer.stdout.readline())
        second = RoundRequestQueue(tmp_path)
        with pytest.raises(ConsumerBusyError, match=f"pid {consumer.pid} on .*only one consumer") as busy:
            second.recover()
        assert str(tmp_path) in str(busy.value)
        with pytest.raises(ConsumerBusyError):
            second.claim()
        assert [p.name for p in (tmp_path / "rounds" / "running").iterdir()] == [name]
        assert second.pending() == []
        out, err = consumer.communicate("finish\n", timeout=60)  # the first consumer files its run
        assert consumer.returncode == 0, err
    finally:
        if consumer.poll() is None:
            consumer.kill()
    doc = json.loads(Path(out.strip()).read_text())
    assert doc["ok"] is True and doc["requests"] == [name] and (tmp_path / "rounds" / "done" / name).is_file()
    # once it is gone, the next consumer takes over, with nothing to recover
    assert second.recover() == [] and second.claim() == ([], [])


def test_finishing_a_claim_that_was_moved_away_says_so_and_records_the_run(tmp_path, write_round_request):
    write_round_request(tmp_path, "a")
    write_round_request(tmp_path, "b")
    queue = RoundRequestQueue(tmp_path)
    claimed, _ = queue.claim()
    gone = claimed[0].path
    gone.rename(tmp_path / gone.name)  # an operator moved it out of running/
    with pytest.raises(ClaimLostError, match=f"{gone.name}: no longer in .*running.*run recorded in") as lost:
        queue.finish(claimed, True, {"rounds": []})  # was: FileNotFoundError from os.replace
    (record,) = (tmp_path / "rounds" / "done").glob("*-run.json")
    assert str(record) in str(lost.value)
    doc = json.loads(record.read_text())
    assert doc["requests"] == [claimed[1].path.name] and doc["missing"] == [gone.name]
    assert (tmp_path / "rounds" / "done" / claimed[1].path.name).is_file()
    write_round_request(tmp_path, "c")
    claimed, _ = queue.claim()
    claimed[0].path.unlink()
    with pytest.raises(ClaimLostError, match="not put back"):
        queue.release(claimed)


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

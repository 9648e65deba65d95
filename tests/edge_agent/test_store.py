"""The experience store: WAL, bounded with eviction, sound after kill -9 mid-write, a bad record
costs only itself, and a file it cannot use is an error naming the path."""

from __future__ import annotations

import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from edge_agent.store import (
    ExperienceStore,
    Outcome,
    StoreError,
    Transition,
    integrity_check,
    read_policy_samples,
    read_transitions,
)


def transition(i: int, dim: int = 6) -> Transition:
    return Transition(workload=f"w{i}", source="solver", state=np.arange(dim, dtype=np.float32) * i, action=0,
                      candidates=["a", "b"], reward=float(i), decision_id=f"{i:09d}")


def test_wal_bounded_eviction_and_reads(tmp_path):
    store = ExperienceStore(tmp_path / "exp.db", max_rows=10)
    for i in range(25):
        store.record(transition(i), Outcome(f"{i:09d}", {"latency_ms": i / 2}, node="a"))
    assert store.flush()
    assert store.counts() == {"transitions": 10, "outcomes": 10}
    rows = store.transitions()
    assert [r["reward"] for r in rows] == [float(i) for i in range(15, 25)]  # the newest survive
    assert np.array_equal(rows[-1]["state"], np.arange(6, dtype=np.float32) * 24)
    sample = store.sample(4, seed=1)
    assert len(sample) == 4 and {r["decision_id"] for r in sample} <= {r["decision_id"] for r in rows}
    assert [r["id"] for r in store.sample(4, seed=1)] == [r["id"] for r in sample]  # seeded
    conn = sqlite3.connect(tmp_path / "exp.db")
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    conn.close()
    store.close()
    # Closing checkpoints the WAL: the data is in the main file, a reader opens it read-only.
    assert [r["reward"] for r in read_transitions(tmp_path / "exp.db")] == [float(i) for i in range(15, 25)]
    assert integrity_check(tmp_path / "exp.db") == "ok"


WRITER = textwrap.dedent(
    """
    import sys, numpy as np
    from edge_agent.store import ExperienceStore, Outcome, Transition
    store = ExperienceStore(sys.argv[1], max_rows=int(sys.argv[2]), batch_s=0.002)
    i = 0
    while True:
        t = Transition(workload=f"w{i}", source="solver", state=np.arange(8, dtype=np.float32) * i, action=i % 3,
                       candidates=["n1", "n2", "n3"], reward=float(i), decision_id=f"{i:09d}")
        store.record(t, Outcome(t.decision_id, {"i": i, "pad": "x" * 200}, node="n1"))
        i += 1
        if i == 50:
            store.flush()
            print("writing", flush=True)
    """
)


def test_survives_kill_9_mid_write(tmp_path):
    path = tmp_path / "exp.db"
    max_rows = 2000  # small enough that eviction runs while the writer is killed
    child = subprocess.Popen([sys.executable, "-c", WRITER, str(path), str(max_rows)], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "writing"
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:  # wait until eviction has happened at least once
            conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=10)
            lo = conn.execute("SELECT MIN(id) FROM transitions").fetchone()[0]
            conn.close()
            if lo and lo > 1:
                break
            time.sleep(0.05)
        child.send_signal(signal.SIGKILL)
        assert child.wait(10) == -signal.SIGKILL
    finally:
        if child.poll() is None:
            child.kill()
    assert integrity_check(path) == "ok"
    conn = sqlite3.connect(path)
    ids = [r[0] for r in conn.execute("SELECT id FROM transitions ORDER BY id")]
    decisions = [r[0] for r in conn.execute("SELECT decision_id FROM transitions ORDER BY id")]
    outcome_ids = [r[0] for r in conn.execute("SELECT decision_id FROM outcomes ORDER BY id")]
    conn.close()
    assert ids[0] > 1, "eviction never ran before the kill"
    assert 0 < len(ids) <= max_rows
    assert ids == list(range(ids[0], ids[-1] + 1))  # contiguous: no torn batch, eviction of the oldest only
    assert decisions == outcome_ids  # every committed transition has its outcome (same transaction)
    for row in read_transitions(path, limit=max_rows):
        i = int(row["decision_id"])
        assert row["reward"] == float(i) and row["action"] == i % 3
        assert np.array_equal(row["state"], np.arange(8, dtype=np.float32) * i)
    # The store opens again and keeps writing after the crash.
    store = ExperienceStore(path, max_rows=max_rows)
    store.record(transition(10**8, dim=8))
    assert store.flush()
    assert store.transitions(limit=1, after_id=ids[-1])[0]["decision_id"] == f"{10**8:09d}"
    store.close()
    assert integrity_check(path) == "ok"


def test_a_bad_record_rolls_back_its_batch_and_the_writer_keeps_going(tmp_path):
    store = ExperienceStore(tmp_path / "exp.db", max_rows=100)
    bad = transition(1)
    bad.state = np.array(["not", "numbers"])  # cannot become float32
    store.record(bad)
    assert store.flush()
    assert store.failed == 1 and "ValueError" in store.last_error
    store.record(transition(2))
    assert store.flush()
    assert [r["reward"] for r in store.transitions()] == [2.0] and store.last_error is None
    store.close()


def test_a_bad_record_costs_only_itself_not_its_batch(tmp_path):
    # batch_s: the writer holds the batch open until flush(), so all five records share one batch.
    store = ExperienceStore(tmp_path / "exp.db", max_rows=100, batch_s=60)
    bad = transition(2)
    bad.workload = "w\ud800"  # a lone surrogate: sqlite cannot encode it, the INSERT fails mid-batch
    good_with_bad_outcome = transition(4)
    store.record(transition(1), Outcome(f"{1:09d}", {"ok": 1}))
    store.record(bad, Outcome(bad.decision_id, {"ok": 2}))
    store.record(transition(3))
    store.record(good_with_bad_outcome, Outcome(good_with_bad_outcome.decision_id, {}, node="n\udc00"))
    store.record(outcome=Outcome(f"{3:09d}", {"ok": 3}))
    assert store.flush(timeout=30)  # a flush commits at once, it does not wait out batch_s
    rows = store.transitions()
    assert [r["decision_id"] for r in rows] == [f"{1:09d}", f"{3:09d}"]  # the other records are kept
    conn = sqlite3.connect(tmp_path / "exp.db")
    outcomes = [r[0] for r in conn.execute("SELECT decision_id FROM outcomes ORDER BY id")]
    conn.close()
    # A transition and its outcome stay all or nothing: neither half of the two bad pairs is there.
    assert outcomes == [f"{1:09d}", f"{3:09d}"]
    assert store.failed == 2 and "UnicodeEncodeError" in store.last_error
    assert store.written == 3
    store.close()
    assert integrity_check(tmp_path / "exp.db") == "ok"


def _read_only(path: Path) -> Callable[[], None]:
    """Make ``path`` read-only for this process (chattr +i as root, who ignores permissions);
    returns the undo."""
    if os.geteuid() != 0:
        path.chmod(0o444)
        return lambda: path.chmod(0o644)
    chattr = shutil.which("chattr")
    if chattr is None or subprocess.run([chattr, "+i", str(path)], capture_output=True).returncode != 0:
        pytest.skip("running as root without chattr +i: cannot make a file read-only")
    return lambda: subprocess.run([chattr, "-i", str(path)], check=True)


@pytest.mark.parametrize("case", ["not a database", "read-only", "a folder", "folder is a file"])
def test_an_unusable_store_file_is_a_clear_error_naming_the_path(tmp_path, case):
    path = tmp_path / "exp.db"
    undo = None
    if case == "not a database":
        path.write_bytes(b"name,value\n" * 100)
        expect = "not an sqlite database"
    elif case == "read-only":
        ExperienceStore(path).close()
        undo = _read_only(path)
        expect = "read-only"
    elif case == "a folder":
        path.mkdir()
        expect = "is a folder, not a file"
    else:
        (tmp_path / "data").write_text("a file where the store's folder should be")
        path = tmp_path / "data" / "exp.db"
        expect = f"cannot create its folder {str(path.parent)!r}: {str(tmp_path / 'data')!r} is a file, not a folder"
    try:
        with pytest.raises(StoreError) as info:
            ExperienceStore(path)
    finally:
        if undo is not None:
            undo()
    assert str(path) in str(info.value) and expect in str(info.value)
    assert info.value.path == path and expect in info.value.strerror
    assert isinstance(info.value, sqlite3.Error)  # what callers (edge-agent run, the ClientApp) catch


def test_a_missing_folder_is_created(tmp_path):
    store = ExperienceStore(tmp_path / "a" / "b" / "exp.db")
    store.record(transition(1))
    assert store.flush()
    store.close()
    assert [r["decision_id"] for r in read_transitions(tmp_path / "a" / "b" / "exp.db")] == [f"{1:09d}"]


def test_readers_take_any_path_and_create_nothing(tmp_path):
    # '#' and '?' are URI syntax: the read-only URI must escape them, or sqlite opens (and
    # creates, read-write) another file: here "site".
    folder = tmp_path / "site#1?x"
    store = ExperienceStore(folder / "exp.db")
    store.record(transition(7))
    assert store.flush()
    assert [r["decision_id"] for r in read_transitions(folder / "exp.db")] == [f"{7:09d}"]
    assert store.counts() == {"transitions": 1, "outcomes": 0}
    store.close()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["site#1?x"]
    missing = tmp_path / "missing.db"
    for read in (read_transitions, integrity_check, lambda p: read_policy_samples(p, 4, 3, 2)):
        with pytest.raises(StoreError, match="no such file") as info:
            read(missing)
        assert str(missing) in str(info.value)
    assert not missing.exists()  # integrity_check used to create an empty database and call it "ok"
    (tmp_path / "junk.db").write_bytes(b"\x00junk" * 50)
    with pytest.raises(StoreError, match="not an sqlite database"):
        read_transitions(tmp_path / "junk.db")

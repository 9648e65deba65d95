"""The experience store: WAL, bounded with eviction, and sound after kill -9 mid-write."""

from __future__ import annotations

import signal
import sqlite3
import subprocess
import sys
import textwrap
import time

import numpy as np

from edge_agent.store import ExperienceStore, Outcome, Transition, integrity_check, read_transitions


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

"""The experience store keeps the records a failing file refuses (here: a real write lock held by
another connection beyond the store's busy timeout) and commits them, in order, once the file
works again; bounded by ``max_pending``; flush and close say what happened."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest

from edge_agent.store import ExperienceStore, Outcome, Transition, integrity_check

BUSY_S = 0.05  # the store's busy timeout: a held lock fails its write at once, not after 10 s


def transition(i: int) -> Transition:
    return Transition(workload=f"w{i}", source="solver", state=np.arange(4, dtype=np.float32) * i, action=0,
                      candidates=["a", "b"], reward=float(i), decision_id=f"{i:09d}")


def record(store: ExperienceStore, i: int) -> None:
    store.record(transition(i), Outcome(f"{i:09d}", {"i": i}, node="a"))


@contextmanager
def write_lock(path: Path) -> Iterator[None]:
    """Another process's writer: holds the database's write lock until the block ends."""
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("BEGIN EXCLUSIVE")
    try:
        yield
    finally:
        conn.execute("ROLLBACK")
        conn.close()


def wait_until(check: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + 60  # generous: a condition, not a duration, is what is tested
    while not check():
        assert time.monotonic() < deadline, f"never happened: {what}"
        time.sleep(0.01)


def committed(path: Path) -> tuple[list[str], list[str]]:
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=10)
    try:
        transitions = [r[0] for r in conn.execute("SELECT decision_id FROM transitions ORDER BY id")]
        outcomes = [r[0] for r in conn.execute("SELECT decision_id FROM outcomes ORDER BY id")]
    finally:
        conn.close()
    return transitions, outcomes


def ids(numbers: range | list[int]) -> list[str]:
    return [f"{i:09d}" for i in numbers]


def test_records_queued_while_the_file_is_locked_are_committed_in_order_once_it_is_free(tmp_path):
    path = tmp_path / "exp.db"
    store = ExperienceStore(path, busy_timeout_s=BUSY_S)
    record(store, 0)
    assert store.flush()
    with write_lock(path):
        for i in range(1, 21):
            record(store, i)
        wait_until(lambda: store.pending == 20 and "locked" in (store.last_error or ""),
                   "the 20 records wait for the locked file")
        assert store.failed == 0 and "records pending" in store.last_error
        assert committed(path) == (ids([0]), ids([0]))  # readers still read (WAL); nothing half-written
        for i in range(21, 31):  # still queued behind the pending ones
            record(store, i)
    for i in range(31, 41):  # the file works again
        record(store, i)
    assert store.flush(timeout=60)
    assert committed(path) == (ids(range(41)), ids(range(41)))  # every record, in order, with its outcome
    assert (store.failed, store.pending, store.written, store.last_error) == (0, 0, 41, None)
    store.close()
    assert integrity_check(path) == "ok"


def test_a_bad_record_among_pending_ones_costs_only_itself(tmp_path):
    path = tmp_path / "exp.db"
    store = ExperienceStore(path, busy_timeout_s=BUSY_S)
    bad = transition(2)
    bad.workload = "w\ud800"  # a lone surrogate: sqlite cannot encode it
    with write_lock(path):
        record(store, 1)
        store.record(bad, Outcome(bad.decision_id, {}))
        record(store, 3)
        wait_until(lambda: store.pending == 3, "the 3 records wait for the file")
        assert store.failed == 0
    assert store.flush(timeout=60)
    assert committed(path) == (ids([1, 3]), ids([1, 3]))
    assert store.failed == 1 and "UnicodeEncodeError" in store.last_error and store.pending == 0
    store.close()


def test_a_long_outage_drops_only_the_oldest_beyond_max_pending(tmp_path):
    path = tmp_path / "exp.db"
    store = ExperienceStore(path, busy_timeout_s=BUSY_S, max_pending=5)
    with write_lock(path):
        for i in range(12):
            record(store, i)
        # pending + failed account for all 12 records once the writer has taken them all.
        wait_until(lambda: (store.pending, store.failed) == (5, 7) and "7 oldest" in (store.last_error or ""),
                   "5 pending, the 7 oldest dropped and said so")
        assert "the 7 oldest were dropped: more than store.max_pending (5)" in store.last_error
    assert store.flush(timeout=60)
    assert committed(path) == (ids(range(7, 12)), ids(range(7, 12)))  # the newest 5, in order
    assert (store.failed, store.pending, store.written) == (7, 0, 5)
    store.close()


def test_flush_is_false_while_the_file_fails_and_true_at_once_when_it_works(tmp_path):
    path = tmp_path / "exp.db"
    # batch_s=60: the backoff starts at 30 s, so only a flush that tries at once commits within
    # its timeout below; it must not wait out the backoff (or batch_s).
    store = ExperienceStore(path, busy_timeout_s=BUSY_S, batch_s=60)
    with write_lock(path):
        record(store, 1)
        assert store.flush(timeout=0.5) is False
        wait_until(lambda: store.pending == 1, "the record waits for the file")
        assert store.failed == 0
        assert store.flush(timeout=0.5) is False  # still refused: still pending, not dropped
    record(store, 2)
    assert store.flush(timeout=20) is True
    assert committed(path) == (ids([1, 2]), ids([1, 2]))
    assert (store.failed, store.pending) == (0, 0)
    store.close()


def test_close_makes_one_last_try_for_pending_records(tmp_path):
    path = tmp_path / "exp.db"
    store = ExperienceStore(path, busy_timeout_s=BUSY_S, batch_s=60)
    with write_lock(path):
        for i in range(3):
            record(store, i)
        assert store.flush(timeout=0.5) is False
        wait_until(lambda: store.pending == 3, "the 3 records wait for the file")
    store.close(timeout=60)  # the lock is gone: close writes them, without waiting for the retry
    assert committed(path) == (ids(range(3)), ids(range(3)))
    assert (store.failed, store.pending, store.last_error) == (0, 0, None)
    assert integrity_check(path) == "ok"


def test_close_during_an_outage_counts_what_it_cannot_write(tmp_path):
    path = tmp_path / "exp.db"
    store = ExperienceStore(path, busy_timeout_s=BUSY_S)
    record(store, 0)
    assert store.flush()
    with write_lock(path):
        for i in range(1, 4):
            record(store, i)
        wait_until(lambda: store.pending == 3, "the 3 records wait for the file")
        store.close(timeout=60)  # does not raise, does not hang
        assert store.failed == 3 and store.pending == 0
        assert "3 pending records not written at close" in store.last_error and "locked" in store.last_error
        with pytest.raises(RuntimeError, match="closed"):
            record(store, 4)
    assert committed(path) == (ids([0]), ids([0]))
    assert integrity_check(path) == "ok"


@pytest.mark.parametrize(("kwargs", "name"), [
    ({"max_pending": 0}, "store.max_pending"),
    ({"max_pending": 2.5}, "store.max_pending"),
    ({"max_pending": True}, "store.max_pending"),
    ({"busy_timeout_s": -1}, "store.busy_timeout_s"),
    ({"busy_timeout_s": float("nan")}, "store.busy_timeout_s"),
    ({"busy_timeout_s": "10"}, "store.busy_timeout_s"),
])
def test_bad_retry_settings_are_errors_naming_the_setting(tmp_path, kwargs, name):
    with pytest.raises(ValueError, match=name):
        ExperienceStore(tmp_path / "exp.db", **kwargs)
    assert not (tmp_path / "exp.db").exists()  # refused before the file is made

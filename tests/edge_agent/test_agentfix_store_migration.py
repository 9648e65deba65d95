"""Store files from before one-outcome-per-decision may hold several outcomes for a decision (a
retried POST /outcome stored a second row). Opening one keeps the first outcome of each decision,
drops the others (a log line says how many), adds a unique index, and keeps every other row; all
in one transaction. The old-format files are built here with sqlite3, as schema 2 made them."""

from __future__ import annotations

import json
import logging
import sqlite3
from pathlib import Path

import pytest

from edge_agent.store import ExperienceStore, Outcome, StoreError, integrity_check

# The tables and index of schema 2 (edge_agent/store.py before the unique index).
SCHEMA_2 = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE transitions (
    id INTEGER PRIMARY KEY AUTOINCREMENT, ts REAL NOT NULL, decision_id TEXT NOT NULL UNIQUE,
    workload TEXT NOT NULL, source TEXT NOT NULL, policy_version TEXT, state BLOB NOT NULL,
    state_dim INTEGER NOT NULL, action INTEGER NOT NULL, candidates TEXT NOT NULL, reward REAL NOT NULL,
    next_state BLOB, done INTEGER NOT NULL DEFAULT 1, info TEXT NOT NULL DEFAULT '{}',
    obs_k INTEGER, obs_candidates BLOB, obs_context BLOB, obs_mask BLOB, obs_action INTEGER, obs_reward REAL
);
CREATE TABLE outcomes (
    id INTEGER PRIMARY KEY AUTOINCREMENT, ts REAL NOT NULL, decision_id TEXT NOT NULL, node TEXT,
    observed TEXT NOT NULL
);
CREATE INDEX outcomes_decision ON outcomes (decision_id);
INSERT INTO meta VALUES ('schema_version', '2');
"""

# (decision, node, observed) in insertion order: d1 three times (a repeat and a different one),
# d2 twice, d3 once, and an outcome of a decision evicted since (d0: no transition any more).
OUTCOMES = [("d1", "a", {"v": 1}), ("d1", "a", {"v": 1}), ("d2", "b", {"v": 2}), ("d1", "c", {"v": 9}),
            ("d3", None, {"v": 3}), ("d2", "b", {"v": 2}), ("d0", "a", {"v": 0})]
FIRST = [(1, "d1", "a", {"v": 1}), (3, "d2", "b", {"v": 2}), (5, "d3", None, {"v": 3}), (7, "d0", "a", {"v": 0})]


def old_store(path: Path, extra_sql: str = "") -> None:
    conn = sqlite3.connect(path, isolation_level=None)
    conn.executescript(SCHEMA_2 + extra_sql)
    for i in (1, 2, 3, 4):
        conn.execute("INSERT INTO transitions (ts, decision_id, workload, source, state, state_dim, action,"
                     " candidates, reward) VALUES (?, ?, ?, 'solver', ?, 1, 0, '[\"a\"]', ?)",
                     (float(i), f"d{i}", f"w{i}", b"\0\0\0\0", float(i)))
    for i, (did, node, observed) in enumerate(OUTCOMES, 1):
        conn.execute("INSERT INTO outcomes (ts, decision_id, node, observed) VALUES (?, ?, ?, ?)",
                     (float(i), did, node, json.dumps(observed)))
    conn.close()


def rows(path: Path) -> tuple[list[str], list[tuple]]:
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        transitions = [r[0] for r in conn.execute("SELECT decision_id FROM transitions ORDER BY id")]
        outcomes = [(i, d, n, json.loads(o)) for i, d, n, o in
                    conn.execute("SELECT id, decision_id, node, observed FROM outcomes ORDER BY id")]
        return transitions, outcomes
    finally:
        conn.close()


def unique_index(path: Path) -> bool:
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return any(r[2] and [c[2] for c in conn.execute(f"PRAGMA index_info('{r[1]}')")] == ["decision_id"]
                   for r in conn.execute("PRAGMA index_list('outcomes')"))
    finally:
        conn.close()


class Captured(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


def test_opening_an_old_store_keeps_the_first_outcome_per_decision_and_every_other_row(tmp_path) -> None:
    path = tmp_path / "exp.db"
    old_store(path)
    log = logging.getLogger("test_agentfix_store_migration")
    captured = Captured()
    log.addHandler(captured)
    try:
        store = ExperienceStore(path, logger=log)
        store.close()
        again = ExperienceStore(path, logger=log)  # migrated once: nothing more to drop, no second line
    finally:
        log.removeHandler(captured)
    assert rows(path) == (["d1", "d2", "d3", "d4"], FIRST)
    dropped = [r for r in captured.records if "duplicate outcomes dropped" in r.getMessage()]
    assert len(dropped) == 1 and dropped[0].levelno == logging.WARNING
    assert dropped[0].fields["dropped"] == 3 and dropped[0].fields["path"] == str(path)
    assert unique_index(path) and integrity_check(path) == "ok"
    # The store answers with the kept outcome; the file itself refuses a second one.
    assert again.record_outcome(Outcome("d1", {"v": 1}, node="a")).status == "duplicate"
    assert again.record_outcome(Outcome("d1", {"v": 9}, node="c")).outcome_id == 1  # conflict with the first
    assert again.record_outcome(Outcome("d4", {"v": 4})).status == "recorded"
    again.close()
    conn = sqlite3.connect(path)
    with pytest.raises(sqlite3.IntegrityError, match="UNIQUE"):
        conn.execute("INSERT INTO outcomes (ts, decision_id, node, observed) VALUES (0, 'd3', NULL, '{}')")
    assert conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone() == ("3",)
    conn.close()


def test_a_new_store_has_the_unique_index_and_logs_nothing(tmp_path) -> None:
    log = logging.getLogger("test_agentfix_store_migration.new")
    captured = Captured()
    log.addHandler(captured)
    try:
        ExperienceStore(tmp_path / "exp.db", logger=log).close()
    finally:
        log.removeHandler(captured)
    assert unique_index(tmp_path / "exp.db") and captured.records == []


def test_a_migration_that_fails_leaves_the_old_file_as_it_was(tmp_path) -> None:
    """The last step of the migration's transaction (the schema version) fails: the duplicates
    deleted before it come back, and no index is left."""
    path = tmp_path / "exp.db"
    old_store(path, "CREATE TRIGGER no_upgrade BEFORE INSERT ON meta BEGIN SELECT RAISE(ABORT, 'no upgrade'); END;")
    before = rows(path)
    with pytest.raises(StoreError, match="no upgrade"):
        ExperienceStore(path)
    assert rows(path) == before and len(before[1]) == len(OUTCOMES)
    assert not unique_index(path) and integrity_check(path) == "ok"

"""The experience store's file: its sqlite schema, how a policy sample is stored, and the readers.

The edge agent writes the file (:class:`edge_agent.store.ExperienceStore`, whose docstring says
how: WAL, one writer thread, bounded tables); everything that only reads it (the federated
ClientApp's ``experience-db``, tests, tools) needs no more than this module, which imports only
the standard library and numpy. The format is defined once, here, for the writer and the readers.

Tables (:data:`SCHEMA`): ``transitions`` (one decision each: ``state`` a float32 blob of
``state_dim`` values, ``candidates`` and ``info`` JSON, ``next_state`` a float32 blob or NULL)
and ``outcomes`` (``observed`` JSON), plus ``meta`` (``schema_version``).

* Schema 2 (:data:`POLICY_COLUMNS`): a transition may also carry the decision in the federated
  DQN's own observation format (:func:`iro_fed.features.observation`: ``candidates[k, F]``
  float32, ``context[C]`` float32, ``mask[k+1]`` int8, as raw blobs with ``obs_k``), the slot of
  the chosen node among those candidates and the simulator env's reward for it; NULL when the
  agent recorded none. :func:`read_policy_samples` returns them.
* Schema 3 (:data:`UNIQUE_OUTCOMES_INDEX`): one outcome per decision, held by a unique index.

Readers open the file read-only (:func:`connect` with ``readonly=True``), from any thread or
process, and never create it: a missing file, a folder, or a file that is not a database is a
:class:`StoreError` naming the path and the reason.
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

SCHEMA_VERSION = 3

#: The tables (the writer adds :data:`POLICY_COLUMNS` and :data:`UNIQUE_OUTCOMES_INDEX` to them).
SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS transitions (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    ts REAL NOT NULL,
    decision_id TEXT NOT NULL UNIQUE,
    workload TEXT NOT NULL,
    source TEXT NOT NULL,
    policy_version TEXT,
    state BLOB NOT NULL,
    state_dim INTEGER NOT NULL,
    action INTEGER NOT NULL,
    candidates TEXT NOT NULL,
    reward REAL NOT NULL,
    next_state BLOB,
    done INTEGER NOT NULL DEFAULT 1,
    info TEXT NOT NULL DEFAULT '{}'
);
CREATE TABLE IF NOT EXISTS outcomes (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    ts REAL NOT NULL,
    decision_id TEXT NOT NULL,
    node TEXT,
    observed TEXT NOT NULL
);
"""

#: Schema 3: one outcome per decision, held by the file itself (files of schema 2 and before may
#: hold several: :meth:`edge_agent.store.ExperienceStore._unique_outcomes` keeps the first of each).
UNIQUE_OUTCOMES_INDEX = "outcomes_decision_unique"

#: Schema 2: the decision as a policy sample (NULL when the agent recorded none).
POLICY_COLUMNS = (("obs_k", "INTEGER"), ("obs_candidates", "BLOB"), ("obs_context", "BLOB"), ("obs_mask", "BLOB"),
                  ("obs_action", "INTEGER"), ("obs_reward", "REAL"))


@dataclass
class PolicySample:
    """The decision as the federated DQN sees it: observation, chosen slot, env-scale reward."""

    obs: dict[str, np.ndarray]  # candidates [k, F] float32, context [C] float32, mask [k+1] int8
    action: int
    reward: float
    row_id: int | None = None
    """The store row it was read from (:func:`read_policy_samples`; None when not read from a store):
    the federated learner pairs each decision only with the row right after it, its successor."""


@dataclass
class PolicySamples:
    """What :func:`read_policy_samples` found: usable samples and why the other rows were left out."""

    samples: list[PolicySample]
    without_observation: int = 0  # decisions recorded without a policy sample
    other_shape: int = 0  # samples for another top-k or feature set than asked for
    invalid: int = 0  # a chosen slot that is masked, or a non-finite value


class StoreError(sqlite3.Error):
    """An experience store file that cannot be opened or read. ``path`` is the file, ``strerror``
    the reason without the path (as :class:`OSError` has it, for callers that name the setting)."""

    def __init__(self, path: str | Path, reason: str) -> None:
        self.path = Path(path)
        self.strerror = reason
        super().__init__(f"experience store {str(self.path)!r}: {reason}")


def explain(path: Path, exc: BaseException) -> str:
    """What an error of sqlite or the file system means for the store file at ``path``."""
    text = str(exc)
    if isinstance(exc, sqlite3.DatabaseError) and "not a database" in text:
        return f"not an sqlite database ({text}): another file is at this path?"
    if "readonly" in text or "read-only" in text:
        return (f"read-only ({text}): the agent writes the file and its -wal and -shm files beside it, "
                "so the file and its folder must be writable")
    if "locked" in text:
        return f"{text}: another process (another agent?) holds a write lock on it"
    if "unable to open" in text:
        if path.is_dir():
            return "is a folder, not a file"
        if not path.parent.is_dir():
            return f"its folder {str(path.parent)!r} does not exist"
        return f"{text} (can the file and its folder be read and written?)"
    if isinstance(exc, OSError):
        return exc.strerror or text
    return f"{type(exc).__name__}: {text}"


def require_file(path: Path) -> None:
    """A store file a reader opens must be there: sqlite would make an empty one, or say only
    "unable to open database file"."""
    if not path.is_file():
        raise StoreError(path, "is a folder, not a file" if path.is_dir() else "no such file")


def connect(path: Path, readonly: bool = False, busy_timeout_s: float = 10.0) -> sqlite3.Connection:
    """A connection to the store file at ``path``: read-only (the file must exist), or the writer's
    (autocommit, WAL journal, ``synchronous=NORMAL``). Any failure is a :class:`StoreError`."""
    try:
        if readonly:
            require_file(path)  # mode=ro would say only "unable to open database file"
            # A URI from as_uri(): a '#', '?' or '%' in the path is escaped, not read as URI syntax
            # (f"file:{path}" would open another file, read-write).
            uri = path.resolve().as_uri() + "?mode=ro"
            conn = sqlite3.connect(uri, uri=True, timeout=10.0, check_same_thread=False)
        else:
            conn = sqlite3.connect(str(path), timeout=busy_timeout_s, check_same_thread=False, isolation_level=None)
    except sqlite3.Error as exc:
        if isinstance(exc, StoreError):
            raise
        raise StoreError(path, explain(path, exc)) from exc
    try:
        conn.execute(f"PRAGMA busy_timeout={int(busy_timeout_s * 1000)}")
        if readonly:
            conn.execute("SELECT COUNT(*) FROM sqlite_master").fetchone()  # "not a database" here, not later
        else:
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")
    except sqlite3.Error as exc:
        conn.close()
        raise StoreError(path, explain(path, exc)) from exc
    return conn


def read_transitions(
    path: str | Path, limit: int = 1000, after_id: int = 0, ids: list[int] | None = None
) -> list[dict[str, Any]]:
    """Read transitions (``id > after_id``, or exactly ``ids``) from a store file, oldest first,
    without opening it for writing."""
    columns = (
        "SELECT id, ts, decision_id, workload, source, policy_version, state, state_dim, action, candidates,"
        " reward, next_state, done, info FROM transitions"
    )
    conn = connect(Path(path), readonly=True)
    try:
        if ids is not None:
            rows = []
            for start in range(0, len(ids), 500):
                chunk = ids[start : start + 500]
                marks = ",".join("?" * len(chunk))
                rows += conn.execute(f"{columns} WHERE id IN ({marks})", chunk).fetchall()  # noqa: S608
            rows.sort(key=lambda r: r[0])
        else:
            rows = conn.execute(f"{columns} WHERE id > ? ORDER BY id LIMIT ?", (after_id, limit)).fetchall()  # noqa: S608
    finally:
        conn.close()
    out = []
    for r in rows:
        out.append(
            {
                "id": r[0], "ts": r[1], "decision_id": r[2], "workload": r[3], "source": r[4], "policy_version": r[5],
                "state": np.frombuffer(r[6], dtype=np.float32, count=r[7]), "action": r[8],
                "candidates": json.loads(r[9]), "reward": r[10],
                "next_state": None if r[11] is None else np.frombuffer(r[11], dtype=np.float32),
                "done": bool(r[12]), "info": json.loads(r[13]),
            }
        )
    return out


def encode_policy_sample(sample: PolicySample | None) -> tuple[Any, ...]:
    """The values of :data:`POLICY_COLUMNS` for ``sample`` (all NULL for None), as the writer stores them."""
    if sample is None:
        return (None,) * len(POLICY_COLUMNS)
    cand = np.ascontiguousarray(sample.obs["candidates"], dtype=np.float32)
    if cand.ndim != 2:
        raise ValueError(f"policy sample: candidates must be [k, F], got shape {cand.shape}")
    ctx = np.ascontiguousarray(sample.obs["context"], dtype=np.float32).reshape(-1)
    mask = np.ascontiguousarray(sample.obs["mask"], dtype=np.int8).reshape(-1)
    return (int(cand.shape[0]), cand.tobytes(), ctx.tobytes(), mask.tobytes(), int(sample.action), float(sample.reward))


def read_policy_samples(
    path: str | Path, k: int, candidate_features: int, context_features: int, limit: int = 100_000
) -> PolicySamples:
    """The newest ``limit`` decisions of a store file as policy samples for a DQN with ``k``
    candidate slots (plus the defer slot) and the given feature sizes, oldest first, each with its
    ``row_id``; read-only."""
    conn = connect(Path(path), readonly=True)
    try:
        have = {r[1] for r in conn.execute("PRAGMA table_info(transitions)")}
        if "obs_k" not in have:  # a schema-1 file: no policy samples at all
            total = int(conn.execute("SELECT COUNT(*) FROM (SELECT id FROM transitions ORDER BY id DESC LIMIT ?)",
                                     (limit,)).fetchone()[0])
            return PolicySamples([], without_observation=total)
        rows = conn.execute(
            "SELECT id, obs_k, obs_candidates, obs_context, obs_mask, obs_action, obs_reward FROM transitions"
            " ORDER BY id DESC LIMIT ?", (limit,)
        ).fetchall()
    finally:
        conn.close()
    out = PolicySamples([])
    for row_id, obs_k, cand, ctx, mask, action, reward in reversed(rows):
        if obs_k is None:
            out.without_observation += 1
            continue
        cand_a = np.frombuffer(cand, dtype=np.float32)
        ctx_a = np.frombuffer(ctx, dtype=np.float32)
        mask_a = np.frombuffer(mask, dtype=np.int8)
        if (obs_k != k or cand_a.size != k * candidate_features or ctx_a.size != context_features
                or mask_a.size != k + 1):
            out.other_shape += 1
            continue
        if (not 0 <= action < mask_a.size or not mask_a[action] or not np.isfinite(reward)
                or not np.isfinite(cand_a).all() or not np.isfinite(ctx_a).all()):
            out.invalid += 1
            continue
        obs = {"candidates": cand_a.reshape(k, candidate_features).copy(), "context": ctx_a.copy(),
               "mask": mask_a.copy()}
        out.samples.append(PolicySample(obs, int(action), float(reward), int(row_id)))
    return out

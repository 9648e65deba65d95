"""Local experience store: decisions (transitions) and observed outcomes in sqlite.

* WAL journal with ``synchronous=NORMAL``: a committed transaction survives the process being
  killed (``kill -9``) and the file is never corrupted by it; a power loss may lose the last
  commits but not the database (sqlite's WAL guarantees).
* One writer thread owns the write connection; :meth:`ExperienceStore.record` only queues, so
  ``/recommend`` never waits on the disk. A transition and its outcome queued together are
  committed in one transaction (all or nothing).
* A record that cannot be written (a value sqlite cannot take) costs only itself: when a batch
  fails, it is rolled back and written again one record (a transition and its outcome) per
  transaction, so the other records of the batch are kept; ``failed`` and ``last_error`` say what
  was dropped. Nothing is half-written: a transaction is all or nothing.
* A file that fails for a while (locked by another process beyond the busy timeout, disk full,
  a read-only remount, an I/O error: an ``OperationalError``) loses nothing: the records stay in
  memory, in order (``pending`` counts them), and are tried again with the next batch after a
  backoff (from ``batch_s`` or 0.5 s, doubling up to 30 s; a :meth:`~ExperienceStore.flush`
  tries at once); once the file works, all of them are committed in order. Bounded: beyond
  ``max_pending`` records the oldest are dropped, and what :meth:`~ExperienceStore.close` cannot
  write is left; both are counted in ``failed`` and said in ``last_error``. An outcome whose
  caller was answered ``pending`` is never dropped for the bound (nor the decision it needs):
  :meth:`~ExperienceStore.record_outcome` refuses new outcomes (``full``) while ``max_pending``
  records wait, so the caller sends it again later instead of losing it unseen.
* Bounded: each table keeps at most ``max_rows`` rows; the oldest are evicted after each batch.
* A file that cannot be used (not a database, read-only, locked, a folder, a folder that cannot be
  created) raises :class:`StoreError`, which names the path and the reason.
* One outcome per decision, and only for a decision of the store: an outcome whose decision is
  not in ``transitions`` (never recorded, dropped, or evicted) is refused, an exact repeat (same
  ``node`` and ``observed``: a retried request; ``observed`` compared as JSON values, so key order and
  ``12`` vs ``12.0`` do not matter, ``true`` vs ``1`` does) is the row already there, and a different second
  outcome is refused (the first stays). The check and the insert share the transaction.
  :meth:`~ExperienceStore.record_outcome` waits for that answer (``/outcome``); an outcome given
  to :meth:`~ExperienceStore.record` follows the same rule, a refused one counted in ``rejected``.
* Readers (the federated ClientApp, tests) open their own connection:
  :meth:`transitions`, :meth:`sample`, :meth:`counts` work from any thread or process.
* The file's format (schema, policy-sample columns) and the readers :func:`read_transitions` and
  :func:`read_policy_samples` live in :mod:`iro_fed.experience` (the library may not import this
  daemon); they are re-exported here.

A transition is one decision as a one-step (contextual bandit) sample: ``state`` is a float32
feature vector, ``action`` the index of the chosen candidate, ``reward`` the change of the
objective R it brings (``iro_fed.objective.marginal``), ``done`` 1. ``next_state`` is left
for learners that build multi-step transitions.

Policy samples (schema 2): a transition may also carry the decision in the federated DQN's own
observation format (:func:`iro_fed.features.observation`: ``candidates[k, F]``, ``context[C]``,
``mask[k+1]``), the slot of the chosen node among those candidates and the simulator env's reward
for it (the change of R in units of one unplaced pod). :func:`read_policy_samples` returns them
for the ClientApp (``experience-db`` node setting), which trains the global policy on them.
Older files get the columns added on open.

Schema 3: the file holds one outcome per decision (a unique index). Opening a file from before
it keeps the first outcome of each decision, drops the others (logged with their count) and adds
the index, in one transaction.
"""

from __future__ import annotations

import json
import logging
import math
import numbers
import queue
import sqlite3
import threading
import time
import uuid
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from edge_agent.backoff import Backoff
from edge_agent.logs import LOGGER_NAME, event

# The file's format and its readers are the library's (one definition, for this writer and for the
# federated ClientApp, which must not import the daemon); the readers are re-exported here.
from iro_fed.experience import (
    POLICY_COLUMNS,
    SCHEMA,
    SCHEMA_VERSION,
    UNIQUE_OUTCOMES_INDEX,
    connect,
    encode_policy_sample,
    explain,
    require_file,
)
from iro_fed.experience import PolicySample as PolicySample
from iro_fed.experience import PolicySamples as PolicySamples
from iro_fed.experience import StoreError as StoreError
from iro_fed.experience import read_policy_samples as read_policy_samples
from iro_fed.experience import read_transitions as read_transitions

_MAX_BATCH = 512  # records per transaction from the queue (pending ones come on top)
_RETRY_FIRST_S = 0.5  # first wait before writing pending records again (or batch_s, if longer)
_RETRY_MAX_S = 30.0
_RETRY = object()  # the writer's wake-up when a retry is due and nothing was queued


@dataclass
class Transition:
    """One decision of the agent (see the module docstring)."""

    workload: str
    source: str
    state: np.ndarray
    action: int
    candidates: list[str]
    reward: float
    policy_version: str | None = None
    next_state: np.ndarray | None = None
    done: bool = True
    info: dict[str, Any] = field(default_factory=dict)
    decision_id: str = field(default_factory=lambda: uuid.uuid4().hex)
    ts: float = field(default_factory=time.time)
    policy_sample: PolicySample | None = None


@dataclass
class Outcome:
    """What was observed after a decision: where the pod went and how it did."""

    decision_id: str
    observed: dict[str, Any]
    node: str | None = None
    ts: float = field(default_factory=time.time)


@dataclass(frozen=True)
class OutcomeResult:
    """What :meth:`ExperienceStore.record_outcome` did with an outcome.

    ``status``: ``recorded`` (a new row), ``duplicate`` (the same outcome was already stored: that
    row), ``conflict`` (another outcome of the decision is stored: kept, this one refused),
    ``unknown`` (no such decision in the store), ``pending`` (the file fails or the writer is busy:
    queued, checked by the same rules when written), ``failed`` (sqlite refused the record),
    ``full`` (the file fails and ``max_pending`` records already wait for it: not taken, send it
    again after ``retry_after_s``).
    """

    status: str
    outcome_id: int | None = None  # the stored row (recorded, duplicate, conflict)
    error: str | None = None  # why, for failed and full
    retry_after_s: float | None = None  # for full: when the file is tried again


class _Ticket:
    """The answer slot of one :meth:`ExperienceStore.record_outcome` call, set by the writer."""

    __slots__ = ("done", "result")

    def __init__(self) -> None:
        self.done = threading.Event()
        self.result = OutcomeResult("pending")

    def resolve(self, result: OutcomeResult) -> None:
        if not self.done.is_set():  # the first answer is the caller's; a later write changes nothing
            self.result = result
            self.done.set()


#: A queued record: a transition and/or an outcome, and who waits for the outcome's answer.
_Row = tuple[Transition | None, Outcome | None, _Ticket | None]


def _same_observed(stored_json: str, new_json: str) -> bool:
    """Whether two ``observed`` documents (JSON text) are the same outcome: compared as parsed JSON
    values, so key order and the spelling of a number do not matter (a client that re-serialises
    ``12`` as ``12.0`` retries the same outcome), but types do (``true`` is not ``1``)."""
    return _same_json(json.loads(stored_json), json.loads(new_json))


def _same_json(a: Any, b: Any) -> bool:
    """JSON value equality. Not ``==``: Python has ``True == 1`` and ``1.0 == True``, while JSON's
    booleans are not numbers; numbers compare by value (``12 == 12.0``, exact for int vs float)."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return a == b or (a != a and b != b)  # NaN (storable from Python callers) equals itself here
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same_json(a[key], b[key]) for key in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same_json(x, y) for x, y in zip(a, b, strict=True))
    return type(a) is type(b) and a == b  # strings and null


def probe_store(path: str | Path) -> None:
    """Raise :class:`StoreError` for what :class:`ExperienceStore` would refuse at ``path``, found
    without creating or changing the store (``edge-agent check``): an existing file must be a
    regular file that the agent can write, with its folder (the -wal and -shm files), and be an
    undamaged sqlite database (opened read-only, ``PRAGMA quick_check``); for a missing one, a
    file is made and removed again in the nearest folder that exists (the store makes the
    folders below it), as no permission bits tell whether a file system takes new files."""
    import os
    import tempfile

    path = Path(path)
    if path.exists():
        if path.is_dir():
            raise StoreError(path, "is a folder, not a file")
        if not path.is_file():
            raise StoreError(path, "is not a regular file (a device, pipe or socket): give the database file's name")
        for where in (path, path.parent):
            if not os.access(where, os.R_OK | os.W_OK):
                raise StoreError(path, f"{str(where)!r} is read-only for this user: the agent writes the file and "
                                       "its -wal and -shm files beside it")
        # Without a -wal file no agent has the file open and nothing waits in a WAL: immutable=1
        # reads it without making the -wal and -shm files that a read-only WAL reader leaves behind.
        wal = path.with_name(path.name + "-wal")
        uri = path.resolve().as_uri() + "?mode=ro" + ("" if wal.exists() else "&immutable=1")
        try:
            conn = sqlite3.connect(uri, uri=True, timeout=10.0)
        except sqlite3.Error as exc:
            raise StoreError(path, explain(path, exc)) from exc
        try:
            conn.execute("SELECT COUNT(*) FROM sqlite_master").fetchone()  # "not a database" here
            problems = [r[0] for r in conn.execute("PRAGMA quick_check(3)")]
        except sqlite3.Error as exc:
            raise StoreError(path, explain(path, exc)) from exc
        finally:
            conn.close()
        if problems != ["ok"]:
            raise StoreError(path, f"the database is damaged (PRAGMA quick_check: {'; '.join(map(str, problems))})")
        return
    folder = next((p for p in path.parents if p.exists()), None)
    if folder is None or not folder.is_dir():
        raise StoreError(path, f"cannot create its folder: {str(folder)!r} is not a folder")
    try:
        fd, name = tempfile.mkstemp(prefix=".iro-agent-check-", dir=folder)
    except OSError as exc:
        raise StoreError(path, f"cannot create files in {str(folder)!r}: {exc.strerror or exc}") from exc
    os.close(fd)
    os.unlink(name)


class ExperienceStore:
    """The agent's sqlite store (see the module docstring)."""

    def __init__(self, path: str | Path, max_rows: int = 100_000, batch_s: float = 0.05,
                 max_pending: int = 10_000, busy_timeout_s: float = 10.0,
                 logger: logging.Logger | None = None) -> None:
        if max_rows < 1:
            raise ValueError(f"store.max_rows: must be >= 1, got {max_rows}")
        if isinstance(max_pending, bool) or not isinstance(max_pending, numbers.Integral) or max_pending < 1:
            raise ValueError(f"store.max_pending: must be an integer >= 1, got {max_pending!r}")
        if (isinstance(busy_timeout_s, bool) or not isinstance(busy_timeout_s, numbers.Real)
                or not math.isfinite(busy_timeout_s) or busy_timeout_s < 0):
            raise ValueError(f"store.busy_timeout_s: must be a number of seconds >= 0, got {busy_timeout_s!r}")
        self.path = Path(path)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:  # a file where a folder should be, no permission, read-only file system
            blocker = next((p for p in self.path.parents if p.exists() and not p.is_dir()), None)
            why = f"{str(blocker)!r} is a file, not a folder" if blocker else (exc.strerror or str(exc))
            raise StoreError(self.path, f"cannot create its folder {str(self.path.parent)!r}: {why}") from exc
        if self.path.is_dir():
            raise StoreError(self.path, "is a folder, not a file")
        self.max_rows = int(max_rows)
        self.batch_s = batch_s
        self.max_pending = int(max_pending)
        self.busy_timeout_s = float(busy_timeout_s)
        self.log = logger or logging.getLogger(LOGGER_NAME)
        self._conn = connect(self.path, busy_timeout_s=self.busy_timeout_s)
        try:
            self._conn.executescript(SCHEMA)
            have = {r[1] for r in self._conn.execute("PRAGMA table_info(transitions)")}
            for name, kind in POLICY_COLUMNS:
                if name not in have:  # a schema-1 file: add the column (NULL in old rows)
                    self._conn.execute(f"ALTER TABLE transitions ADD COLUMN {name} {kind}")
            self._unique_outcomes()
        except sqlite3.Error as exc:
            self._conn.close()
            raise StoreError(self.path, explain(self.path, exc)) from exc
        self._queue: queue.Queue[Any] = queue.Queue()
        self._closed = False
        self._lock = threading.Lock()  # nothing is queued behind close()'s end-of-queue mark
        self.written = 0
        self.failed = 0  # records that could not be committed (rolled back, not written)
        self.rejected = 0  # outcomes refused: of an unknown decision, or a second, different one
        self.evicted = 0
        self.lost_outcomes = 0  # outcomes answered 'pending' and still not written at close
        self.lost_at_close = 0  # records (decisions and outcomes) still pending at close: not written
        self.last_error: str | None = None
        # The writer thread's own: records the file refused (an OperationalError), oldest first,
        # the flushes waiting for them, and when to try them again.
        self._pending: deque[_Row] = deque()
        self._waiters: list[threading.Event] = []
        self._backoff = Backoff(min(max(float(batch_s), _RETRY_FIRST_S), _RETRY_MAX_S), _RETRY_MAX_S, jitter=0.0)
        self._retry_at = 0.0
        self._file_error = ""  # the OperationalError that keeps the pending records waiting
        self._delay = 0.0  # the wait before the retry now due (set with the first failure)
        self._dropped_pending = 0  # over max_pending since the file last worked
        self._writer = threading.Thread(target=self._run, name="experience-writer", daemon=True)
        self._writer.start()

    def _unique_outcomes(self) -> None:
        """Schema 3: a unique index on ``outcomes.decision_id``. A file from before it may hold
        several outcomes for one decision (a retried POST /outcome stored a second row): the first
        (lowest id, the one :meth:`_write_outcome` answers with) is kept and the count of the others
        logged. One transaction with the schema version: a failure leaves the file as it was."""
        c = self._conn
        c.execute("BEGIN IMMEDIATE")
        dropped = 0
        try:
            if c.execute("SELECT 1 FROM sqlite_master WHERE type = 'index' AND name = ?",
                         (UNIQUE_OUTCOMES_INDEX,)).fetchone() is None:
                dropped = max(c.execute("DELETE FROM outcomes WHERE id NOT IN "
                                        "(SELECT MIN(id) FROM outcomes GROUP BY decision_id)").rowcount, 0)
                c.execute(f"CREATE UNIQUE INDEX {UNIQUE_OUTCOMES_INDEX} ON outcomes (decision_id)")
                c.execute("DROP INDEX IF EXISTS outcomes_decision")  # schema 2's, now redundant
            c.execute("INSERT OR REPLACE INTO meta (key, value) VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),))
            c.execute("COMMIT")
        except BaseException:
            if c.in_transaction:
                c.execute("ROLLBACK")
            raise
        if dropped:
            event(self.log, logging.WARNING, "experience store: duplicate outcomes dropped, the first per decision kept",
                  path=str(self.path), dropped=dropped)

    # --- writing -----------------------------------------------------------------------------

    @property
    def pending(self) -> int:
        """Records held in memory because the file failed, waiting to be written again."""
        return len(self._pending)

    def record(self, transition: Transition | None = None, outcome: Outcome | None = None) -> None:
        """Queue a transition and/or an outcome; both are committed in one transaction."""
        with self._lock:
            if self._closed:
                raise RuntimeError("experience store is closed")
            if transition is None and outcome is None:
                return
            self._queue.put((transition, outcome, None))

    def record_outcome(self, outcome: Outcome, timeout: float | None = 10.0) -> OutcomeResult:
        """Store ``outcome`` and say what became of it (see :class:`OutcomeResult`): the writer
        checks and commits it at once, behind what is queued. ``pending`` when the file fails or
        ``timeout`` passes first: the outcome stays queued and is checked when it is written, and is
        not dropped for ``max_pending``; ``full`` (not queued) when ``max_pending`` records wait already."""
        ticket = _Ticket()
        with self._lock:
            if self._closed:
                raise RuntimeError("experience store is closed")
            # A pending outcome is never dropped for max_pending (its caller was told it is queued):
            # when the memory for a failing file is full, a new one is refused instead, to be sent again.
            if len(self._pending) >= self.max_pending:
                return OutcomeResult("full", error=(
                    f"the experience store's file fails ({self._file_error}) and store.max_pending "
                    f"({self.max_pending}) records already wait for it"),
                    retry_after_s=max(self._retry_at - time.monotonic(), 0.0))
            self._queue.put((None, outcome, ticket))
        ticket.done.wait(timeout)
        return ticket.result

    def flush(self, timeout: float | None = 10.0) -> bool:
        """Wait until everything queued so far, pending records included, is committed; False when
        ``timeout`` passes first (the file still fails). Records held for a failed file are tried
        again at once, not after the backoff."""
        done = threading.Event()
        with self._lock:
            if self._closed:
                return True
            self._queue.put(done)
        return done.wait(timeout)

    def close(self, timeout: float = 10.0) -> None:
        """Commit what is queued and pending (one last try; what the file still refuses is counted
        in ``failed``), checkpoint the WAL into the database file and close."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._queue.put(None)
        self._writer.join(timeout)
        try:
            self._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        except sqlite3.Error as exc:  # what is committed stays in the WAL, replayed on the next open
            if self.last_error is None:
                self.last_error = f"checkpoint at close: {type(exc).__name__}: {exc}"
        finally:
            self._conn.close()

    def _run(self) -> None:
        while True:
            # With records pending, wake up when their retry is due even if nothing is queued.
            wait = max(self._retry_at - time.monotonic(), 0.0) if self._pending else None
            try:
                item = self._queue.get(timeout=wait)
            except queue.Empty:
                item = _RETRY
            batch = [item]
            deadline = time.monotonic() + self.batch_s
            # A flush, a close or an outcome whose caller waits ends the batch at once.
            while isinstance(item, tuple) and item[2] is None and len(batch) < _MAX_BATCH:
                try:
                    item = self._queue.get(timeout=max(deadline - time.monotonic(), 0.0))
                except queue.Empty:
                    break
                batch.append(item)
            rows = [b for b in batch if isinstance(b, tuple)]
            closing = any(b is None for b in batch)
            waiters = [b for b in batch if isinstance(b, threading.Event)]
            self._waiters += waiters
            if not self._pending or closing or waiters or time.monotonic() >= self._retry_at:
                if rows or self._pending:
                    self._write_batch(rows)
            else:  # the file failed a moment ago: wait for the retry, in order behind the others
                self._pending.extend(rows)
                _answer_pending(rows)
                self._bound()
            if closing and self._pending:
                lost = len(self._pending)
                answered = sum(1 for row in self._pending if row[2] is not None)
                self._pending = deque()
                self.failed += lost
                self.lost_at_close += lost
                self.last_error = f"{lost} pending records not written at close: {self._file_error}"
                if answered:
                    self.last_error += f" ({answered} of them outcomes answered 'pending')"
                    self.lost_outcomes += answered
            if not self._pending or closing:
                for w in self._waiters:
                    w.set()
                self._waiters = []
            if closing:
                return

    def _write_batch(self, rows: list[_Row]) -> None:
        """Commit the pending records and then ``rows``, in order, in one transaction. If a record
        breaks it, one transaction per record, so one bad record does not cost the others; if the
        file fails (an OperationalError: locked, read-only, full, I/O), what is not committed
        stays pending, in order, to be tried again after the backoff."""
        todo = [*self._pending, *rows]
        rest: list[_Row] = []
        try:
            self._write(todo)
        except sqlite3.OperationalError as exc:
            rest, file_error = todo, exc
        except Exception as exc:  # a bad record (or, alone, a broken one): keep serving, say why
            record_error: Exception = exc
            dropped = 1
            if len(todo) > 1:
                dropped = 0
                for i, row in enumerate(todo):
                    try:
                        self._write([row])
                    except sqlite3.OperationalError as exc:  # the file failed meanwhile: keep the rest
                        rest, file_error = todo[i:], exc
                        break
                    except Exception as exc:
                        record_error, dropped = exc, dropped + 1
                        if row[2] is not None:
                            row[2].resolve(OutcomeResult("failed", error=f"{type(exc).__name__}: {exc}"))
            elif todo[0][2] is not None:
                todo[0][2].resolve(OutcomeResult("failed", error=f"{type(record_error).__name__}: {record_error}"))
            if dropped:
                self.failed += dropped
                self.last_error = f"{type(record_error).__name__}: {record_error}"
        was_failing = bool(self._pending)
        self._pending = deque(rest)
        _answer_pending(rest)
        if not rest:
            if was_failing:  # the outage the WARNING below announced is over
                event(self.log, logging.INFO, "experience store file works again: pending records written",
                      path=str(self.path), failures=self._backoff.failures, dropped=self._dropped_pending)
            self._backoff.reset()
            self._dropped_pending = 0
            return
        # Every record would fail alike (each after the busy timeout): wait before the next try.
        self._delay = self._backoff.next_delay()
        self._retry_at = time.monotonic() + self._delay
        self._file_error = f"{type(file_error).__name__}: {file_error}"
        if not was_failing:  # once per outage (not per retry): records are now held in memory
            event(self.log, logging.WARNING, "experience store file failing: records kept in memory and retried",
                  path=str(self.path), pending=len(rest), error=self._file_error, retry_in_s=round(self._delay, 3),
                  max_pending=self.max_pending)
        self._bound()

    def _bound(self) -> None:
        """At most ``max_pending`` records wait for the file: the oldest beyond that are dropped,
        except outcomes a caller was answered ``pending`` for (:meth:`record_outcome`, which refuses
        new ones while the memory is full) and the decisions they need."""
        over = len(self._pending) - self.max_pending
        if over > 0:
            needed = {o.decision_id for _, o, ticket in self._pending if ticket is not None and o is not None}
            kept: deque[_Row] = deque()
            dropped = 0
            for row in self._pending:
                t, _, ticket = row
                if dropped < over and ticket is None and (t is None or t.decision_id not in needed):
                    dropped += 1
                else:
                    kept.append(row)
            self._pending = kept
            self.failed += dropped
            if dropped and not self._dropped_pending:  # once per outage; the recovery line gives the total
                event(self.log, logging.WARNING, "experience store: records dropped, more than store.max_pending "
                      "waited for the failing file (the oldest go first)", path=str(self.path), dropped=dropped,
                      max_pending=self.max_pending, error=self._file_error)
            self._dropped_pending += dropped
        note = f"{self._file_error} ({len(self._pending)} records pending, retrying in {self._delay:g} s"
        if self._dropped_pending:
            note += (f"; the {self._dropped_pending} oldest were dropped: more than store.max_pending "
                     f"({self.max_pending}) waited for the file")
        self.last_error = note + ")"

    def _write(self, rows: list[_Row]) -> None:
        c = self._conn
        c.execute("BEGIN IMMEDIATE")
        evicted = written = rejected = 0
        answers: list[tuple[_Ticket, OutcomeResult]] = []  # given once committed
        try:
            for t, o, ticket in rows:
                if t is not None:
                    state = np.ascontiguousarray(t.state, dtype=np.float32)
                    nxt = None if t.next_state is None else np.ascontiguousarray(t.next_state, dtype=np.float32).tobytes()
                    c.execute(
                        "INSERT INTO transitions (ts, decision_id, workload, source, policy_version, state, state_dim,"
                        " action, candidates, reward, next_state, done, info, obs_k, obs_candidates, obs_context,"
                        " obs_mask, obs_action, obs_reward) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                        (
                            t.ts, t.decision_id, t.workload, t.source, t.policy_version, state.tobytes(), int(state.size),
                            int(t.action), json.dumps(t.candidates), float(t.reward), nxt, int(t.done),
                            json.dumps(t.info, default=str), *encode_policy_sample(t.policy_sample),
                        ),
                    )
                result = None if o is None else self._write_outcome(o)
                if result is not None and result.status in ("unknown", "conflict"):
                    rejected += 1
                if t is not None or (result is not None and result.status == "recorded"):
                    written += 1
                if ticket is not None and result is not None:
                    answers.append((ticket, result))
            for table in ("transitions", "outcomes"):
                cur = c.execute(
                    f"DELETE FROM {table} WHERE id <= (SELECT MAX(id) FROM {table}) - ?", (self.max_rows,)  # noqa: S608
                )
                evicted += max(cur.rowcount, 0)
            c.execute("COMMIT")
        except BaseException:
            # sqlite may have rolled back already (SQLITE_FULL, I/O errors): a second ROLLBACK
            # would fail and hide the error that matters.
            if c.in_transaction:
                c.execute("ROLLBACK")
            raise
        self.written += written
        self.rejected += rejected
        self.evicted += evicted  # counted once committed: a rolled-back eviction evicted nothing
        self.last_error = None
        for ticket, result in answers:
            ticket.resolve(result)

    def _write_outcome(self, o: Outcome) -> OutcomeResult:
        """Insert ``o`` unless the decision is unknown or already has an outcome (inside ``_write``'s
        transaction, so the check and the insert see the same file)."""
        c = self._conn
        observed = json.dumps(o.observed, default=str)
        first = c.execute("SELECT id, node, observed FROM outcomes WHERE decision_id = ? ORDER BY id LIMIT 1",
                          (o.decision_id,)).fetchone()
        if first is not None:  # before the decision's check: its transition may be evicted already
            same = first[1] == o.node and _same_observed(first[2], observed)
            return OutcomeResult("duplicate" if same else "conflict", int(first[0]))
        if c.execute("SELECT 1 FROM transitions WHERE decision_id = ?", (o.decision_id,)).fetchone() is None:
            return OutcomeResult("unknown")
        cur = c.execute("INSERT INTO outcomes (ts, decision_id, node, observed) VALUES (?,?,?,?)",
                        (o.ts, o.decision_id, o.node, observed))
        return OutcomeResult("recorded", int(cur.lastrowid))

    # --- reading (own connection, any thread or process) --------------------------------------

    def _reader(self) -> sqlite3.Connection:
        return connect(self.path, readonly=True)

    def counts(self) -> dict[str, int]:
        conn = self._reader()
        try:
            return {t: int(conn.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0]) for t in ("transitions", "outcomes")}  # noqa: S608
        finally:
            conn.close()

    def transitions(self, limit: int = 1000, after_id: int = 0) -> list[dict[str, Any]]:
        """Transitions with ``id > after_id``, oldest first (state decoded to float32 arrays)."""
        return read_transitions(self.path, limit=limit, after_id=after_id)

    def sample(self, n: int, seed: int | None = None) -> list[dict[str, Any]]:
        """``n`` transitions drawn uniformly without replacement (all of them when fewer), oldest first."""
        conn = self._reader()
        try:
            ids = [r[0] for r in conn.execute("SELECT id FROM transitions")]
        finally:
            conn.close()
        if not ids or n <= 0:
            return []
        rng = np.random.default_rng(seed)
        chosen = [int(i) for i in rng.choice(ids, size=min(n, len(ids)), replace=False)]
        return read_transitions(self.path, ids=chosen)


def _answer_pending(rows: list[_Row] | deque[_Row]) -> None:
    """Outcomes waiting for a file that fails: their callers hear ``pending`` now, not after the retry."""
    for _, _, ticket in rows:
        if ticket is not None:
            ticket.resolve(OutcomeResult("pending"))


#: The files of a store at ``path``: the database and, in WAL mode, its -wal and -shm files beside it.
STORE_FILE_SUFFIXES = ("", "-wal", "-shm")


def remove_store_files(path: str | Path) -> None:
    """Delete the store at ``path`` with its -wal and -shm files, each if present (a store file a
    failed start made; close the store first)."""
    for suffix in STORE_FILE_SUFFIXES:
        Path(f"{path}{suffix}").unlink(missing_ok=True)


def integrity_check(path: str | Path) -> str:
    """sqlite's ``PRAGMA integrity_check`` of a store file ('ok' when sound)."""
    path = Path(path)
    require_file(path)  # sqlite would create an empty database and call it sound
    conn = sqlite3.connect(str(path), timeout=10.0)
    try:
        return str(conn.execute("PRAGMA integrity_check").fetchone()[0])
    finally:
        conn.close()

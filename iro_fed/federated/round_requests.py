"""The folder of federated round requests that the feedback loop writes, as a work queue.

``iro feedback-sim`` / ``iro scheduler --round-request DIR`` write ``DIR/requests/*.json``
(format ``iro-fed/round-request/1``, :class:`iro_fed.feedback.FederatedRoundRequest`) when
predicted and observed outcomes drift apart; ``iro fed rounds`` reads them here and starts a
federated run for them. One folder per state, files moved by ``os.replace`` (atomic on one file
system), so a request is always in exactly one place and none is lost:

* ``requests/``: waiting;
* ``rounds/running/``: claimed by a run in progress (put back into ``requests/`` by
  :meth:`RoundRequestQueue.recover` when the consumer died, by ``release`` when it was stopped);
* ``rounds/done/`` and ``rounds/failed/``: the run's outcome, next to a ``<time>-run.json``
  record that names its requests and holds the run's rounds or error;
* ``rounds/rejected/``: files that are not round requests, each with a ``<stem>.error`` (JSON)
  saying why.

One consumer at a time per folder: a consumer holds ``rounds/consumer.lock`` (``flock``, which
the kernel releases when the process dies, however it dies) from its first claim or recovery on;
another one is refused with :class:`ConsumerBusyError` naming the holder. So ``recover`` only ever
finds the claims of a consumer that is gone, never those of a live one (which would run twice).

The folder may be the policy registry itself (the writers' default), which lists only its
``vNNNN`` versions.

Flower-free: the queue works (and is tested) without the ``fed`` extra.
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from iro_fed.feedback import FederatedRoundRequest
from iro_fed.problem_io import write_json_atomic

FORMAT = FederatedRoundRequest.FORMAT
RUN_FORMAT = "iro-fed/round-run/1"
STATES = ("requests", "running", "done", "failed", "rejected")
LOCK_NAME = "consumer.lock"  # in ROOT/rounds/


class RoundRequestError(ValueError):
    """A file in ``requests/`` that is not a round request; the message says why."""


class ConsumerBusyError(RuntimeError):
    """Another live consumer holds the folder's consumer lock; the message names the folder and it."""

    def __init__(self, root: Path, holder: str) -> None:
        super().__init__(f"{str(root)!r} is consumed by another `iro fed rounds` ({holder}); only one consumer "
                         "may run per request folder")
        self.root, self.holder = root, holder


class ClaimLostError(RuntimeError):
    """Claimed requests that were no longer in ``running/`` when the consumer filed or released them
    (moved away by someone else); the message names them."""


@dataclass(frozen=True)
class RoundRequest:
    path: Path  # where it is now
    site: str
    reason: str
    requested_at: str


def read_request(path: Path) -> RoundRequest:
    """A request file as written by :class:`~iro_fed.feedback.FederatedRoundRequest`, checked."""
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise RoundRequestError(f"cannot read: {exc}") from None
    except json.JSONDecodeError as exc:
        raise RoundRequestError(f"not JSON: {exc}") from None
    if not isinstance(doc, Mapping):
        raise RoundRequestError(f"expected a JSON object, got {type(doc).__name__}")
    if doc.get("format") != FORMAT:
        raise RoundRequestError(f"format: expected {FORMAT!r}, got {doc.get('format')!r}")
    for key in ("site", "reason", "requested_at"):
        if not isinstance(doc.get(key), str) or not doc[key]:
            raise RoundRequestError(f"{key}: expected a non-empty string, got {doc.get(key)!r}")
    return RoundRequest(path, doc["site"], doc["reason"], doc["requested_at"])


class RoundRequestQueue:
    """The request folder ``root`` (the ``--round-request DIR`` of the writers)."""

    def __init__(self, root: str | os.PathLike) -> None:
        self.root = self.check_root(root)
        for state in STATES:
            self.folder(state).mkdir(parents=True, exist_ok=True)
        self._lock_fd: int | None = None

    @staticmethod
    def check_root(root: str | os.PathLike) -> Path:
        """``root`` expanded, or ValueError when it exists and is not a folder; makes nothing
        (the constructor makes the state folders), so a caller can check before anything else."""
        path = Path(root).expanduser()
        if path.exists() and not path.is_dir():
            raise ValueError(f"root: {str(path)!r} exists and is not a folder")
        return path

    @property
    def lock_path(self) -> Path:
        return self.root / "rounds" / LOCK_NAME

    def lock(self) -> None:
        """Become the folder's one consumer (idempotent): take ``rounds/consumer.lock`` without
        waiting and write this process's pid and host into it; :class:`ConsumerBusyError` while
        another live consumer holds it. Held until :meth:`unlock` or the process ends."""
        if self._lock_fd is not None:
            return
        # os.open's descriptor is not inherited by child processes (flwr run), so a run that
        # outlives a killed consumer does not keep the folder locked.
        fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 200, 0).decode("utf-8", "replace").strip()
            os.close(fd)
            raise ConsumerBusyError(self.root, holder or "pid unknown") from None
        except BaseException:
            os.close(fd)
            raise
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"pid {os.getpid()} on {socket.gethostname()}\n".encode(), 0)
        self._lock_fd = fd

    def unlock(self) -> None:
        """Stop being the consumer (the lock file stays; only its lock matters)."""
        if self._lock_fd is not None:
            os.close(self._lock_fd)  # closing the last descriptor releases the flock
            self._lock_fd = None

    def __enter__(self) -> RoundRequestQueue:
        self.lock()
        return self

    def __exit__(self, *exc: object) -> None:
        self.unlock()

    def folder(self, state: str) -> Path:
        """``ROOT/requests`` (waiting, where the writers put them), else ``ROOT/rounds/<state>``."""
        return self.root / state if state == "requests" else self.root / "rounds" / state

    def _files(self, state: str) -> list[Path]:
        # Writers rename a hidden temporary file into place: only whole ``*.json`` files count.
        return sorted(p for p in self.folder(state).glob("*.json") if not p.name.startswith(".") and p.is_file())

    def pending(self) -> list[Path]:
        return self._files("requests")

    def recover(self) -> list[Path]:
        """Put requests left in ``running/`` (a consumer that died mid-run) back in ``requests/``.
        Takes the consumer lock first: with a live consumer it raises :class:`ConsumerBusyError`
        and leaves that consumer's claims alone."""
        self.lock()
        moved = [self._move(path, "requests") for path in self._files("running")]
        return [path for path in moved if path is not None]  # None: moved away meanwhile (not by a consumer)

    def claim(self) -> tuple[list[RoundRequest], list[tuple[Path, str]]]:
        """Move every waiting request into ``running/``; files that are not requests go to
        ``rejected/`` with the reason. Returns (claimed, rejected). Takes the consumer lock first
        (:class:`ConsumerBusyError` while another consumer holds it)."""
        self.lock()
        claimed: list[RoundRequest] = []
        rejected: list[tuple[Path, str]] = []
        for path in self.pending():
            try:
                req = read_request(path)
            except RoundRequestError as exc:
                # None: removed between the listing and the move (not by a consumer: the lock)
                if (moved := self._move(path, "rejected")) is not None:
                    write_json_atomic(moved.with_name(moved.stem + ".error"), {"file": moved.name, "error": str(exc)})
                    rejected.append((moved, str(exc)))
                continue
            if (moved := self._move(path, "running")) is not None:
                claimed.append(replace(req, path=moved))
        return claimed, rejected

    def release(self, claimed: Sequence[RoundRequest]) -> None:
        """Put claimed requests back (the run was stopped before it finished); those no longer in
        ``running/`` raise :class:`ClaimLostError` once the others are back."""
        _, lost = self._move_claimed(claimed, "requests")
        if lost:
            raise ClaimLostError(f"{', '.join(lost)}: no longer in {str(self.folder('running'))!r} (moved away "
                                 "while this consumer ran them), not put back")

    def finish(self, claimed: Sequence[RoundRequest], ok: bool, result: Mapping[str, Any]) -> Path:
        """Move the requests of a finished run into ``done/`` (``ok``) or ``failed/``, beside a
        ``<time>-run.json`` record of the run; returns the record's path. Requests no longer in
        ``running/`` are listed under ``missing`` in the record, which is still written, and then
        raise :class:`ClaimLostError` naming them and the record."""
        state = "done" if ok else "failed"
        now = time.gmtime()
        stamp = time.strftime("%Y%m%dT%H%M%SZ", now)
        moved, lost = self._move_claimed(claimed, state)  # first: the record's name must be free of them too
        record = self.folder(state) / f"{stamp}-run.json"
        n = 1
        while record.exists():
            n += 1
            record = self.folder(state) / f"{stamp}-run-{n}.json"
        write_json_atomic(record, {
            "format": RUN_FORMAT, "finished_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", now), "ok": ok,
            "requests": [p.name for p in moved], "sites": sorted({req.site for req in claimed}),
            "reasons": [req.reason for req in claimed], **result, **({"missing": lost} if lost else {}),
        })
        if lost:
            raise ClaimLostError(f"{', '.join(lost)}: no longer in {str(self.folder('running'))!r} when the run "
                                 f"finished (moved away while this consumer ran them); run recorded in {str(record)!r}")
        return record

    def _move(self, path: Path, state: str) -> Path | None:
        """Move ``path`` into ``state``'s folder, under a free name (``<stem>-2.json``, ...) when its own
        is taken there; None when it is no longer there (moved away meanwhile)."""
        # os.replace overwrites: a second hand-named bad.json (or a request named like one already
        # done) replaced the first one's file in rejected/ (done/, failed/) and it was lost.
        # Only this consumer (the lock) moves files into these folders; writers add unique names.
        target = self.folder(state) / path.name
        n = 1
        while target.exists() or (state == "rejected" and target.with_name(target.stem + ".error").exists()):
            n += 1
            target = self.folder(state) / f"{path.stem}-{n}{path.suffix}"
        try:
            os.replace(path, target)
        except FileNotFoundError:
            return None
        return target

    def _move_claimed(self, claimed: Sequence[RoundRequest], state: str) -> tuple[list[Path], list[str]]:
        """Move claimed requests into ``state``'s folder: (where they went, names of those no longer in ``running/``)."""
        moved = [self._move(req.path, state) for req in claimed]
        return ([path for path in moved if path is not None],
                [req.path.name for req, path in zip(claimed, moved, strict=True) if path is None])

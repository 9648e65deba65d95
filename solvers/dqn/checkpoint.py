"""Policy checkpoints: the online network's ``state_dict`` plus JSON metadata, written atomically.

``policy.pt`` holds ``{"format", "state_dict", "metadata_json"}`` and loads with
``torch.load(weights_only=True)`` (tensors and strings only, no pickled code); ``policy.json``
beside it (:func:`metadata_path`; ``x.meta.json`` for a checkpoint named ``x.json``) repeats the
metadata for people and tools that do not load torch. The metadata holds the config, the feature
layout (names and sizes, checked on load so a policy never silently reads features it was not
trained on), the scenario, steps, metrics and emissions of the run, and where the training
schedules stopped (:data:`SCHEDULE`, read by :func:`read_schedule`; ``iro train --resume``
continues them). A checkpoint written before that key existed loads as before (the key is
optional, the format unchanged), and an older release reads a newer checkpoint (it ignores it).

The training state beside it (``policy.optim.pt``, written by :func:`solvers.dqn.train.train`,
read by :func:`load_training_state`)
holds Adam's ``state_dict`` and, under :data:`TARGET_STATE`, the target network's, as Rainbow's
and Dopamine's checkpoints keep the target network with the online one: ``iro train --resume``
goes on with the target the run had, not a copy of the online network. It stays out of
``policy.pt``, which is what the ``dqn`` solver and the edge agents load (the same size as
before). An older optimizer file, or none (a federated global policy: its server aggregates the
online network only), resumes with the target as a copy of the online network and says so; an
older release loads Adam's part of a newer file (``Optimizer.load_state_dict`` ignores other keys).
Under :data:`RNG_STATE` it also holds where training's random streams stopped (the exploration
noise, epsilon's draws, the replay buffer's sampling), so a resumed run draws what an uninterrupted
one would; without it (an older file) they restart from the seed, and resuming says so. Under
:data:`SINCE_LEARN` it holds the env steps taken since the last gradient step, so a resumed run
with ``train_every`` above 1 learns on the steps an uninterrupted one would (without it, from 0).
"""

from __future__ import annotations

import json
import os
import pickle
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

from iro_fed.problem_io import fsync_file, write_file_atomic

FORMAT = "iro-fed-dqn/1"

#: Metadata key of the training schedules' position: ``origin`` (the step count the exploration
#: and PER-beta schedules started at), ``horizon`` (the env steps they anneal over from there) and
#: ``updates`` (the gradient steps counted since then: the target network's sync cadence).
SCHEDULE = "schedule"
#: Key of the target network's ``state_dict`` in the training-state file (``policy.optim.pt``).
TARGET_STATE = "target_state_dict"
#: Key of training's random streams in the training-state file, where the run stopped: ``noise``
#: (the noisy layers' torch generator state, a uint8 tensor), ``epsilon`` and ``replay`` (numpy
#: ``bit_generator.state`` mappings of epsilon-greedy's and the replay buffer's sampling generators).
RNG_STATE = "rng_state"
#: Key of the env steps since the last gradient step in the training-state file (an integer >= 0):
#: where ``train_every``'s count stood when the run stopped.
SINCE_LEARN = "since_learn"


class CheckpointError(ValueError):
    """A missing, unreadable or incompatible policy checkpoint; the message names the file."""


def checked_count(where: str, value: Any, least: int = 0) -> int:
    """``value`` if it is an integer >= ``least`` (a bool is not), else a :class:`CheckpointError`
    naming ``where``."""
    if not isinstance(value, int) or isinstance(value, bool) or value < least:
        raise CheckpointError(f"{where}: expected an integer >= {least}, got {value!r}")
    return value


class CheckpointWriteError(OSError):
    """A checkpoint that could not be written (a full disk, a read-only folder); the message names
    the file. An OSError, so the command line reports it as one (``iro train``: exit 2)."""


@contextmanager
def write_errors(what: str) -> Iterator[None]:
    """An OSError of the writes inside, or torch's RuntimeError for a short write, as
    :class:`CheckpointWriteError`: ``<what> (disk full or not writable?): <error>``."""
    try:
        yield
    except (OSError, RuntimeError) as exc:  # torch reports a full disk as a RuntimeError
        raise CheckpointWriteError(f"{what} (disk full or not writable?): {exc}") from exc


def _synced(write: Callable[[IO[bytes]], object]) -> Callable[[str], None]:
    """A :func:`write_file_atomic` writer: ``write(fh)`` on the temporary file, synced to disk."""

    def run(tmp: str) -> None:
        with open(tmp, "wb") as fh:
            write(fh)
            fh.flush()
            fsync_file(fh.fileno())  # a device or fifo (written directly) cannot be synced

    return run


def metadata_path(path: str | os.PathLike[str]) -> Path:
    """The JSON metadata file beside a checkpoint: ``policy.pt`` -> ``policy.json``, but
    ``policy.json`` -> ``policy.meta.json`` (the metadata must never overwrite the checkpoint)."""
    p = Path(path)
    if p.suffix.lower() == ".json":
        return p.with_name(f"{p.stem}.meta.json")
    return p.with_suffix(".json")


def save_checkpoint(path: str | os.PathLike[str], state_dict: dict[str, Any], metadata: dict[str, Any]) -> Path:
    """Write ``path`` (.pt) and its ``.json`` metadata; a reader never sees a partial file.

    Both are written to temporary files beside their targets and renamed into place only once both
    are whole, so a failed write (a full disk) leaves the old pair (or none), never a new checkpoint
    with old or missing metadata (short of a failing rename), and no temporary file. It raises
    :class:`CheckpointWriteError` (an OSError) naming the path, not torch's ``RuntimeError:
    [enforce fail at inline_container.cc] ... unexpected pos``.
    """
    import torch

    path = Path(path)
    meta_path = metadata_path(path)
    meta = {"format": FORMAT, **metadata}
    text = json.dumps(meta, indent=2, sort_keys=True, default=float)
    payload = {"format": FORMAT, "state_dict": {k: v.detach().cpu() for k, v in state_dict.items()},
               "metadata_json": text}
    for target in (path, meta_path):
        if target.is_dir():  # os.replace would fail only once the other file is in place
            raise CheckpointWriteError(f"policy {str(path)!r}: cannot write the checkpoint: "
                                       f"{str(target)!r} is a folder")

    def both(meta_tmp: str) -> None:
        # the metadata's temporary file is whole before the checkpoint's is written and renamed
        # into place; the metadata's rename follows (write_file_atomic removes whichever is left)
        _synced(lambda fh: fh.write((text + "\n").encode("utf-8")))(meta_tmp)
        write_file_atomic(path, _synced(lambda fh: torch.save(payload, fh)))

    with write_errors(f"policy {str(path)!r}: cannot write the checkpoint"):
        write_file_atomic(meta_path, both)
    return path


def _load_failure(path: Path, exc: Exception) -> str:
    """Why ``torch.load(path, weights_only=True)`` failed, in a few words. Not torch's own text for
    a refused file: it advises ``weights_only=False``, which would run any code pickled into it."""
    if isinstance(exc, pickle.UnpicklingError) or "weights_only" in str(exc):
        try:
            with open(path, "rb") as fh:
                head = fh.read(4)
        except OSError as err:
            return f"cannot read it: {err.strerror or err}"
        if head != b"PK\x03\x04":  # torch.save writes a zip archive
            pt = path.with_suffix(".pt")  # policy.json beside policy.pt: its metadata, given for it
            hint = f"; it is the metadata of {str(pt)!r}" if path.suffix.lower() == ".json" and pt.is_file() else ""
            return f"not a file torch.save wrote{hint}"
        return "it holds objects other than tensors and plain values, which are not loaded"
    if path.stat().st_size == 0:
        return "an empty file"
    # torch's first sentence says what failed (a damaged zip archive); the rest is for its developers
    first = str(exc).strip().split(". ", 1)[0].splitlines()
    return first[0][:200].rstrip(".") if first else f"{type(exc).__name__}: it ends too early or is damaged"


def load_training_state(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The training-state file beside a checkpoint (``policy.optim.pt``: Adam's ``state_dict`` with
    :data:`TARGET_STATE`, :data:`RNG_STATE` and :data:`SINCE_LEARN`), loaded with
    ``weights_only=True``; :class:`CheckpointError` naming the file when it is unreadable or not a
    mapping. The caller checks that it exists (a missing one is an older run's, not an error)."""
    import torch

    path = Path(path)
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)  # as load_checkpoint: a GPU run's state resumes on a CPU
    except Exception as exc:  # torch raises several types for corrupt or foreign files
        raise CheckpointError(f"optimizer state {str(path)!r}: not a readable torch file "
                              f"({_load_failure(path, exc)})") from exc
    if not isinstance(state, dict):
        raise CheckpointError(f"optimizer state {str(path)!r}: expected a mapping, got {type(state).__name__}")
    return state


def load_checkpoint(path: str | os.PathLike[str]) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(state_dict, metadata)`` of a checkpoint, or :class:`CheckpointError` saying what is wrong."""
    import torch

    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"policy {str(path)!r}: no such file (train one with `iro train`)")
    try:
        payload = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # torch raises several types for corrupt or foreign files
        why = _load_failure(path, exc)
        raise CheckpointError(f"policy {str(path)!r}: not a readable torch checkpoint ({why})") from exc
    if not isinstance(payload, dict) or payload.get("format") != FORMAT:
        found = payload.get("format") if isinstance(payload, dict) else type(payload).__name__
        raise CheckpointError(f"policy {str(path)!r}: format {found!r}, expected {FORMAT!r}")
    try:
        metadata = json.loads(payload["metadata_json"])
        state_dict = payload["state_dict"]
    except (KeyError, TypeError, json.JSONDecodeError) as exc:
        raise CheckpointError(f"policy {str(path)!r}: damaged metadata ({exc})") from exc
    for key in ("config", "candidate_features", "context_features"):
        if key not in metadata:
            raise CheckpointError(f"policy {str(path)!r}: metadata lacks {key!r}")
    return state_dict, metadata


def read_config(path: str | os.PathLike[str]) -> dict[str, Any]:
    """A checkpoint's DQN settings (its metadata's ``config``), without torch where it can: from
    the JSON file beside it (:func:`metadata_path`, written with it), else from the checkpoint
    itself. :class:`CheckpointError` naming the file when neither is readable."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"policy {str(path)!r}: no such file (train one with `iro train`)")
    try:
        config = json.loads(metadata_path(path).read_text(encoding="utf-8")).get("config")
    except (OSError, UnicodeDecodeError, ValueError, AttributeError):  # missing or not JSON: ask the checkpoint
        config = None
    if not isinstance(config, dict):
        try:
            config = load_checkpoint(path)[1]["config"]
        except ImportError as exc:
            raise CheckpointError(f"policy {str(path)!r}: its JSON metadata {str(metadata_path(path))!r} is missing "
                                  "or unreadable, and reading the checkpoint needs torch "
                                  "(pip install 'iro-fed[dqn]')") from exc
        if not isinstance(config, dict):
            raise CheckpointError(f"policy {str(path)!r}: metadata 'config' is {type(config).__name__}, "
                                  "expected a mapping")
    return config


def read_schedule(path: str | os.PathLike[str], metadata: dict[str, Any]) -> dict[str, int] | None:
    """The :data:`SCHEDULE` entry of a checkpoint's metadata as ``{"origin", "horizon", "updates"}``,
    or None for a checkpoint written without one; :class:`CheckpointError` naming the field for a
    damaged one (the run would otherwise anneal from a wrong point)."""
    raw = metadata.get(SCHEDULE)
    if raw is None:
        return None
    where = f"policy {str(path)!r}: metadata {SCHEDULE!r}"
    if not isinstance(raw, dict):
        raise CheckpointError(f"{where}: expected a mapping, got {raw!r}")
    out: dict[str, int] = {}
    for key, least in (("origin", 0), ("horizon", 1), ("updates", 0)):
        out[key] = checked_count(f"{where}.{key}", raw.get(key), least)
    steps = metadata.get("steps")
    if not isinstance(steps, int) or isinstance(steps, bool) or not 0 <= out["origin"] <= steps:
        raise CheckpointError(f"{where}.origin: {out['origin']} is not within the checkpoint's steps ({steps!r})")
    return out

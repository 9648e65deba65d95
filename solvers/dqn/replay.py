"""Experience replay: n-step accumulation, a uniform buffer and proportional prioritized replay.

Numpy only (no torch): the edge agent and tests use it without loading torch. A transition is
``(obs, action, reward_n, next_obs, done, discount)`` where ``reward_n`` sums up to ``n``
discounted rewards and ``discount`` is ``gamma**m`` for the ``m`` steps actually summed (0 when
the episode ended inside the window), so the learner bootstraps with ``discount * Q(next_obs)``.
"""

from __future__ import annotations

import json
from collections import deque
from dataclasses import dataclass
from typing import Any

import numpy as np

Observation = dict[str, np.ndarray]

#: Entries of :meth:`ReplayBuffer.state_arrays` that are not stored columns.
META_KEY = "_meta"
PRIORITY_KEY = "_priorities"
MAX_PRIORITY_KEY = "_max_priority"
#: The sampling generator's ``bit_generator.state`` as UTF-8 JSON bytes (a uint8 array: numpy's
#: states hold 128-bit integers that no numpy dtype holds); arrays without it load as before.
RNG_KEY = "_rng"


def numpy_generator(state: Any, like: np.random.Generator, name: str) -> np.random.Generator:
    """A new generator of ``like``'s kind at ``state`` (a ``bit_generator.state``), or ``ValueError``
    naming ``name``; ``like`` itself is left as it was."""
    if state is None:
        raise ValueError(f"{name}: missing")
    bits = type(like.bit_generator)()
    try:
        if not isinstance(state, dict):
            raise TypeError(f"expected a mapping, got {type(state).__name__}")
        bits.state = state
    except (TypeError, ValueError, KeyError, OverflowError) as exc:  # numpy's for a wrong kind, key or value
        raise ValueError(f"{name}: not a state of numpy's {type(bits).__name__} ({exc!s})") from exc
    return np.random.Generator(bits)


@dataclass(frozen=True)
class Transition:
    obs: Observation
    action: int
    reward: float
    next_obs: Observation
    discount: float  # gamma**m, or 0.0 when the episode ended within the n steps


class NStepAccumulator:
    """Turns one environment's 1-step transitions into n-step transitions.

    ``push`` returns the transitions that became complete: normally one per step once ``n``
    are queued, and every queued one (with shorter windows) when an episode ends.
    """

    def __init__(self, n: int, gamma: float) -> None:
        if n < 1:
            raise ValueError(f"n: expected >= 1, got {n}")
        self.n, self.gamma = n, gamma
        self.queue: deque[tuple[Observation, int, float]] = deque()

    def push(self, obs: Observation, action: int, reward: float, next_obs: Observation, terminated: bool,
             truncated: bool = False) -> list[Transition]:
        self.queue.append((obs, action, float(reward)))
        out: list[Transition] = []
        if terminated or truncated:
            while self.queue:
                out.append(self._emit(next_obs, terminated))
            return out
        if len(self.queue) == self.n:
            out.append(self._emit(next_obs, False))
        return out

    def _emit(self, next_obs: Observation, terminated: bool) -> Transition:
        total, discount = 0.0, 1.0
        for _, _, r in self.queue:
            total += discount * r
            discount *= self.gamma
        obs, action, _ = self.queue.popleft()
        return Transition(obs, action, total, next_obs, 0.0 if terminated else discount)

    def clear(self) -> None:
        self.queue.clear()


class SumTree:
    """Binary tree of priorities: O(log n) update and prefix-sum search."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        size = 1
        while size < capacity:
            size *= 2
        self.size = size
        self.tree = np.zeros(2 * size, dtype=np.float64)

    def total(self) -> float:
        return float(self.tree[1])

    def update(self, indices: np.ndarray, priorities: np.ndarray) -> None:
        for i, p in zip(np.asarray(indices, dtype=np.int64), np.asarray(priorities, dtype=np.float64), strict=True):
            j = int(i) + self.size
            delta = p - self.tree[j]
            while j >= 1:
                self.tree[j] += delta
                j //= 2

    def get(self, indices: np.ndarray) -> np.ndarray:
        return self.tree[np.asarray(indices, dtype=np.int64) + self.size]

    def find(self, values: np.ndarray) -> np.ndarray:
        """Leaf index whose prefix-sum interval holds each value (vectorized descent)."""
        v = np.asarray(values, dtype=np.float64).copy()
        j = np.ones(v.shape, dtype=np.int64)
        while j[0] < self.size:
            left = 2 * j
            go_right = v >= self.tree[left]
            v = np.where(go_right, v - self.tree[left], v)
            j = np.where(go_right, left + 1, left)
        return j - self.size


class ReplayBuffer:
    """Fixed-capacity ring buffer of n-step transitions; uniform sampling."""

    prioritized = False

    def __init__(self, capacity: int, seed: int = 0) -> None:
        if capacity < 1:
            raise ValueError(f"capacity: expected >= 1, got {capacity}")
        self.capacity = capacity
        self.rng = np.random.default_rng(seed)
        self.storage: dict[str, np.ndarray] = {}
        self.next = 0
        self.count = 0

    def __len__(self) -> int:
        return self.count

    def _ensure(self, t: Transition) -> None:
        if self.storage:
            return
        # Refuse a buffer that cannot fit in memory by name, rather than dying in np.zeros (or
        # later, page by page, in the OOM killer): `--set top_k=100000` asked for 373 GiB.
        per = 2 * sum(np.asarray(v).nbytes for v in t.obs.values()) + 16
        need, have = self.capacity * per, _physical_memory()
        if have and need > have:
            raise ValueError(f"buffer_size: {self.capacity:,} transitions of {per:,} bytes (this top_k's observations) "
                             f"need {need / 2**30:.1f} GiB, more than this machine's {have / 2**30:.1f} GiB; "
                             "lower buffer_size or top_k")
        for key, value in t.obs.items():
            v = np.asarray(value)
            self.storage[f"obs.{key}"] = np.zeros((self.capacity, *v.shape), dtype=v.dtype)
            self.storage[f"next.{key}"] = np.zeros((self.capacity, *v.shape), dtype=v.dtype)
        self.storage["action"] = np.zeros(self.capacity, dtype=np.int64)
        self.storage["reward"] = np.zeros(self.capacity, dtype=np.float32)
        self.storage["discount"] = np.zeros(self.capacity, dtype=np.float32)

    def add(self, t: Transition) -> int:
        self._ensure(t)
        i = self.next
        for key, value in t.obs.items():
            self.storage[f"obs.{key}"][i] = value
            self.storage[f"next.{key}"][i] = t.next_obs[key]
        self.storage["action"][i] = t.action
        self.storage["reward"][i] = t.reward
        self.storage["discount"][i] = t.discount
        self.next = (i + 1) % self.capacity
        self.count = min(self.count + 1, self.capacity)
        return i

    def batch(self, indices: np.ndarray) -> dict[str, Any]:
        out: dict[str, Any] = {key: value[indices] for key, value in self.storage.items()}
        out["indices"] = indices
        out["weights"] = np.ones(len(indices), dtype=np.float32)
        return out

    def sample(self, batch_size: int, beta: float = 1.0) -> dict[str, Any]:
        if self.count == 0:
            raise ValueError("cannot sample from an empty replay buffer")
        return self.batch(self.rng.integers(0, self.count, size=batch_size))

    def update_priorities(self, indices: np.ndarray, errors: np.ndarray) -> None:
        """Uniform replay ignores priorities."""

    def state_arrays(self) -> dict[str, np.ndarray]:
        """The buffer's content as named arrays (filled rows only), to keep it across processes.

        :meth:`load_state_arrays` on a buffer of the same kind and capacity restores it exactly
        (ring position included), and its sampling generator where this one's stands, so the
        restored buffer draws the batches this one would have drawn next.
        """
        out = {k: np.ascontiguousarray(v[:self.count]) for k, v in self.storage.items()}
        out[META_KEY] = np.array([self.capacity, self.next, self.count, int(self.prioritized)], dtype=np.int64)
        out[RNG_KEY] = _encode_state(self.rng.bit_generator.state)
        return out

    def load_state_arrays(self, arrays: dict[str, np.ndarray]) -> None:
        """Replace the content with what :meth:`state_arrays` returned; inconsistent arrays raise
        ``ValueError`` and leave the buffer as it was. Arrays without the sampling generator (an
        older version's) keep this buffer's own."""
        self._set_state(*self._read_state(arrays))

    def _read_state(self, arrays: dict[str, np.ndarray]) -> tuple[dict[str, np.ndarray], int, int, np.random.Generator]:
        """``(storage, next, count, rng)`` of :meth:`state_arrays`' arrays, checked; the buffer is not changed."""
        if META_KEY not in arrays:
            raise ValueError(f"replay state: no {META_KEY!r} entry")
        meta = np.asarray(arrays[META_KEY]).reshape(-1)
        if meta.size != 4:
            raise ValueError(f"replay state: {META_KEY!r} has {meta.size} values, expected 4")
        capacity, nxt, count, prioritized = (int(x) for x in meta)
        if capacity != self.capacity or bool(prioritized) != self.prioritized:
            raise ValueError(f"replay state: a {'prioritized' if prioritized else 'uniform'} buffer of {capacity}, "
                             f"this one is {'prioritized' if self.prioritized else 'uniform'} of {self.capacity}")
        if not (0 <= count <= capacity and 0 <= nxt < capacity and (count == capacity or nxt == count)):
            raise ValueError(f"replay state: position {nxt} and count {count} do not fit a capacity of {capacity}")
        storage: dict[str, np.ndarray] = {}
        for key, value in arrays.items():
            if key.startswith("_"):
                continue
            v = np.asarray(value)
            if v.ndim < 1 or v.shape[0] != count:
                raise ValueError(f"replay state: {key!r} has {v.shape[0] if v.ndim else 0} rows, expected {count}")
            full = np.zeros((capacity, *v.shape[1:]), dtype=v.dtype)
            full[:count] = v
            storage[key] = full
        if count and not {"action", "reward", "discount"} <= set(storage):
            raise ValueError("replay state: action, reward or discount missing")
        rng = self.rng if RNG_KEY not in arrays else _decode_state(arrays[RNG_KEY], self.rng)
        return storage, nxt, count, rng

    def _set_state(self, storage: dict[str, np.ndarray], nxt: int, count: int, rng: np.random.Generator) -> None:
        self.storage, self.next, self.count, self.rng = storage, nxt, count, rng


def _encode_state(state: dict[str, Any]) -> np.ndarray:
    # an MT19937 state holds its key as an array: a list in JSON, which its setter takes back
    text = json.dumps(state, default=lambda o: o.tolist())
    return np.frombuffer(text.encode("utf-8"), dtype=np.uint8).copy()


def _decode_state(raw: Any, like: np.random.Generator) -> np.random.Generator:
    """The generator :func:`_encode_state` saved, of ``like``'s kind; ``ValueError`` naming the entry."""
    name = f"replay state: {RNG_KEY!r}"
    v = np.asarray(raw)
    if v.dtype != np.uint8 or v.ndim != 1:
        raise ValueError(f"{name}: expected the generator's state as UTF-8 JSON bytes (a 1-D uint8 array), "
                         f"got {v.dtype} of shape {v.shape}")
    try:
        state = json.loads(v.tobytes().decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"{name}: not JSON ({exc})") from exc
    return numpy_generator(state, like, name)


class PrioritizedReplayBuffer(ReplayBuffer):
    """Proportional prioritized replay (Schaul et al. 2016).

    P(i) = p_i^alpha / sum_j p_j^alpha with p_i = |TD error| + eps; new transitions get the
    highest priority seen so far so each is replayed at least once soon. Importance weights
    w_i = (N * P(i))^-beta / max_j w_j correct the bias of non-uniform sampling.
    """

    prioritized = True

    def __init__(self, capacity: int, alpha: float = 0.5, eps: float = 1e-6, seed: int = 0) -> None:
        super().__init__(capacity, seed)
        self.alpha, self.eps = alpha, eps
        # The tree is allocated now, before _ensure's check of the whole buffer: `--set
        # buffer_size=100000000000` died here in np.zeros (a 2 TiB MemoryError traceback).
        need, have = 16 * (1 << max(capacity - 1, 0).bit_length()), _physical_memory()
        if have and need > have:
            raise ValueError(f"buffer_size: a prioritized buffer of {capacity:,} transitions needs {need / 2**30:.1f} GiB "
                             f"for its priorities alone, more than this machine's {have / 2**30:.1f} GiB; "
                             "lower buffer_size")
        self.tree = SumTree(capacity)
        self.max_priority = 1.0

    def add(self, t: Transition) -> int:
        i = super().add(t)
        self.tree.update(np.array([i]), np.array([self.max_priority ** self.alpha]))
        return i

    def sample(self, batch_size: int, beta: float = 0.4) -> dict[str, Any]:
        if self.count == 0:
            raise ValueError("cannot sample from an empty replay buffer")
        total = self.tree.total()
        # Stratified: one draw per equal slice of the total priority mass.
        edges = np.linspace(0.0, total, batch_size + 1)
        values = self.rng.uniform(edges[:-1], edges[1:])
        indices = np.minimum(self.tree.find(values), self.count - 1)
        probs = self.tree.get(indices) / total
        weights = (self.count * np.maximum(probs, 1e-12)) ** (-beta)
        out = self.batch(indices)
        out["weights"] = (weights / weights.max()).astype(np.float32)
        return out

    def update_priorities(self, indices: np.ndarray, errors: np.ndarray) -> None:
        priorities = np.abs(np.asarray(errors, dtype=np.float64)) + self.eps
        self.max_priority = max(self.max_priority, float(priorities.max(initial=0.0)))
        self.tree.update(indices, priorities ** self.alpha)

    def state_arrays(self) -> dict[str, np.ndarray]:
        """As :meth:`ReplayBuffer.state_arrays`, plus each row's priority and the highest priority seen."""
        out = super().state_arrays()
        out[PRIORITY_KEY] = self.tree.get(np.arange(self.count))
        out[MAX_PRIORITY_KEY] = np.array([self.max_priority], dtype=np.float64)
        return out

    def load_state_arrays(self, arrays: dict[str, np.ndarray]) -> None:
        for key in (PRIORITY_KEY, MAX_PRIORITY_KEY):
            if key not in arrays:
                raise ValueError(f"replay state: no {key!r} entry (a prioritized buffer's state has one)")
        storage, nxt, count, rng = self._read_state(arrays)
        priorities = np.asarray(arrays[PRIORITY_KEY], dtype=np.float64).reshape(-1)
        if priorities.size != count or not np.all(np.isfinite(priorities)) or np.any(priorities < 0):
            raise ValueError(f"replay state: expected {count} finite priorities >= 0")
        top = np.asarray(arrays[MAX_PRIORITY_KEY], dtype=np.float64).reshape(-1)
        if top.size != 1 or not np.isfinite(top[0]) or top[0] <= 0:
            raise ValueError(f"replay state: {MAX_PRIORITY_KEY!r} must be one finite number > 0, got {top.tolist()}")
        tree = SumTree(self.capacity)
        tree.update(np.arange(count), priorities)
        # all checked: a refused state leaves the buffer as it was
        self._set_state(storage, nxt, count, rng)
        self.tree, self.max_priority = tree, float(top[0])


def _physical_memory() -> int:
    """Bytes of physical memory, or 0 where the platform does not say."""
    import os

    try:
        return int(os.sysconf("SC_PAGE_SIZE")) * int(os.sysconf("SC_PHYS_PAGES"))
    except (AttributeError, OSError, ValueError):
        return 0

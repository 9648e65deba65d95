"""The Alibaba ``cluster-trace-gpu-v2023`` (openb) node and pod lists, and the FGD paper's
arrival sequence (shared/spec/fgd-replay.md).

Node CSV columns: ``sn, cpu_milli, memory_mib, gpu, model``. Pod CSV columns: ``name,
cpu_milli, memory_mib, num_gpu, gpu_milli`` and optionally ``gpu_spec`` (allowed models joined
by ``|``, kept as written), ``qos``, ``pod_phase``, ``creation_time``, ``deletion_time``, ``scheduled_time``.
A pod with ``num_gpu`` 1 and ``gpu_milli`` < 1000 shares one card; ``num_gpu`` k with 1000 milli
needs k whole cards; ``gpu_milli`` above 1000 counts as 1000; ``num_gpu`` and ``gpu_milli`` are
both 0 (a CPU-only pod, which names no ``gpu_spec``) or both > 0. Numbers are decimal in ASCII
digits, as in a problem file (``1_000`` and ``５00`` are refused), and no column is named twice.
Malformed rows raise :class:`TraceFormatError` naming the file, line and column.

Bounds: a file has at most :data:`MAX_TRACE_ROWS` rows and an arrival sequence at most
:data:`MAX_ARRIVALS` pods; every number is at most :data:`~iro_fed.problem_io.MAX_NUMBER` (1e10)
and GPU counts at most :data:`~iro_fed.problem_io.MAX_GPUS` (1024), as in a problem file.
"""

from __future__ import annotations

import csv
import os
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from iro_fed.model import GPU_MILLI, Domain, Node, Problem, Workload, default_power
from iro_fed.problem_io import MAX_GPUS, MAX_NUMBER, utf8_error

NODE_COLUMNS = ("sn", "cpu_milli", "memory_mib", "gpu", "model")
POD_COLUMNS = ("name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli")
ARRIVAL_TARGET = 1.3  # tune the workload to 130 % of the cluster's GPU capacity
TRACE_DOMAIN = "openb"
#: Most rows a node or pod list may have (the real lists have 1523 and 8152).
MAX_TRACE_ROWS = 1_000_000
#: Most pods an arrival sequence may have (the default list on the 1213 GPU nodes gives about
#: 10,800: 10,755-10,884 over seeds 42-51): tuning a pod list whose GPU pods ask very little to
#: 130 % of a large cluster would otherwise run for hours.
MAX_ARRIVALS = 1_000_000
_MAX_VALUE = int(MAX_NUMBER)


class TraceFormatError(ValueError):
    """A trace file that cannot be read as the openb format."""


@dataclass(frozen=True)
class OpenbNode:
    name: str
    cpu_milli: int
    memory_mib: int
    gpus: int
    model: str


@dataclass(frozen=True)
class OpenbPod:
    name: str
    cpu_milli: int
    memory_mib: int
    num_gpu: int  # cards; 0 for CPU-only pods
    gpu_milli: int  # per card, 1..1000; 0 for CPU-only pods
    gpu_spec: tuple[str, ...] = ()
    creation_time: int = 0
    deletion_time: int = -1

    @property
    def gpu_total(self) -> int:
        """GPU milli requested in total (counts as arrived in the metric)."""
        return self.gpu_milli * self.num_gpu


def _rows(path: str | os.PathLike, required: tuple[str, ...]) -> tuple[str, list[tuple[int, dict[str, str]]]]:
    p = Path(path)
    try:
        handle = p.open(newline="", encoding="utf-8-sig")  # a leading byte-order mark is fine
    except OSError as exc:
        raise TraceFormatError(f"{p}: cannot read file: {exc.strerror or exc}") from exc
    rows: list[tuple[int, dict[str, str]]] = []
    with handle:
        try:
            # strict: a quote left open is an error at the end of the file; without it the rest of
            # the file became one field (39 of 40 nodes swallowed into the first one's model, exit 0).
            reader = csv.DictReader(handle, strict=True)
            header = reader.fieldnames or []
            # A repeated name: DictReader keeps the last column of that name, silently.
            dup = next((c for i, c in enumerate(header) if c.strip() and c in header[:i]), None)
            if dup is not None:
                raise TraceFormatError(f"{p} line {reader.line_num}: column {dup} given twice")
            missing = [c for c in required if c not in header]
            if missing:
                raise TraceFormatError(f"{p}: missing column(s) {', '.join(missing)} (header: {', '.join(header) or 'empty'})")
            for row in reader:
                if len(rows) == MAX_TRACE_ROWS:
                    raise TraceFormatError(f"{p} line {reader.line_num}: more than {MAX_TRACE_ROWS:,} rows")
                # The reader's own line count: blank lines (skipped) and quoted line breaks would
                # shift a count of rows, and the error would name the wrong line.
                line = reader.line_num
                if None in row:  # more fields than the header: a shifted row, not data to drop
                    extra = len(row[None])  # type: ignore[index]
                    raise TraceFormatError(
                        f"{p} line {line}: {len(header) + extra} fields, the header has {len(header)} ({', '.join(header)})"
                    )
                rows.append((line, row))
        except UnicodeDecodeError:
            raise TraceFormatError(_not_utf8(p)) from None
        except csv.Error as exc:
            if str(exc) == "unexpected end of data":  # the record after the last one read never ended
                start = rows[-1][0] + 1 if rows else 2
                raise TraceFormatError(f"{p} line {start}: a quoted field is never closed (a '\"' without its "
                                       "closing quote: the rest of the file would be one field)") from exc
            raise TraceFormatError(f"{p} line {reader.line_num}: not a valid CSV file: {exc}") from exc
        except OSError as exc:  # a directory, or a read error midway
            raise TraceFormatError(f"{p}: cannot read file: {exc.strerror or exc}") from exc
    return str(p), rows


def _not_utf8(path: Path) -> str:
    """Where the first byte that is not UTF-8 is (decoding reads ahead, so find it again line by
    line, never holding more than one line of a large file)."""
    offset = 0
    with path.open("rb") as f:
        for number, line in enumerate(f, start=1):
            try:
                line.decode("utf-8")
            except UnicodeDecodeError as exc:
                return f"{path}: {utf8_error(line, exc, offset, number)}"
            offset += len(line)
    return f"{path}: not UTF-8 text"


def _int(source: str, line: int, row: dict[str, str], column: str, minimum: int = 0, default: int | None = None,
         maximum: int = _MAX_VALUE) -> int:
    raw = row.get(column)
    if raw is None or raw.strip() == "":
        if default is not None:
            return default
        raise TraceFormatError(f"{source} line {line}: {column}: missing value")
    text = raw.strip()
    # Decimal ASCII, as in a problem file: int() and float() also take "1_000" and non-ASCII digits ("５00").
    if not text.isascii() or "_" in text:
        raise TraceFormatError(
            f"{source} line {line}: {column}: expected an integer in ASCII decimal digits, got {_short(raw)}"
        )
    try:
        value = int(text)
    except ValueError:
        try:
            as_float = float(raw.strip())
        except ValueError:
            raise TraceFormatError(f"{source} line {line}: {column}: expected an integer, got {_short(raw)}") from None
        if not as_float.is_integer():  # also nan and inf
            raise TraceFormatError(f"{source} line {line}: {column}: expected an integer, got {_short(raw)}") from None
        value = int(as_float)
    shown = str(value) if abs(value) < 10**15 else _short(raw)
    if value < minimum:
        raise TraceFormatError(f"{source} line {line}: {column}: must be >= {minimum}, got {shown}")
    if value > maximum:
        raise TraceFormatError(f"{source} line {line}: {column}: must be at most {maximum:,}, got {shown}")
    return value


def _short(raw: str, limit: int = 40) -> str:
    text = repr(raw.strip())
    return text if len(text) <= limit else text[: limit - 4] + "...'"


def _unique_name(source: str, line: int, row: dict[str, str], column: str, seen: dict[str, int], what: str) -> str:
    name = (row.get(column) or "").strip()
    if not name:
        raise TraceFormatError(f"{source} line {line}: {column}: missing {what} name")
    if name in seen:
        raise TraceFormatError(f"{source} line {line}: {column}: duplicate {what} {name!r} (also line {seen[name]})")
    seen[name] = line
    return name


def load_nodes(path: str | os.PathLike) -> list[OpenbNode]:
    """Read a node list; names must be unique and capacities positive."""
    source, rows = _rows(path, NODE_COLUMNS)
    nodes: list[OpenbNode] = []
    seen: dict[str, int] = {}
    for line, row in rows:
        name = _unique_name(source, line, row, "sn", seen, "node")
        gpus = _int(source, line, row, "gpu", maximum=MAX_GPUS)
        model = (row.get("model") or "").strip()
        if gpus > 0 and not model:
            raise TraceFormatError(f"{source} line {line}: model: a node with {gpus} GPU(s) needs a GPU model")
        nodes.append(OpenbNode(name, _int(source, line, row, "cpu_milli", 1), _int(source, line, row, "memory_mib", 1), gpus, model))
    if not nodes:
        raise TraceFormatError(f"{source}: no nodes")
    return nodes


def load_pods(path: str | os.PathLike) -> list[OpenbPod]:
    """Read a pod list (see the module docstring for the GPU columns)."""
    source, rows = _rows(path, POD_COLUMNS)
    pods: list[OpenbPod] = []
    seen: dict[str, int] = {}
    for line, row in rows:
        name = _unique_name(source, line, row, "name", seen, "pod")
        num_gpu = _int(source, line, row, "num_gpu", maximum=MAX_GPUS)
        milli = min(_int(source, line, row, "gpu_milli"), GPU_MILLI)
        spec = tuple(s.strip() for s in (row.get("gpu_spec") or "").split("|") if s.strip())
        # Both 0 is a CPU-only pod; one of them 0 is a broken row, not a pod to guess at.
        if num_gpu == 0 and milli > 0:
            raise TraceFormatError(f"{source} line {line}: num_gpu: a pod with gpu_milli={milli} needs num_gpu >= 1, got 0")
        if num_gpu > 0 and milli == 0:
            raise TraceFormatError(f"{source} line {line}: gpu_milli: a pod with num_gpu={num_gpu} needs gpu_milli 1..1000, got 0")
        if num_gpu == 0 and spec:
            raise TraceFormatError(f"{source} line {line}: gpu_spec: a pod without GPUs (num_gpu=0) names GPU models {'|'.join(spec)!r}")
        if num_gpu > 1 and milli < GPU_MILLI:
            raise TraceFormatError(
                f"{source} line {line}: gpu_milli: a pod with num_gpu={num_gpu} takes whole cards (1000), got {milli}"
            )
        pods.append(
            OpenbPod(
                name=name,
                cpu_milli=_int(source, line, row, "cpu_milli"),
                memory_mib=_int(source, line, row, "memory_mib"),
                num_gpu=num_gpu,
                gpu_milli=milli,
                # As written, repeats included: the simulator groups typical pods by this string
                # (pod_csv_to_yaml keeps "V100M16|V100M32|V100M32"), so merging repeats would merge
                # typical tasks that FGD keeps apart (gpuspec10). Feasibility reads it as a set.
                gpu_spec=spec,
                creation_time=_int(source, line, row, "creation_time", default=0),
                deletion_time=_int(source, line, row, "deletion_time", minimum=-1, default=-1),
            )
        )
    if not pods:
        raise TraceFormatError(f"{source}: no pods")
    return pods


def gpu_capacity(nodes: list[OpenbNode]) -> int:
    return sum(n.gpus for n in nodes) * GPU_MILLI


def arrival_sequence(pods: list[OpenbPod], seed: int, capacity_milli: int, target: float = ARRIVAL_TARGET) -> list[OpenbPod]:
    """The FGD paper's arrival sequence for one seed.

    Sort by name, shuffle with the seed, then tune to ``target`` x the cluster's GPU capacity:
    while short, draw a random pod of the name-sorted list and append a copy (stop when the
    draw's per-card milli would overshoot, as the simulator does); when over, remove random pods.
    """
    original = sorted(pods, key=lambda p: p.name)
    rng = np.random.default_rng(seed)
    sequence = [original[i] for i in rng.permutation(len(original))]
    goal = target * capacity_milli
    total = sum(p.gpu_total for p in sequence)
    copies = 0
    if total < goal:
        if not any(p.gpu_milli > 0 for p in original):  # copies would add nothing, forever
            raise TraceFormatError(
                f"arrival sequence: the pod list has no GPU pods, so it cannot be tuned to {target:g} x the cluster's "
                f"{capacity_milli:,} GPU milli"
            )
        while True:
            pod = original[int(rng.integers(len(original)))]
            if total + pod.gpu_milli > goal:
                break
            if len(sequence) >= MAX_ARRIVALS:
                raise TraceFormatError(
                    f"arrival sequence: tuning the pod list ({total:,} of {goal:,.0f} GPU milli after {len(sequence):,} "
                    f"arrivals) to {target:g} x the cluster's GPU capacity would take more than {MAX_ARRIVALS:,} arrivals"
                )
            copies += 1
            sequence.append(replace(pod, name=f"{pod.name}#copy{copies}"))
            total += pod.gpu_total
    else:
        while total > goal and sequence:
            total -= sequence.pop(int(rng.integers(len(sequence)))).gpu_total
    return sequence


def build_problem(nodes: list[OpenbNode], pods: list[OpenbPod]) -> Problem:
    """The cluster (one domain) with ``pods`` as the workloads, in order."""
    width = max((n.gpus for n in nodes), default=0)
    gpu_free = np.full((len(nodes), width), -1, dtype=np.int32)
    for i, n in enumerate(nodes):
        gpu_free[i, : n.gpus] = GPU_MILLI
    power = [default_power(n.cpu_milli, n.gpus) for n in nodes]
    return Problem(
        resources=("cpu", "memory"),
        domains=[Domain(TRACE_DOMAIN, "zone")],
        nodes=[Node(n.name, TRACE_DOMAIN, {}, (), n.model if n.gpus else "") for n in nodes],
        workloads=[Workload(p.name, klass="batch", gpu_models=p.gpu_spec) for p in pods],
        regions=(),
        latency_ms=np.zeros((0, 1)),
        capacity=np.array([[n.cpu_milli, n.memory_mib] for n in nodes], dtype=np.float64),
        allocated=np.zeros((len(nodes), 2)),
        demand=np.array([[p.cpu_milli, p.memory_mib] for p in pods], dtype=np.float64).reshape(len(pods), 2),
        gpu_free=gpu_free,
        gpu_count=np.array([n.gpus for n in nodes], dtype=np.int32),
        wl_gpu_count=np.array([p.num_gpu for p in pods], dtype=np.int32),
        wl_gpu_milli=np.array([p.gpu_milli for p in pods], dtype=np.int32),
        power_idle_w=np.array([pw[0] for pw in power]),
        power_peak_w=np.array([pw[1] for pw in power]),
    )

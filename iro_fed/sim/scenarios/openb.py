"""``openb``: the Alibaba ``cluster-trace-gpu-v2023`` replayed with its departures.

Nodes: the first ``nodes`` (default 200, or all of a shorter file; 0 = all 1213; more than the
file has is an error) of the trace's GPU node list, dealt
round-robin over three domains with real signals: ``zone-de`` (DE grid, europe-west3),
``zone-fr`` (FR, europe-west9) and ``cloud-gb`` (GB, europe-west2, a public cloud at list prices
whose nodes are provisioned on demand). Pods: the production pod list; arrivals keep the order
and spacing of ``creation_time`` from the trace's window start (:func:`window_start`) compressed
``time_scale`` times (0, the default: the window, from its start to the last creation, fits the
run), and each pod lives ``deletion_time - creation_time`` seconds (times ``duration_scale``), so
departures are the trace's own lifetimes; a pod created before the window is there at step 0
with the lifetime it has left. A pod list without ``creation_time`` and ``deletion_time`` columns
(``openb_pod_list_multigpu50.csv``: only the FGD replay, ``iro replay``, reads it) is refused:
it has no arrivals or lifetimes to replay. Own nodes stay powered
(``power_down`` off, as in the traced cluster). Data: ``shared/data/alibaba-openb-2023`` (loader
:mod:`iro_fed.traces.openb`); ``pods_file`` / ``nodes_file`` name a file relative to the working
directory (or absolute) when one is there, else one of that folder. The report's
``scenario_params`` hold ``time_scale`` and ``nodes`` as run (the fit's compression, the node count).
"""

from __future__ import annotations

import csv
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from iro_fed.model import Domain, Weights
from iro_fed.sim.model import NodePool, PodSpec, Scenario
from iro_fed.sim.scenarios.common import (
    WEIGHT_RANGES,
    UserCarbon,
    carbon_window,
    check_ranges,
    latency_between,
    run_steps,
)
from iro_fed.sim.signals import data_dir, parse_time

if TYPE_CHECKING:
    from iro_fed.traces.openb import OpenbPod

PARAMS = {
    "w_carbon": 1.0,
    "w_latency": 1.0,
    "start": "2020-03-02 00:00:00",
    "pods_file": "openb_pod_list_default.csv",
    "nodes_file": "openb_node_list_gpu_node.csv",
    "nodes": 200,
    "time_scale": 0.0,
    "duration_scale": 1.0,
}
DEFAULT_HOURS = 24.0
#: Scales of trace time: past these a pod's arrival step or lifetime stops being a finite number
#: of steps (time_scale=1e-320 made arrivals inf: an OverflowError, not an error naming the
#: setting). 1e-6 stretches one trace second over 11 days; 1e6 squeezes 11 days into one second.
MIN_TIME_SCALE, MAX_SCALE = 1e-6, 1e6
#: Inclusive ranges (``nodes`` 0 = all; ``time_scale`` 0 = fit the run, checked apart).
RANGES: dict[str, tuple[float | None, float | None]] = {
    **WEIGHT_RANGES,
    "nodes": (0, None),
    "time_scale": (0.0, MAX_SCALE),
    "duration_scale": (1.0 / MAX_SCALE, MAX_SCALE),
}
#: The columns the replay's arrivals and departures come from (the pod loader defaults them to
#: 0 and -1, which would replay every pod at step 0, never leaving).
TIME_COLUMNS = ("creation_time", "deletion_time")
#: A pod list whose pods created before its first departure arrive at under this share of the
#: rate after it is left-truncated (see :func:`window_start`).
SPARSE_BEFORE = 0.1


def carbon_zones(p: Mapping[str, Any]) -> list[str]:
    """The carbon zones the domains read, in domain order."""
    return ["DE", "FR", "GB"]


def trace_file(key: str, value: object) -> Path:
    """The file a ``pods_file`` / ``nodes_file`` setting names: the path itself when it exists
    (relative to the working directory), else that name in the openb data folder; a ValueError
    naming the setting and both places when neither exists."""
    given = Path(str(value)).expanduser()
    if given.exists():
        return given
    folder = data_dir() / "alibaba-openb-2023"
    if not given.is_absolute() and (folder / given).exists():
        return folder / given
    where = "" if given.is_absolute() else f" (looked in the working directory {Path.cwd()} and in {folder})"
    raise ValueError(f"setting {key!r}: no such file {str(value)!r}{where}")


def read_trace(key: str, load: Callable[[Path], list], path: Path) -> list:
    """``load(path)``, its format error prefixed with the setting that named the file."""
    try:
        return load(path)
    except ValueError as exc:  # TraceFormatError: the file, line and column
        raise ValueError(f"setting {key!r}: {exc}") from None


def check_time_columns(path: Path) -> None:
    """A ValueError naming ``pods_file`` and the missing columns when the pod list at ``path``
    (already read by the loader) has no :data:`TIME_COLUMNS`."""
    with path.open(newline="", encoding="utf-8-sig") as handle:
        header = next(csv.reader(handle), [])  # as the loader reads it: a spaced name is another column
    missing = [c for c in TIME_COLUMNS if c not in header]
    if missing:
        raise ValueError(f"setting 'pods_file': {path}: missing column(s) {', '.join(missing)}: the openb scenario replays "
                         f"each pod's creation and deletion times (a list without them, for 'iro replay' only, has no "
                         f"arrivals or lifetimes to replay)")


def window_start(trace: Sequence[OpenbPod]) -> int:
    """Where the trace's recorded window starts, in trace seconds: its first ``deletion_time``
    when the pods created before it are sparse (created at under :data:`SPARSE_BEFORE` times the
    rate of those created after it), else its first ``creation_time``.

    Why: a trace that records the pods alive in a window (openb: no pod of the production list
    is deleted before day 115.3; 33 of its 8,152 pods are created in the 115 days before, the
    other 8,119 in the 34 days after) holds, from before the window, only the few pods still
    running in it; fitting from its first creation squeezed 99.6 % of the pods into the last 6 h
    of a 24 h run. The first departure is the latest start the data allow, and starting there
    loses no departure: every pod created before it is still there (at step 0). A full trace
    (creations at an even rate from its start) keeps its first creation.
    """
    first = min(pod.creation_time for pod in trace)
    last = max(pod.creation_time for pod in trace)
    gone = [pod.deletion_time for pod in trace if pod.deletion_time >= 0]
    cut = min(gone, default=first)
    if not first < cut < last:
        return first
    before = sum(1 for pod in trace if pod.creation_time < cut)
    # before / (cut - first) < SPARSE_BEFORE * after / (last - cut), without the divisions
    sparse = before * (last - cut) < SPARSE_BEFORE * (len(trace) - before) * (cut - first)
    return cut if sparse else first


def build(seed: int, hours: float, step_s: float = 60.0, carbon_series: UserCarbon | None = None, **params) -> Scenario:
    """The openb replay (see the module docstring); ``seed`` does not change a replay;
    ``carbon_series``: a user's own series by zone (``--set carbon.DE=FILE``)."""
    from iro_fed.traces.openb import load_nodes, load_pods

    p = {**PARAMS, **params}
    check_ranges(p, RANGES)
    if 0.0 < float(p["time_scale"]) < MIN_TIME_SCALE:
        raise ValueError(f"setting 'time_scale': must be 0 (fit the run) or between {MIN_TIME_SCALE:g} and {MAX_SCALE:g}, "
                         f"got {p['time_scale']!r}")
    nodes_path = trace_file("nodes_file", p["nodes_file"])
    nodes = read_trace("nodes_file", load_nodes, nodes_path)
    # Asked for more nodes than the file has: an error (the run had silently fewer); the default
    # 200 of a smaller file of the user's takes them all (the report says how many).
    if "nodes" in params and int(p["nodes"]) > len(nodes):
        raise ValueError(f"setting 'nodes': must be at most {len(nodes)} (rows in {nodes_path}), got {p['nodes']!r}")
    if int(p["nodes"]) > 0:
        nodes = nodes[: int(p["nodes"])]
    pods_path = trace_file("pods_file", p["pods_file"])
    trace = read_trace("pods_file", load_pods, pods_path)
    check_time_columns(pods_path)
    steps = run_steps(hours, step_s)
    history = int(round(86400 / step_s))
    first = window_start(trace)
    end = max(pod.creation_time for pod in trace)
    fit = not float(p["time_scale"])
    scale = float(p["time_scale"]) or max((end - first) / (hours * 3600.0), 1e-9)
    stretch = float(p["duration_scale"])
    domains = [
        Domain("zone-de", "zone", "DE", 0.0, {"cpu": 0.02, "memory": 0.0027, "gpu": 1.0}, 1.3),
        Domain("zone-fr", "zone", "FR", 0.0, {"cpu": 0.02, "memory": 0.0027, "gpu": 1.0}, 1.3),
        Domain("cloud-gb", "cloud", "GB", 0.0, {"cpu": 0.0388, "memory": 0.0052, "gpu": 2.5}, 1.1),
    ]
    carbon = {d.name: carbon_window(d.carbon_zone, p["start"], history, steps, step_s, carbon_series) for d in domains}
    # One pool per (domain, node shape) keeps the node list compact; nodes dealt round-robin.
    shapes: dict[tuple, int] = {}
    for i, n in enumerate(nodes):
        key = (domains[i % 3].name, n.cpu_milli, n.memory_mib, n.gpus, n.model)
        shapes[key] = shapes.get(key, 0) + 1
    pools = []
    for k, ((dom, cpu, mem, gpus, model), count) in enumerate(sorted(shapes.items())):
        peak = 5.0 * cpu / 1000 + 300.0 * gpus
        pools.append(NodePool(f"{dom}-{model or 'cpu'}-{k}", dom, count, float(cpu), float(mem), gpus=gpus, gpu_model=model,
                              power_idle_w=0.4 * peak, power_peak_w=peak, elastic=dom == "cloud-gb",
                              boot_steps=max(1, int(round(180 / step_s)))))
    pods = []
    for pod in trace:
        # A pod created before the window is there at step 0 with the lifetime it has left.
        created = max(pod.creation_time, first)
        arrival = int((created - first) / scale / step_s)
        if fit:
            # The span maps onto [0, steps * step_s]: the last-created pod lands on the run's end
            # itself, one step past the last; it arrives in the last step (else it is lost).
            arrival = min(arrival, steps - 1)
        if arrival >= steps:
            continue
        life = (pod.deletion_time - created) * stretch if pod.deletion_time >= 0 else -1
        departure = arrival + max(1, int(round(life / step_s))) if life >= 0 else -1
        if departure >= steps:
            departure = -1
        pods.append(PodSpec(pod.name, "batch", float(pod.cpu_milli), float(pod.memory_mib), arrival, departure=departure,
                            gpu_count=pod.num_gpu, gpu_milli=pod.gpu_milli, gpu_models=pod.gpu_spec))
    # The report's parameters as run: the compression used (the fit's, when 0 asked for it) and
    # the node count (all of them, when 0).
    as_run = {**p, "time_scale": scale, "nodes": len(nodes)}
    regions = ["users-de"]
    latency = latency_between({"users-de": "europe-west3"},
                              {"zone-de": "europe-west3", "zone-fr": "europe-west9", "cloud-gb": "europe-west2"})
    return Scenario(
        name="openb", description="Alibaba openb GPU trace with creation and deletion times over three domains.",
        domains=domains, regions=regions, latency_ms=latency, pools=pools, services=[], pods=pods, carbon=carbon,
        history=history, steps=steps, step_s=step_s, start_time=parse_time(p["start"]), weights=Weights(carbon=float(p["w_carbon"]), latency=float(p["w_latency"])),
        peak_windows=[(0, steps)], params=as_run, engine_defaults={"power_down": False}, notes={"time_scale": scale, "nodes": len(nodes)},
    )

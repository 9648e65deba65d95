"""The extender's cached snapshots live as long as their model, no longer (bounded per model).

Before: 512 snapshots and 512 states were kept in caches of their own, keyed by id(model) and
id(snapshot), apart from the 4 NodeList models; each snapshot holds its model's Node objects (the
whole parsed NodeList). kube-scheduler sends a different node set per pod and kubelets update node
status, so every request made a new model: a soak of 1,000 nodes (1.5 MiB bodies) grew to 2.3 GB in
61 s, 512 old node lists kept alive while 4 models were current. Here the counts are of live
objects (weak references, gc), never RSS.
"""

from __future__ import annotations

import copy
import gc
import weakref
from typing import Any

from iro_fed.k8s import extender as ext_mod
from iro_fed.k8s.extender import Extender
from iro_fed.k8s.snapshot import ClusterModel, Snapshot
from iro_fed.k8s.testing import make_node, make_pod
from iro_fed.model import ClusterState

NODELIST_MODELS = getattr(ext_mod, "NODELIST_MODELS", 4)
PER_MODEL = getattr(ext_mod, "SNAPSHOTS_PER_MODEL", 64)
SHAPES = ("250m", "1")


class _Node(dict):
    """A parsed v1.Node that can be referenced weakly (a plain dict cannot)."""


def _nodes(n: int, prefix: str) -> list[dict[str, Any]]:
    out = []
    for i in range(n):
        node = make_node(f"{prefix}-{i}", cpu="4", memory="8Gi")
        node["metadata"].update(uid=f"{prefix}-uid-{i}", resourceVersion=str(i + 1))
        out.append(node)
    return out


def _ours(prefix: str) -> tuple[list[Snapshot], list[ClusterState]]:
    """The live snapshots and states of this test's nodes (other tests' may be alive too)."""
    gc.collect()
    snaps = [o for o in gc.get_objects() if type(o) is Snapshot and any(k.startswith(prefix) for k in o.node_objects)]
    states = [o for o in gc.get_objects() if type(o) is ClusterState
              and any(nd.name.startswith(prefix) for nd in o.problem.nodes)]
    return snaps, states


def _filter(ext: Extender, items: list[dict[str, Any]], k: int, cpu: str) -> dict[str, Any]:
    out = ext.filter({"Pod": make_pod(f"p{k}", cpu=cpu, memory="256Mi"), "Nodes": {"items": items}, "NodeNames": None})
    assert out["Error"] == "" and len(out["Nodes"]["items"]) == len(items), out
    return out


def test_old_node_lists_are_freed_when_their_model_leaves_the_cache() -> None:
    ext = Extender()
    nodes = _nodes(6, "h5a")
    first: list[weakref.ref] = []
    for k in range(40):
        nodes[k % len(nodes)]["metadata"]["resourceVersion"] = str(100 + k)  # a kubelet's status update
        items = [_Node(copy.deepcopy(n)) for n in nodes]  # a fresh parse per request, as the server does
        first.append(weakref.ref(items[0]))
        for cpu in SHAPES:
            _filter(ext, items, k, cpu)
        ext.prioritize({"Pod": make_pod(f"p{k}", cpu="1", memory="256Mi"), "Nodes": {"items": items}, "NodeNames": None})
    del items
    gc.collect()
    alive = sum(r() is not None for r in first)
    assert alive <= NODELIST_MODELS, f"{alive} of 40 node lists still alive"
    snaps, states = _ours("h5a")
    assert len({id(s.node_objects) for s in snaps}) <= NODELIST_MODELS
    assert len(snaps) <= NODELIST_MODELS * len(SHAPES)
    assert len(states) <= NODELIST_MODELS * len(SHAPES)


def test_the_same_node_list_repeated_is_answered_from_the_cache() -> None:
    ext = Extender()
    items = _nodes(4, "h5b")
    built = []
    real = ClusterModel.with_pods

    def counting(model: ClusterModel, pods: Any, **kw: Any) -> Snapshot:
        built.append(1)
        return real(model, pods, **kw)

    ClusterModel.with_pods = counting  # type: ignore[method-assign]
    try:
        for k in range(20):
            _filter(ext, copy.deepcopy(items), k, SHAPES[k % 2])  # same resourceVersions: one model
    finally:
        ClusterModel.with_pods = real  # type: ignore[method-assign]
    assert len(built) == len(SHAPES)


def test_snapshots_of_one_model_are_bounded() -> None:
    ext = Extender()
    items = _nodes(3, "h5c")
    for k in range(PER_MODEL + 40):
        _filter(ext, items, k, f"{k + 1}m")  # a new pod shape each time
    snaps, states = _ours("h5c")
    assert len(snaps) <= PER_MODEL
    assert len(states) <= PER_MODEL


class _RebuildingCache:
    """A node cache whose model is rebuilt on every call, as a watch event makes it do; the node's
    allocatable alternates so that each model answers differently."""

    synced = True

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self.builds = 0
        self._model: ClusterModel | None = None
        self.pods = None

    def cpu(self) -> str:
        return "2" if self.builds % 2 else "64"

    def model(self) -> ClusterModel:
        self.builds += 1
        node = make_node(f"{self.prefix}-0", cpu=self.cpu(), memory="8Gi")
        node["metadata"].update(uid="u0", resourceVersion=str(self.builds))
        self._model = None  # the old model is freed before the new one is built: its id may be reused
        self._model = ClusterModel([node], [])
        return self._model


def test_a_rebuilt_model_frees_the_old_ones_snapshots_and_is_never_served_another_ones() -> None:
    cache = _RebuildingCache("h5d")
    ext = Extender(cache=cache)
    for k in range(60):
        out = ext.filter({"Pod": make_pod(f"p{k}", cpu="4", memory="256Mi"), "NodeNames": ["h5d-0"], "Nodes": None})
        # 4 CPUs fit the 64-CPU node, not the 2-CPU one: a snapshot of another model answers wrong.
        fits = cache.cpu() == "64"
        assert out["NodeNames"] == (["h5d-0"] if fits else []), (k, cache.cpu(), out)
    snaps, states = _ours("h5d")
    assert len(snaps) <= 1 and len(states) <= 1
    assert len(ext._states) <= 1

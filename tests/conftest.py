"""Shared fixtures.

``small_doc`` is a small, valid problem document (shared/spec/interfaces.md) as a fresh dict
per test, so a test may mutate it freely (e.g. to break one field and check the loader's error).
``small_doc_factory`` returns the builder itself, for tests that need several copies.
``load_benchmark`` imports a script of ``benchmarks/`` (not a package) as a module.

The document: two domains (an edge site and a zone), one user region, three nodes (a plain
edge node, a zone node with 2 GPUs of which card 1 is half used, a zone node tainted
``dedicated=batch:NoSchedule``) and three workloads that all fit (an online pod with a user
region, a half-GPU pod, a batch pod tolerating the taint).
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

OPENB_DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "alibaba-openb-2023"
BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def _small_doc() -> dict[str, Any]:
    return {
        "resources": ["cpu", "memory"],
        "domains": [
            {"name": "edge-1", "kind": "edge", "carbon_intensity": 300.0,
             "price_per_hour": {"cpu": 0.05, "memory": 0.006}, "pue": 1.5},
            {"name": "az-1", "kind": "zone", "carbon_zone": "DE", "carbon_intensity": 200.0,
             "price_per_hour": {"cpu": 0.03, "memory": 0.004, "gpu": 2.5}, "pue": 1.2},
        ],
        "latency_ms": {"users-eu": {"edge-1": 3.0, "az-1": 12.0}},
        "nodes": [
            {"name": "edge-n1", "domain": "edge-1", "capacity": {"cpu": 4000, "memory": 8192},
             "labels": {"tier": "edge"}},
            {"name": "az-gpu", "domain": "az-1", "capacity": {"cpu": 16000, "memory": 65536},
             "allocated": {"cpu": 2000, "memory": 4096},
             "gpus": 2, "gpu_model": "T4", "gpu_free_milli": [1000, 500],
             "labels": {"tier": "gold"}},
            {"name": "az-batch", "domain": "az-1", "capacity": {"cpu": 8000, "memory": 32768},
             "taints": [{"key": "dedicated", "value": "batch", "effect": "NoSchedule"}]},
        ],
        "workloads": [
            {"name": "web-1", "requests": {"cpu": 500, "memory": 512}, "class": "online",
             "user_region": "users-eu", "max_latency_ms": 20},
            {"name": "infer-1", "requests": {"cpu": 1000, "memory": 2048},
             "gpu": {"count": 1, "milli": 500}},
            {"name": "batch-1", "requests": {"cpu": 2000, "memory": 4096}, "class": "batch",
             "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "batch", "effect": "NoSchedule"}]},
        ],
    }


@pytest.fixture
def small_doc() -> dict[str, Any]:
    """A fresh small valid problem document."""
    return _small_doc()


@pytest.fixture
def small_doc_factory() -> Callable[[], dict[str, Any]]:
    """The builder of :func:`small_doc`: each call returns a new dict."""
    return _small_doc


@pytest.fixture(scope="session")
def real_slice():
    """Every 12th node and pod of the openb default trace: 102 nodes of every shape."""
    from iro_fed.traces.openb import load_nodes, load_pods

    if not OPENB_DATA.exists():
        pytest.skip("shared/data not present")
    nodes = load_nodes(OPENB_DATA / "openb_node_list_gpu_node.csv")[::12]
    pods = load_pods(OPENB_DATA / "openb_pod_list_default.csv")[::12]
    return nodes, pods


@pytest.fixture(scope="session")
def load_benchmark() -> Callable[[str, str], ModuleType]:
    """``load(script, module_name)``: run ``benchmarks/<script>.py`` as the module ``module_name``
    (also registered in ``sys.modules`` unless that name is taken, so its dataclasses resolve)."""

    def load(script: str, module_name: str) -> ModuleType:
        spec = importlib.util.spec_from_file_location(module_name, BENCHMARKS / f"{script}.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules.setdefault(module_name, module)
        spec.loader.exec_module(module)
        return module

    return load

"""Seeded problem documents far from the shipped examples, for the solver stress test.

Each family is a pure function of its seed (numpy's ``default_rng``), so a failing seed names
its problem for good. The documents go through ``problem_from_dict`` like a user's file.

- :func:`broad`: any shape the loader accepts: extra resources, no GPUs or only GPU nodes, 0
  or 1 node, 0 workloads, allocated == capacity, amounts from 1e-6 to 1e10, up to 50 domains
  with sparse (unknown) latencies, all-tainted clusters, every toleration / selector / affinity
  / latency / GPU-model constraint, batch and burst pods with ``deadline_s``, weights at 0 or
  1e10, idle == peak power, zero prices and carbon, unicode names, identical nodes and pods.
- :func:`tight`: 1-3 nodes and 1-6 pods packed tightly with awkward amounts (brute force can
  check an exact solver there); with ``eps`` some pods ask for 1e-9, where sums round.
- :func:`brim`: 1e-6-unit nodes filled exactly, and pods of about 1e-9 (the filters' absolute
  tolerance): whether such a pod fits back where it was depends on float rounding.
- :func:`fill`: nodes of 1e8-1e10 units each filled exactly by pods with a few decimals (the
  last is what the others leave), each pod pinned to its node's domain.
"""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np

UNI = ["ноде", "节点", "nœud", "ß-node", "💻", "naïve", "δ", "x"]
GPU_MODELS = ["A100", "H100", "T4", "L4", "Ü-GPU"]
WEIGHT_KEYS = ["utilization", "latency", "cost", "carbon", "unplaced"]
#: The loader refuses amounts above this (nodes[i].capacity.cpu: must be at most 1e+10).
MAX_AMOUNT = 1e10


def _num(rng: np.random.Generator, scale: str) -> float:
    if scale == "tiny":
        return float(rng.choice([1e-6, 2e-6, 5e-6, 1e-5, 3.3e-6]))
    if scale == "huge":
        return float(rng.choice([1e9, 5e9, 1e10, 7.5e9]))
    if scale == "mixed":
        return float(10 ** rng.uniform(-6, 10))
    return float(rng.choice([100, 250, 1000, 2000, 4000, 8000, 16000]))


def _tolerations(rng: np.random.Generator) -> list[dict[str, str]]:
    tols: list[dict[str, str]] = []
    for _ in range(int(rng.integers(1, 3))):
        t = rng.choice(["exists_all", "exists_key", "equal", "equal_eff", "exists_eff"])
        tk = str(rng.choice(["dedicated", "spot", "ü", "maint"]))
        if t == "exists_all":
            tols.append({"operator": "Exists"})
        elif t == "exists_key":
            tols.append({"key": tk, "operator": "Exists"})
        elif t == "equal" and rng.random() < 0.2:
            tols.append({"key": tk, "operator": str(rng.choice(["Lt", "Gt"])), "value": str(rng.choice(["0", "5", "-3"]))})
        elif t == "equal":
            tols.append({"key": tk, "operator": "Equal", "value": str(rng.choice(["batch", "gpu", "ö", ""]))})
        elif t == "equal_eff":
            tols.append({"key": tk, "value": str(rng.choice(["batch", "gpu", "ö"])),
                         "effect": str(rng.choice(["NoSchedule", "NoExecute", "PreferNoSchedule"]))})
        else:
            tols.append({"operator": "Exists", "effect": str(rng.choice(["NoSchedule", "NoExecute", "PreferNoSchedule"]))})
    return tols


def broad(seed: int) -> dict[str, Any]:
    """A problem of any shape the loader accepts; odd seeds draw the rare cases a third as often
    (mostly empty nodes, small pods), so that solvers have room to place something.
    Every fifth seed (4, 9, ...) is larger: 8-24 nodes, 10-39 pods, half of them with identical
    nodes and pods."""
    rng = np.random.default_rng(seed)
    mild = seed % 2 == 1

    def often(p: float) -> bool:
        return bool(rng.random() < p)

    def rare(p: float) -> bool:
        return bool(rng.random() < (p / 3 if mild else p))

    res = ["cpu"]
    if not rare(0.25):
        res.append("memory")
    for extra in ["ephemeral-storage", "pods", "nvidia.com/mig-1g", "example.com/ü"]:
        if rare(0.3):
            res.append(extra)
    scale = str(rng.choice(["normal", "normal", "tiny", "huge", "mixed"]))
    ndom = int(rng.choice([1, 2, 3, 50]))
    domains = []
    for d in range(ndom):
        name = f"d{d}-{rng.choice(UNI)}" if rare(0.3) else f"d{d}"
        price = {}
        for r in res + ["gpu"]:
            if rare(0.6):
                price[r] = float(rng.choice([0.0, 0.0, 0.01, 3.0, 1e6, 1e-6]))
        dom: dict[str, Any] = {"name": name, "kind": str(rng.choice(["edge", "zone", "cloud"])), "price_per_hour": price,
                               "carbon_intensity": float(rng.choice([0.0, 0.0, 50.0, 400.0, 1e6])),
                               "pue": float(rng.choice([1.0, 1.0, 1.5, 3.0]))}
        if rare(0.1):
            del dom["kind"]
        domains.append(dom)
    dnames = [d["name"] for d in domains]
    latency: dict[str, dict[str, float]] = {}
    for u in range(int(rng.choice([0, 1, 3, 20]))):
        row = {}
        for dn in dnames:
            if rare(0.5 if ndom > 3 else 0.8):  # the rest are unknown latencies
                row[dn] = float(rng.choice([0.0, 1.0, 5.0, 30.0, 200.0, 1e-6, 1e9]))
        latency[f"u{u}" + (f"-{rng.choice(UNI)}" if rare(0.2) else "")] = row
    regions = list(latency)
    gpu_mode = str(rng.choice(["none", "none", "some", "all"]))
    big = seed % 5 == 4
    nn = int(rng.integers(8, 25)) if big else int(rng.choice([0, 1, 1, 2, 3, 4, 5, 8]))
    label_sets = [{"tier": "gold"}, {"tier": "silver"}, {"tier": "gold", "zone": "a"}, {}, {"ü": "ö"}]
    taint_pool = [
        {"key": "dedicated", "value": "batch", "effect": "NoSchedule"},
        {"key": "dedicated", "value": "gpu", "effect": "NoExecute"},
        {"key": "spot", "value": "", "effect": "PreferNoSchedule"},
        {"key": "ü", "value": "ö", "effect": "NoSchedule"},
        {"key": "maint", "effect": "NoSchedule"},
    ]
    all_tainted = rare(0.15)
    nodes = []
    for i in range(nn):
        cap, alloc = {}, {}
        for r in res:
            c = _num(rng, scale)
            if r == "pods":
                c = float(rng.choice([1, 2, 110]))
            cap[r] = c
            mode = rng.choice(["zero", "zero", "part", "full"] + (["zero"] * 8 if mild else []))
            if mode == "part":
                alloc[r] = c * float(rng.choice([0.25, 0.5, 0.9]))
            elif mode == "full":
                alloc[r] = c
        node: dict[str, Any] = {"name": (f"n{i}-{rng.choice(UNI)}" if rare(0.3) else f"n{i}"),
                                "domain": str(rng.choice(dnames)), "capacity": cap}
        if alloc:
            node["allocated"] = alloc
        if gpu_mode == "all" or (gpu_mode == "some" and rare(0.5)):
            g = int(rng.choice([1, 2, 4, 8]))
            node["gpus"] = g
            if rare(0.8):
                node["gpu_model"] = str(rng.choice(GPU_MODELS))
            if rare(0.6):
                node["gpu_free_milli"] = [int(rng.choice([0, 1, 250, 500, 999, 1000, 1000])) for _ in range(g)]
        elif rare(0.05):
            node["gpus"] = 0
        node["labels"] = dict(label_sets[int(rng.integers(len(label_sets)))])
        if all_tainted or rare(0.3):
            k = int(rng.integers(1, 3))
            node["taints"] = [dict(taint_pool[int(j)]) for j in rng.choice(len(taint_pool), size=k, replace=False)]
        pm = rng.choice(["none", "eq", "zero", "given", "idle_only", "peak_only"])
        if pm == "eq":
            v = float(rng.choice([0.0, 100.0, 1e6]))
            node["power_idle_w"] = node["power_peak_w"] = v
        elif pm == "zero":
            node["power_idle_w"] = node["power_peak_w"] = 0.0
        elif pm == "given":
            node["power_idle_w"] = 50.0
            node["power_peak_w"] = float(rng.choice([50.0, 400.0, 1e9]))
        elif pm == "idle_only":
            node["power_idle_w"] = float(rng.choice([0.0, 30.0]))
        elif pm == "peak_only":
            node["power_peak_w"] = float(rng.choice([0.0, 300.0]))
        nodes.append(node)
    nw = int(rng.integers(10, 40)) if big else int(rng.choice([0, 1, 2, 3, 4, 6, 8, 12]))
    dup = big and often(0.5)
    wls = []
    for j in range(nw):
        req = {}
        for r in res:
            if rare(0.7):
                v = _num(rng, scale) * float(rng.choice([0.0, 0.01, 0.1, 0.3] if mild else [0.0, 0.1, 0.5, 1.0, 2.0]))
                if mild and scale == "mixed":
                    v = min(v, 1e-6)
                req[r] = 1.0 if r == "pods" else min(v, MAX_AMOUNT)
        wl: dict[str, Any] = {"name": (f"p{j}-{rng.choice(UNI)}" if rare(0.3) else f"ns/p{j}"), "requests": req}
        if gpu_mode != "none" and often(0.5) or gpu_mode == "none" and rare(0.05):
            k = int(rng.choice([1, 1, 1, 2, 4]))
            gd: dict[str, Any] = {"count": k}
            if k == 1:
                gd["milli"] = int(rng.choice([1, 250, 500, 999, 1000]))
                if rare(0.1):
                    del gd["milli"]
            if rare(0.3):
                gd["models"] = [str(m) for m in rng.choice(GPU_MODELS + ["nope"], size=int(rng.integers(0, 3)))]
            wl["gpu"] = gd
        if mild and "gpu" in wl and rng.random() < 0.7:
            wl["gpu"].pop("models", None)
        wl["class"] = str(rng.choice(["online", "batch", "burst"]))
        if wl["class"] != "online" and rare(0.5):
            wl["deadline_s"] = float(rng.choice([1e-6, 1.0, 3600.0, 1e10]))
        if regions and often(0.7):
            wl["user_region"] = str(rng.choice(regions))
            if rare(0.4):
                wl["max_latency_ms"] = float(rng.choice([1e-6, 1.0, 10.0, 50.0, 1e9]))
        if rare(0.3):
            wl["node_selector"] = dict(label_sets[int(rng.integers(len(label_sets)))])
        if rare(0.4):
            wl["tolerations"] = _tolerations(rng)
        if rare(0.2):
            size = min(len(dnames), int(rng.integers(1, 3)))
            wl["allowed_domains"] = [str(x) for x in rng.choice(dnames, size=size, replace=False)]
        if rare(0.5):
            wl["priority"] = int(rng.choice([0, 1, -5, 2**31 - 1, -(2**31)]))
        if rare(0.1):
            wl["preferred_node_affinity"] = [{"weight": int(rng.choice([1, 100])), "match_labels": {"tier": "gold"}}]
        wls.append(wl)
    if dup and nodes:  # identical nodes (names aside) and identical pods
        for i in range(1, len(nodes)):
            name = nodes[i]["name"]
            nodes[i] = json.loads(json.dumps(nodes[0]))
            nodes[i]["name"] = name
        for j in range(1, len(wls)):
            if often(0.6):
                name = wls[j]["name"]
                wls[j] = json.loads(json.dumps(wls[0]))
                wls[j]["name"] = name
    if often(0.15):  # kube-scheduler's non-zero defaults for pods that ask for nothing
        hasmem = "memory" in res
        for nd in nodes:
            cpu = min(nd.get("allocated", {}).get("cpu", 0) + float(rng.choice([0, 100])), MAX_AMOUNT)
            mem = min(nd.get("allocated", {}).get("memory", 0) + float(rng.choice([0, 200])), MAX_AMOUNT)
            nd["nonzero_allocated"] = {"cpu": cpu, **({"memory": mem} if hasmem else {})}
        for wl in wls:  # never below the requests (the loader refuses that)
            wl["nonzero_requests"] = {"cpu": max(wl["requests"].get("cpu", 0), float(rng.choice([0, 100]))),
                                      **({"memory": max(wl["requests"].get("memory", 0), float(rng.choice([0, 200, 1e9])))}
                                         if hasmem else {})}
    weights = {}
    for key in WEIGHT_KEYS:
        if rare(0.5):
            weights[key] = float(rng.choice([0.0, 0.0, 1.0, 1e6, 1e-6, 1e10]))
    doc: dict[str, Any] = {"resources": res, "domains": domains, "latency_ms": latency, "nodes": nodes, "workloads": wls}
    if weights:
        doc["weights"] = weights
    if rare(0.1):
        doc["latency_ref_ms"] = float(rng.choice([1e-6, 1e9]))
    if res == ["cpu", "memory"] and rare(0.5):
        del doc["resources"]  # the default
    return doc


def tight(seed: int, eps: bool = False) -> dict[str, Any]:
    """1-3 nodes, 1-6 pods on one scale (1e-6 ... 1e10), packed tightly, weights anywhere from 0
    to 1e10; with ``eps`` about 40 % of the amounts are 1e-9-ish instead."""
    rng = np.random.default_rng(seed)
    base = float(rng.choice([1e-6, 3e-6, 1.0, 1000.0, 1e10, 7.0, 1e9 / 3]))
    nn = int(rng.integers(1, 4))
    nw = int(rng.integers(1, 7))
    res = ["cpu"] + (["memory"] if rng.random() < 0.5 else [])
    nodes = []
    for i in range(nn):
        cap = {r: min(MAX_AMOUNT, base * float(rng.choice([1, 2, 3, 1.5]))) for r in res}
        alloc = {r: cap[r] * float(rng.choice([0, 0, 1 / 3, 0.1, 0.7])) for r in res}
        nd: dict[str, Any] = {"name": f"n{i}", "domain": f"d{i % 2}", "capacity": cap, "allocated": alloc}
        if rng.random() < 0.3:
            nd["gpus"] = int(rng.integers(1, 3))
            nd["gpu_free_milli"] = [int(rng.choice([1000, 700, 300, 1])) for _ in range(nd["gpus"])]
        if rng.random() < 0.5:
            nd["power_idle_w"] = float(rng.choice([0, 10, 100]))
            nd["power_peak_w"] = nd["power_idle_w"] + float(rng.choice([0, 50, 1e6]))
        nodes.append(nd)
    wls = []
    for j in range(nw):
        req = {r: (float(rng.choice([1e-9, 5e-10, 2e-9])) if eps and rng.random() < 0.4
                   else base * float(rng.choice([1 / 3, 0.1, 0.2, 0.3, 0.5, 1.0, 0.7, 1e-3]))) for r in res}
        wl: dict[str, Any] = {"name": f"p{j}", "requests": req, "user_region": "u"}
        if rng.random() < 0.3:
            k = int(rng.choice([1, 1, 2]))
            wl["gpu"] = {"count": k, **({"milli": int(rng.choice([1, 300, 700, 1000]))} if k == 1 else {})}
        wls.append(wl)
    weights = {k: float(rng.choice([0, 1, 1e-6, 1e6, 10, 1e10])) for k in WEIGHT_KEYS}
    doms = [{"name": "d0", "carbon_intensity": float(rng.choice([0, 100, 1e6])),
             "price_per_hour": {"cpu": float(rng.choice([0, 1, 1e6]))}},
            {"name": "d1", "carbon_intensity": float(rng.choice([0, 300])), "price_per_hour": {"cpu": float(rng.choice([0, 2]))}}]
    lat = {"u": {"d0": float(rng.choice([0, 5, 100])), **({"d1": 7.0} if rng.random() < 0.5 else {})}}
    doc: dict[str, Any] = {"resources": res, "domains": doms, "latency_ms": lat, "nodes": nodes, "workloads": wls,
                           "weights": weights}
    if rng.random() < 0.2:
        doc["latency_ref_ms"] = float(rng.choice([1e-6, 1e9]))
    return doc


def brim(seed: int) -> dict[str, Any]:
    """1-3 nodes of 1e-6 to 3.3e-6 units, each filled exactly by 1-3 pods (equal parts or not), and
    1-3 pods of 1e-10 to 2e-9 units, in a shuffled order."""
    rng = np.random.default_rng(seed)
    res = ["cpu", "memory"]
    nodes, wls = [], []
    for i in range(int(rng.integers(1, 4))):
        cap = {r: float(rng.choice([1e-6, 1.5e-6, 2e-6, 3.3e-6])) for r in res}
        nodes.append({"name": f"n{i}", "domain": f"d{i % 2}", "capacity": cap})
        k = int(rng.integers(1, 4))
        r = str(rng.choice(res))
        parts = rng.dirichlet(np.ones(k)) * cap[r] if rng.random() < 0.5 else np.full(k, cap[r] / k)
        wls += [{"name": f"p{i}-{j}", "requests": {r: float(x)}} for j, x in enumerate(parts)]
    for j in range(int(rng.integers(1, 4))):
        wls.append({"name": f"e{j}", "requests": {str(rng.choice(res)): float(rng.choice([1e-9, 1e-9, 9e-10, 2e-9]))}})
    order = rng.permutation(len(wls))
    return {"resources": res, "domains": [{"name": "d0"}, {"name": "d1"}], "nodes": nodes,
            "workloads": [wls[int(i)] for i in order]}


def fill(seed: int, nodes: int = 8) -> dict[str, Any]:
    """``nodes`` nodes of 1e8-1e10 units, each filled exactly (in float) by 2-12 pods with 1-3
    decimals that only its own domain admits: the last pod asks for what the others leave."""
    rng = np.random.default_rng(seed)
    doc_nodes, wls = [], []
    for i in range(nodes):
        cap = float(rng.choice([1e8, 1e9, 1e10, 123456789.125]))
        parts = np.round(rng.dirichlet(np.ones(int(rng.integers(2, 13)))) * cap, int(rng.choice([1, 2, 3])))
        parts[-1] = cap - parts[:-1].sum()
        doc_nodes.append({"name": f"n{i}", "domain": f"d{i}", "capacity": {"cpu": cap}})
        wls += [{"name": f"n{i}/p{j}", "requests": {"cpu": float(x)}, "allowed_domains": [f"d{i}"]}
                for j, x in enumerate(parts) if x > 0]
    return {"resources": ["cpu"], "domains": [{"name": f"d{i}"} for i in range(nodes)], "nodes": doc_nodes,
            "workloads": wls}


def moderate(doc: dict[str, Any]) -> bool:
    """Whether every amount of ``doc`` is 0 or within 1e-3..1e8 (brute force's enumeration uses the
    filters' absolute tolerance, which decides differently from the solvers' sums at 1e-6 and
    1e10 scales)."""
    amounts = [v for nd in doc["nodes"] for part in ("capacity", "allocated") for v in nd.get(part, {}).values()]
    amounts += [v for wl in doc["workloads"] for v in wl["requests"].values()]
    return all(v == 0 or 1e-3 <= abs(v) <= 1e8 for v in amounts if math.isfinite(v))

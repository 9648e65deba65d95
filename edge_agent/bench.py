"""``edge-agent bench``: measured ``/recommend`` latency over real HTTP at a given site size.

Generates a site of ``--nodes`` nodes (mixed 8-96 core shapes, random load, some labels, taints
and T4 cards), starts an agent on 127.0.0.1 with each solver, sends ``--requests`` pods (workload
objects and Kubernetes Pods, mixed shapes) from ``--clients`` keep-alive connections and reports
the client-side latency percentiles and the throughput.
"""

from __future__ import annotations

import http.client
import json
import platform
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np


def make_site(nodes: int, seed: int = 0) -> dict[str, Any]:
    rng = np.random.default_rng(seed)
    shapes = [(8000, 32768), (16000, 65536), (32000, 131072), (64000, 262144), (96000, 393216)]
    doc: dict[str, Any] = {
        "resources": ["cpu", "memory"],
        "domains": [{"name": "site", "kind": "edge", "carbon_intensity": 250.0,
                     "price_per_hour": {"cpu": 0.045, "memory": 0.006, "gpu": 0.35}, "pue": 1.5}],
        "latency_ms": {"users": {"site": 3.0}},
        "nodes": [],
        "workloads": [],
    }
    for i in range(nodes):
        cpu, mem = shapes[int(rng.integers(len(shapes)))]
        load = float(rng.uniform(0.0, 0.85))
        node: dict[str, Any] = {
            "name": f"n{i:05d}", "domain": "site", "capacity": {"cpu": cpu, "memory": mem},
            "allocated": {"cpu": int(cpu * load) // 100 * 100, "memory": int(mem * load * rng.uniform(0.5, 1.0)) // 64 * 64},
            "labels": {"pool": f"p{i % 4}"},
        }
        if i % 10 == 0:
            node["gpus"], node["gpu_model"] = 1, "T4"
        if i % 25 == 0:
            node["taints"] = [{"key": "dedicated", "value": "batch", "effect": "NoSchedule"}]
        doc["nodes"].append(node)
    return doc


def make_bodies(count: int, seed: int = 1) -> list[bytes]:
    rng = np.random.default_rng(seed)
    out = []
    for i in range(count):
        cpu, mem = int(rng.choice([100, 250, 500, 1000, 2000, 4000])), int(rng.choice([128, 512, 1024, 4096, 8192]))
        if i % 2:
            body: dict[str, Any] = {"kind": "Pod", "metadata": {"name": f"p{i}", "namespace": "bench",
                                                                "annotations": {"iro-fed.io/user-region": "users"}},
                                    "spec": {"containers": [{"name": "app", "resources": {"requests": {"cpu": f"{cpu}m", "memory": f"{mem}Mi"}}}]}}
            if i % 7 == 0:
                body["spec"]["nodeSelector"] = {"pool": "p1"}
        else:
            body = {"name": f"bench/w{i}", "requests": {"cpu": cpu, "memory": mem}, "user_region": "users"}
            if i % 10 == 0:
                body["gpu"] = {"count": 1, "milli": 500}
        out.append(json.dumps(body).encode())
    return out


def run_bench(nodes: int, requests: int, clients: int, solver: str, k: int = 5) -> dict[str, Any]:
    """Latency of ``requests`` recommendations against one agent with ``solver`` (ms percentiles)."""
    from edge_agent.agent import Agent
    from edge_agent.config import load_config
    from edge_agent.logs import setup_logging
    from iro_fed.problem_io import write_json_atomic

    with tempfile.TemporaryDirectory() as tmp:
        site = Path(tmp) / "site.json"
        write_json_atomic(site, make_site(nodes))
        cfg_path = Path(tmp) / "agent.yaml"
        cfg_path.write_text(json.dumps({"problem": str(site), "site": "site", "node_name": "bench", "listen": {"port": 0},
                                        "recommend": {"k": k, "solver": solver, "record": True},
                                        "store": {"path": str(Path(tmp) / "exp.db")}, "collect": {"interval_s": 5},
                                        "log_level": "error"}))
        agent = Agent(load_config(cfg_path, env={}), setup_logging("error"))
        agent.start()
        try:
            bodies = make_bodies(requests)
            # Warm-up: caches of numpy, the first problem build.
            _send(agent.port, bodies[:5])
            lat: list[float] = []
            lock = threading.Lock()
            chunks = [bodies[i::clients] for i in range(clients)]
            start = time.perf_counter()

            def worker(chunk: list[bytes]) -> None:
                got = _send(agent.port, chunk)
                with lock:
                    lat.extend(got)

            threads = [threading.Thread(target=worker, args=(c,)) for c in chunks]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            wall = time.perf_counter() - start
        finally:
            agent.stop()
    a = np.array(lat) * 1000.0
    return {
        "solver": solver, "nodes": nodes, "requests": len(a), "clients": clients, "k": k,
        "p50_ms": round(float(np.percentile(a, 50)), 3), "p90_ms": round(float(np.percentile(a, 90)), 3),
        "p99_ms": round(float(np.percentile(a, 99)), 3), "max_ms": round(float(a.max()), 3),
        "throughput_rps": round(len(a) / wall, 1),
    }


def _send(port: int, bodies: list[bytes]) -> list[float]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    out = []
    try:
        for body in bodies:
            t0 = time.perf_counter()
            conn.request("POST", "/recommend", body=body, headers={"Content-Type": "application/json"})
            resp = conn.getresponse()
            resp.read()
            out.append(time.perf_counter() - t0)
            if resp.status != 200:
                raise RuntimeError(f"/recommend answered {resp.status}")
    finally:
        conn.close()
    return out


def machine() -> str:
    import os

    return f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}"

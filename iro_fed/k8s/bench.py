"""Loopback load against the scheduler extender: requests/s and p50/p99 latency.

    python -m iro_fed.k8s.bench [--nodes 5000] [--names 500] [--seconds 3] [--clients 2] [--out FILE]

Set-up: the loopback API server (:mod:`iro_fed.k8s.testing`) holds ``--nodes`` nodes in three
zones and three bound pods per node; the extender keeps its node cache from a watch of it (as
with ``nodeCacheCapable: true``) and serves on 127.0.0.1. Load: ``--clients`` separate processes,
each with ``--threads`` keep-alive connections, send ``filter`` and ``prioritize`` requests the
way kube-scheduler does (one pod, ``--names`` candidate nodes: kube sends the nodes that passed
its own filters, 10 % = 500 of 5,000 nodes with the default ``percentageOfNodesToScore``), for
both modes: ``NodeNames`` (node cache) and ``Nodes`` (the whole v1.Node objects, stateless).
Pods come in 8 shapes, as replicas of a few Deployments would. Latency is measured by the
clients, end to end over HTTP. Then ``iro scheduler`` (leader election off) binds
``--scheduler-pods`` pending pods on the same cluster, timed from the first pod's creation to
the last Binding. The machine is printed with the table.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import platform
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

from iro_fed.cli import UsageError

SHAPES = [("250m", "256Mi"), ("500m", "512Mi"), ("1", "1Gi"), ("1500m", "2Gi"), ("2", "4Gi"), ("4", "8Gi"),
          ("100m", "128Mi"), ("3", "6Gi")]


def _client(url: str, verb: str, bodies: list[bytes], seconds: float, threads: int, queue: Any) -> None:
    import http.client
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    latencies: list[float] = []
    errors = [0]
    lock = threading.Lock()
    stop_at = time.perf_counter() + seconds

    def worker(offset: int) -> None:
        conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)
        mine = []
        i = offset
        while time.perf_counter() < stop_at:
            body = bodies[i % len(bodies)]
            i += 1
            t0 = time.perf_counter()
            try:
                conn.request("POST", f"{parts.path}/{verb}", body=body, headers={"Content-Type": "application/json"})
                resp = conn.getresponse()
                resp.read()
                ok = resp.status == 200
            except (OSError, http.client.HTTPException):
                conn.close()
                conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)
                ok = False
            mine.append(time.perf_counter() - t0)
            if not ok:
                with lock:
                    errors[0] += 1
        with lock:
            latencies.extend(mine)
        conn.close()

    ts = [threading.Thread(target=worker, args=(k,)) for k in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    queue.put((latencies, errors[0]))


def run_case(url: str, verb: str, bodies: list[bytes], seconds: float, clients: int, threads: int) -> dict[str, Any]:
    ctx = mp.get_context("fork")
    queue = ctx.Queue()
    procs = [ctx.Process(target=_client, args=(url, verb, bodies[k::clients] or bodies, seconds, threads, queue))
             for k in range(clients)]
    t0 = time.perf_counter()
    for p in procs:
        p.start()
    results = [queue.get() for _ in procs]
    for p in procs:
        p.join()
    wall = time.perf_counter() - t0
    lat = np.array([x for r, _ in results for x in r]) * 1000.0
    errors = sum(e for _, e in results)
    return {"verb": verb, "requests": int(lat.size), "errors": errors, "requests_per_s": float(lat.size / seconds),
            "p50_ms": float(np.percentile(lat, 50)) if lat.size else None,
            "p99_ms": float(np.percentile(lat, 99)) if lat.size else None, "wall_s": wall}


def _stop_server(server: Any) -> None:
    """Shut the extender's server down and close its socket (None: nothing to do)."""
    if server is not None:
        server.shutdown()
        server.server_close()


def _stop_cache(cache: Any) -> None:
    """Stop the node cache's watch thread (None: nothing to do)."""
    if cache is not None:
        cache.stop()


def run_scheduler(api: Any, kube: Any, pods: int, solver: str, max_batch: int = 500) -> dict[str, Any]:
    """``iro scheduler`` end to end: pending pods appear, are solved in batches, bound, explained."""
    from iro_fed.k8s.scheduler import IroScheduler
    from iro_fed.k8s.testing import make_pod

    sched = IroScheduler(kube, solver=solver, window_s=0.5, max_batch=max_batch, leader_election=False)
    sched.start()
    try:
        if not (sched.cache.wait_synced(120) and sched.pending.synced.wait(120)):
            raise SystemExit("scheduler cache did not sync")
        before = len(api.requests_to("POST", "/binding$"))
        t0 = time.perf_counter()
        for i in range(pods):
            shape = SHAPES[i % len(SHAPES)]
            api.add_pod(make_pod(f"pending-{i}", cpu=shape[0], memory=shape[1], scheduler="iro"))
        if not api.wait_for(lambda: len(api.requests_to("POST", "/binding$")) - before >= pods, 600):
            raise SystemExit("the scheduler did not bind every pod")
        seconds = time.perf_counter() - t0
    finally:
        sched.stop()
    return {"pods": pods, "seconds": seconds, "pods_per_s": pods / seconds, "max_batch": max_batch,
            "batches": sched.batch_count, "solve_s": sched.solve_s_total}


#: Most nodes the loopback API server is loaded with (three pods each, all in memory).
MAX_NODES = 100_000
#: Longest load per case, seconds.
MAX_SECONDS = 3600.0


def check_args(args: argparse.Namespace) -> None:
    """The flags checked before any work; a UsageError names the flag."""
    import solvers
    from iro_fed.cli import check_int, check_number, check_output_file

    check_int("--nodes", args.nodes, 1, MAX_NODES)
    check_int("--names", args.names, 1, args.nodes)  # kube sends at most every node
    check_number("--seconds", args.seconds, 0.0, MAX_SECONDS, low_open=True)
    check_int("--clients", args.clients, 1, 256)
    check_int("--threads", args.threads, 1, 256)
    check_int("--scheduler-pods", args.scheduler_pods, 0, 1_000_000)
    if args.solver not in solvers.registered():
        raise UsageError(f"--solver: unknown solver {args.solver!r} (registered: {', '.join(solvers.registered())})")
    if args.solver not in solvers.available():
        raise UsageError(f"--solver: {args.solver!r} is not installed here (its optional dependency is missing)")
    if args.out:
        args.out = str(check_output_file("--out", args.out))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m iro_fed.k8s.bench", description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--names", type=int, default=500, help="candidate nodes per request (default 500)")
    parser.add_argument("--seconds", type=float, default=3.0, help="load per case (default 3)")
    parser.add_argument("--clients", type=int, default=2, help="client processes (default 2)")
    parser.add_argument("--threads", type=int, default=2, help="connections per client process (default 2)")
    parser.add_argument("--solver", default="greedy-objective")
    parser.add_argument("--scheduler-pods", type=int, default=1000,
                        help="then time `iro scheduler` binding this many pending pods (0: skip; default 1000)")
    parser.add_argument("--out", help="write the results as JSON")
    args = parser.parse_args(argv)
    try:  # every value before any work (a bad --solver aborted the process, 0 clients failed in the table)
        check_args(args)
    except UsageError as exc:
        parser.error(str(exc))

    from rich.console import Console
    from rich.table import Table

    from iro_fed.k8s.client import ClusterCache, Kube
    from iro_fed.k8s.extender import Extender, ExtenderServer
    from iro_fed.k8s.testing import FakeApiServer, make_node, make_pod
    from iro_fed.problem_io import write_json_atomic

    console = Console(stderr=True)
    api = FakeApiServer().start()
    tmp = Path(os.environ.get("TMPDIR", "/tmp")) / f"iro-bench-{os.getpid()}.kubeconfig"
    cache = server = None
    try:
        with console.status(f"loading {args.nodes} nodes into the loopback API server"):
            nodes = [make_node(f"node-{i:05d}", cpu="32", memory="128Gi", zone=f"zone-{i % 3}") for i in range(args.nodes)]
            for n in nodes:
                api.add_node(n)
            for i in range(3 * args.nodes):
                api.add_pod(make_pod(f"bound-{i}", cpu="2", memory="4Gi", node=f"node-{i % args.nodes:05d}"))
            kube = Kube.from_kubeconfig(str(api.write_kubeconfig(tmp)))
            t0 = time.perf_counter()
            cache = ClusterCache(kube).start()
            if not cache.wait_synced(120):
                raise SystemExit("node cache did not sync")
            cache.model()
            sync_s = time.perf_counter() - t0
        ext = Extender(args.solver, cache=cache, kube=kube)
        serving = ExtenderServer(ext, "127.0.0.1", 0, "/iro")
        serving.serve_in_thread()
        server = serving  # shutdown() before serving would wait forever
        stored = api.list("nodes")
        rng = np.random.default_rng(0)
        pods = [make_pod(f"web-{k}", cpu=c, memory=m) for k, (c, m) in enumerate(SHAPES)]
        names_bodies, nodes_bodies = [], []
        for k in range(32):
            pick = np.sort(rng.choice(args.nodes, size=args.names, replace=False))
            pod = pods[k % len(pods)]
            names_bodies.append(json.dumps({"Pod": pod, "Nodes": None, "NodeNames": [stored[i]["metadata"]["name"] for i in pick]}).encode())
            nodes_bodies.append(json.dumps({"Pod": pod, "Nodes": {"metadata": {}, "items": [stored[i] for i in pick]}, "NodeNames": None}).encode())
        # Warm the per-shape snapshot caches as a running extender would be.
        for body in names_bodies[:8] + nodes_bodies[:8]:
            for verb in ("filter", "prioritize"):
                getattr(ext, verb)(json.loads(body))
        rows = []
        for mode, bodies in (("NodeNames (nodeCacheCapable: true)", names_bodies), ("Nodes (nodeCacheCapable: false)", nodes_bodies)):
            for verb in ("filter", "prioritize"):
                with console.status(f"{mode}: {verb}"):
                    res = run_case(serving.url, verb, bodies, args.seconds, args.clients, args.threads)
                res["mode"] = mode
                res["body_kb"] = round(sum(len(b) for b in bodies) / len(bodies) / 1024, 1)
                rows.append(res)
        _stop_server(server)
        _stop_cache(cache)  # the scheduler keeps its own cache
        server = cache = None
        sched = None
        if args.scheduler_pods:
            with console.status(f"iro scheduler: {args.scheduler_pods} pending pods"):
                sched = run_scheduler(api, kube, args.scheduler_pods, args.solver)
    finally:
        # on every path: a watch thread alive at interpreter exit aborted the process (exit 134)
        _stop_server(server)
        _stop_cache(cache)
        api.stop()
        tmp.unlink(missing_ok=True)

    machine = f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}"
    table = Table(title=f"extender on loopback: {args.nodes} nodes, {args.names} candidates per request, "
                        f"{args.clients}x{args.threads} connections, solver {args.solver}")
    for col in ("mode", "verb", "body KiB", "requests/s", "p50 ms", "p99 ms", "errors"):
        table.add_column(col, justify="left" if col in ("mode", "verb") else "right")
    for r in rows:
        table.add_row(r["mode"], r["verb"], f"{r['body_kb']:.1f}", f"{r['requests_per_s']:.0f}",
                      f"{r['p50_ms']:.2f}", f"{r['p99_ms']:.2f}", str(r["errors"]))
    out = Console(width=None if sys.stdout.isatty() else 160)  # files and pipes: the table not cut at 80 columns
    out.print(table)
    out.print(f"machine: {machine}; node cache sync (list + watch + model): {sync_s:.2f} s")
    if sched is not None:
        out.print(f"iro scheduler: {sched['pods']} pods bound in {sched['seconds']:.2f} s = {sched['pods_per_s']:.0f} pods/s "
                  f"(batches of up to {sched['max_batch']}, {sched['batches']} batches, solve {sched['solve_s']:.2f} s in total; "
                  "each pod: one Binding POST and one Event POST through the Python client)")
    if args.out:
        write_json_atomic(args.out, {"nodes": args.nodes, "names": args.names, "clients": args.clients, "threads": args.threads,
                                     "solver": args.solver, "machine": machine, "cache_sync_s": sync_s, "results": rows,
                                     "scheduler": sched})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""The ``edge-agent`` command (also ``python -m edge_agent``).

``edge-agent run --config agent.yaml [--port P]`` serves until SIGTERM or SIGINT (SIGHUP stops
like SIGTERM: the agent has no configuration reload), then stops cleanly (in-flight requests
answered, the store flushed, a SuperNode it started stopped) and exits 0 after SIGTERM (Kubernetes
or systemd stopping it), 130 after Ctrl-C: the project's stop
convention (:mod:`iro_fed.cli`). A second signal during the stop is not waited for (Ctrl-C again
exits 130, SIGTERM again ends the process). Bad settings exit 2 with every error naming its key.
Ctrl-C before the agent serves (reading the settings, building the site) or during ``bench``
exits 130 without a traceback. A SIGTERM then is a stop too: ``run`` exits 0, before the agent
serves or once it is stopped again (:class:`iro_fed.cli.EarlyStop`); ``bench`` and ``check`` end
on it (143).
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import sys
from collections.abc import Sequence
from pathlib import Path

EXIT_OK = 0
EXIT_BAD_INPUT = 2
EXIT_INTERRUPTED = 130  # Ctrl-C, by shell convention (iro_fed.cli.EXIT_INTERRUPTED)
BENCH_MAX_NODES = 100_000
BENCH_MAX_REQUESTS = 1_000_000
BENCH_MAX_CLIENTS = 256


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="edge-agent", description="IRO-Fed edge agent: node metrics, recommendations, local experience.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    p = sub.add_parser("run", help="serve /metrics, /healthz, /readyz and POST /recommend until SIGTERM")
    p.add_argument("--config", metavar="FILE", help="agent settings (YAML); environment variables IRO_AGENT_* override it")
    p.add_argument("--port", type=int, metavar="P", help="listen port (overrides listen.port; 0 picks a free port)")
    p = sub.add_parser("bench", help="measure /recommend latency over real HTTP at a given site size")
    p.add_argument("--nodes", type=int, default=1000, help="nodes in the generated site (default 1000)")
    p.add_argument("--requests", type=int, default=1000, help="pods to recommend for (default 1000)")
    p.add_argument("--clients", type=int, default=1, help="concurrent keep-alive clients (default 1)")
    p.add_argument("--solvers", default="kube-default,greedy-objective,best-fit", metavar="A,B", help="solvers to measure")
    p.add_argument("--k", type=int, default=5, help="top-K per reply (default 5)")
    p.add_argument("--out", metavar="FILE", help="write the results as JSON")
    p = sub.add_parser("check", help="validate the settings and the site, print them as JSON, exit")
    p.add_argument("--config", metavar="FILE", help="agent settings (YAML); environment variables IRO_AGENT_* override it")
    p.add_argument("--port", type=int, metavar="P", help="listen port (overrides listen.port; 0 picks a free port)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    import signal
    import threading

    # First of all, before iro_fed's imports (numpy, rich: ~0.1 s): a SIGTERM while `run` starts
    # is a stop asked for (iro_fed.cli.EarlyStop), not a death by signal (143).
    got: list[int] = []
    in_main = threading.current_thread() is threading.main_thread()  # Python sets handlers there only
    previous = signal.signal(signal.SIGTERM, lambda signum, _frame: got.append(signum)) if in_main else None
    # SIGHUP (a closed terminal, `systemctl reload`, `kill -HUP`) stops like SIGTERM: the agent has
    # no configuration reload, and SIGHUP's default ended it at once (no log, queued decisions lost).
    # Passed on as a SIGTERM, so whichever SIGTERM handler is in place (early, run's, default) acts.
    hup = getattr(signal, "SIGHUP", None) if in_main else None
    previous_hup = signal.signal(hup, _hup_as_sigterm) if hup is not None else None
    from iro_fed.cli import EarlyStop

    early = None
    if in_main:
        early = EarlyStop(previous, got)  # the same list: a SIGTERM the stand-in noted is kept
        signal.signal(signal.SIGTERM, early)
    try:
        args = build_parser().parse_args(argv)
        if early is not None:
            stopped = early.started(args.command == "run")  # bench and check end on SIGTERM as before
            if stopped is not None:
                return stopped
        try:
            return _main(args)
        except KeyboardInterrupt:  # `run` handles SIGINT itself once it serves; before that, and in bench, it lands here
            print(f"edge-agent {args.command}: interrupted", file=sys.stderr)
            return EXIT_INTERRUPTED
    finally:
        if early is not None:
            early.release()
        if hup is not None:
            signal.signal(hup, signal.SIG_DFL if previous_hup is None else previous_hup)


def _hup_as_sigterm(_signum: int, _frame: object) -> None:
    import signal

    signal.raise_signal(signal.SIGTERM)


def _main(args: argparse.Namespace) -> int:
    from edge_agent.config import ConfigError, load_config
    from edge_agent.logs import setup_logging
    from edge_agent.recommend import SiteError
    from iro_fed.problem_io import ProblemValidationError

    if args.command == "bench":
        return _bench(args)
    from iro_fed.cli import UsageError
    from iro_fed.k8s.httpjson import host_port
    from iro_fed.metrics.prometheus import redact_url

    store_path, store_key = None, "store.path"
    try:
        cfg = load_config(args.config, port=args.port)
        _check_listen(cfg.listen.host, cfg.label("listen.host"), test_bind=args.command == "check")
        logger = setup_logging(cfg.log_level)
        from edge_agent.agent import Agent

        store_path, store_key = cfg.store.path, cfg.label("store.path")
        new_store = store_path is not None and not Path(store_path).exists()  # run's failed bind removes it
        if args.command == "check":
            if store_path is not None:
                from edge_agent.store import probe_store

                probe_store(store_path)  # what run's open would refuse, without creating or changing the file
            cfg.store.path = None  # a check writes nothing
        agent = Agent(cfg, logger)
    except SiteError as exc:  # after the settings were read: name IRO_AGENT_SITE if it set the site
        print(f"edge-agent {args.command}: error: {cfg.label('site')}{str(exc).removeprefix('site')}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except (ConfigError, ProblemValidationError, UsageError) as exc:
        print(f"edge-agent {args.command}: error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except (sqlite3.Error, OSError) as exc:
        # The experience store opens here (a locked, unwritable or damaged file): say which setting.
        print(f"edge-agent {args.command}: error: {_open_error(exc, store_path, store_key)}", file=sys.stderr)
        return EXIT_BAD_INPUT
    if args.command == "check":
        print(json.dumps({"settings_ok": True, "site_nodes": agent.view.site.num_nodes, "node": cfg.node_name,
                          "listen": host_port(cfg.listen.host, cfg.listen.port),
                          "store": str(store_path) if store_path else None,
                          # Never the password of prometheus.url: check's output ends up in CI logs and tickets.
                          "prometheus": redact_url(cfg.prometheus.url) if cfg.prometheus.url else None,
                          "scoring": cfg.prometheus.scoring,
                          "policy_registry": str(cfg.policy.registry) if cfg.policy.registry else None,
                          "federated": _federated_summary(cfg, store_path)}, indent=2))
        return EXIT_OK

    from iro_fed.cli import stop_signals, stop_status

    with stop_signals() as wait_for_stop:
        try:
            agent.start()
        except OSError as exc:  # port in use, cannot bind
            key, where = cfg.label(_listen_key(exc)), host_port(cfg.listen.host, cfg.listen.port)
            print(f"edge-agent run: error: {key}: cannot listen on {where}: {exc.strerror or exc}", file=sys.stderr)
            agent.abandon()  # never served: no "stopping" / "stopped" lines
            if new_store:  # an empty store file this run made: a failed start leaves nothing behind
                from edge_agent.store import remove_store_files

                remove_store_files(store_path)
            return EXIT_BAD_INPUT
        signum = wait_for_stop()  # the default handlers are back: a second signal interrupts a stop that hangs
        agent.stop()
        return stop_status(signum)


def _check_listen(host: str, key: str, test_bind: bool) -> None:
    """``listen.host`` must resolve (run's bind said only "listen ...: Name or service not known");
    ``check`` also binds a free port on it, which finds an address that is not this machine's
    without taking ``listen.port`` (a running agent may hold it). UsageError names the key."""
    import socket

    from iro_fed.cli import UsageError, check_listen_host
    from iro_fed.k8s.httpjson import listen_address

    check_listen_host(key, host)
    if not test_bind:
        return
    try:
        family, address = listen_address(host, 0)  # the family and address run's server binds
        with socket.socket(family, socket.SOCK_STREAM) as sock:
            sock.bind(address)
    except OSError as exc:
        raise UsageError(f"{key}: cannot listen on {host!r}: {exc.strerror or exc}") from None


def _listen_key(exc: OSError) -> str:
    """The setting a failed bind is about: the address (not this machine's, not resolved, a family
    the kernel lacks) or the port."""
    from iro_fed.k8s.httpjson import listen_error_is_host

    return "listen.host" if listen_error_is_host(exc) else "listen.port"


def _open_error(exc: BaseException, store_path: Path | None, key: str = "store.path") -> str:
    """The message of an error raised while the agent was built, naming ``store.path`` when the
    experience store (the one file the agent opens then) was the cause."""
    filename = getattr(exc, "filename", None)
    if store_path is not None and (isinstance(exc, sqlite3.Error) or (
            filename is not None and Path(filename) in (store_path, *store_path.parents))):
        detail = getattr(exc, "strerror", None) or str(exc)
        return f"{key}: cannot open the experience store {str(store_path)!r}: {detail}"
    return str(exc)


def _federated_summary(cfg: object, store_path: object) -> dict | None:
    """What ``edge-agent check`` shows of the federated block (the SuperNode command in mode start)."""
    fed = cfg.federated  # type: ignore[attr-defined]
    if not fed.enabled:
        return None
    doc = {"mode": fed.mode, "superlink": fed.superlink or None, "site": fed.site,
           "clientappio_port": fed.clientappio_port}
    if fed.mode == "start":
        from edge_agent.federation import supernode_argv

        db = store_path if (store_path is not None and fed.experience) else None
        # Port 0: run picks a free port at each start (federation.free_port); no fixed one to show.
        port = fed.clientappio_port if fed.clientappio_port else "<free port at each start>"
        doc["command"] = supernode_argv(fed, port, db)  # type: ignore[arg-type]
    return doc


def _bench(args: argparse.Namespace) -> int:
    import solvers
    from edge_agent.bench import machine, run_bench
    from edge_agent.recommend import MAX_K
    from iro_fed.cli import UsageError, check_int, check_names
    from iro_fed.problem_io import write_json_atomic

    def bad(message: str) -> int:
        print(f"edge-agent bench: error: {message}", file=sys.stderr)
        return EXIT_BAD_INPUT

    # Upper bounds keep a typo from generating a site or a request list that exhausts memory;
    # --k is a request's k (the bound of /recommend's k). Worded as every command line words a bound.
    try:
        for name, value, low, high in (("--nodes", args.nodes, 1, BENCH_MAX_NODES),
                                       ("--requests", args.requests, 10, BENCH_MAX_REQUESTS),
                                       ("--clients", args.clients, 1, BENCH_MAX_CLIENTS), ("--k", args.k, 1, MAX_K)):
            check_int(name, value, low, high)
    except UsageError as exc:
        return bad(str(exc))
    registered = list(solvers.registered())
    unknown = [n for n in (s.strip() for s in args.solvers.split(",")) if n and n not in registered]
    if unknown:  # every unknown name at once, before the list's shape
        return bad(f"--solvers: unknown solver(s) {', '.join(unknown)}")
    try:  # none given, an empty name ("best-fit,": was dropped, a name lost in an edit), one given twice
        names = check_names("--solvers", args.solvers, registered)
    except UsageError as exc:
        return bad(str(exc))
    from solvers.base import OnlineSolver, SolverError

    for name in names:  # /recommend ranks with an online solver; a batch one would fail mid-bench
        try:
            solver = solvers.make(name)
        except SolverError as exc:
            return bad(f"--solvers: {exc}")
        if not isinstance(solver, OnlineSolver):
            return bad(f"--solvers: {name!r} is a batch solver; /recommend needs an online solver (one with rank)")
    if args.out:
        from iro_fed.cli import check_output_file

        try:  # checked before the bench, which takes minutes, not after it
            check_output_file("--out", args.out)
        except UsageError as exc:
            return bad(str(exc))
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    console = Console(stderr=True, markup=False)
    results = []
    for name in names:
        with console.status(Text(f"{name}: {args.requests} requests at {args.nodes} nodes")):
            results.append(run_bench(args.nodes, args.requests, args.clients, name, args.k))
    table = Table(title=f"/recommend latency, {args.nodes} nodes per site, {args.clients} client(s) - {machine()}")
    for col in ("solver", "requests", "p50 ms", "p90 ms", "p99 ms", "max ms", "req/s"):
        table.add_column(col, justify="left" if col == "solver" else "right")
    for r in results:
        table.add_row(r["solver"], str(r["requests"]), f"{r['p50_ms']:.2f}", f"{r['p90_ms']:.2f}", f"{r['p99_ms']:.2f}",
                      f"{r['max_ms']:.2f}", f"{r['throughput_rps']:.0f}")
    Console(markup=False).print(table)
    if args.out:
        write_json_atomic(args.out, {"machine": machine(), "results": results})
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())

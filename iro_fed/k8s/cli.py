"""``iro extender``, ``iro webhook``, ``iro scheduler``: the Kubernetes servers.

Each prints a table of what it serves, then runs until SIGTERM or SIGINT, stops cleanly (the
server closed, the watches and the scheduler's threads stopped, its Lease released) and exits 0
after SIGTERM (Kubernetes stopping the pod), 130 after Ctrl-C: the project's stop convention
(:mod:`iro_fed.cli`). A second signal during the stop is not waited for. ``--ready-file`` is
written atomically (a reader never sees it empty or half-written) once the server listens, and
a stale one from an earlier run is removed first. A SIGTERM before the commands serve (while
Python imports, they check their arguments and start) is a stop too: exit 0, having started
nothing, or once what was started is stopped (:class:`iro_fed.cli.EarlyStop`); Ctrl-C then exits 130.

Bad arguments (an unreadable certificate, an unknown solver, a port or number out of range, a
number that is not finite, a name Kubernetes would reject, a --host this machine cannot listen
on, a --cluster-config that is not UTF-8 or has a field of the wrong kind, the webhook's --port and
--metrics-port on one port of overlapping addresses, a flag that does nothing without another or
in the other --mode, such as --fine-tune-scenario without --fine-tune-registry or the webhook's
--top-k in scheduler-name mode) exit with status 2, naming the flag, before anything listens.
"""

from __future__ import annotations

import argparse
import logging
import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.table import Table

from iro_fed.cli import (
    UsageError,
    _console,
    _parse_settings,
    check_input_file,
    check_int,
    check_listen_host,
    check_number,
    check_output_file,
    check_output_folder,
    stop_signals,
    stop_status,
)
from iro_fed.limits import MAX_TOP_K, MAX_TRAIN_STEPS
from iro_fed.problem_io import DNS_LABEL, DNS_SUBDOMAIN, write_file_atomic

#: Where ``iro scheduler --metrics-port`` listens without --metrics-host: every IPv4 address, as before the flag.
METRICS_HOST = "0.0.0.0"

#: The defaults of the flags that only do something with another flag or in one mode: their
#: argparse default is None, so that one given where it does nothing is seen and refused
#: (:func:`_fill_defaults`).
WEBHOOK_DEFAULTS: dict[str, Any] = {"scheduler_name": "iro", "solver": "greedy-objective", "top_k": 3}
SCHEDULER_DEFAULTS: dict[str, Any] = {"metrics_poll_s": 30.0, "fine_tune_scenario": "edge-iot", "fine_tune_steps": 256}
#: ``iro webhook``'s flags read only in ``--mode affinity`` (``(flag, dest)``; --watch-timeout-s
#: and --list-page-size are refused by ``_api_timeouts``).
WEBHOOK_AFFINITY_FLAGS = (("--top-k", "top_k"), ("--solver", "solver"), ("--set", "set"),
                          ("--kubeconfig", "kubeconfig"), ("--cluster-config", "cluster_config"))


def _port(text: str) -> int:
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a port number, got {text!r}") from None
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"port must be 0..65535, got {port}")
    return port


def _listen_port(text: str) -> int:
    """A port that is reported nowhere but the flag itself: 0 (any free port) is no use."""
    port = _port(text)
    if port == 0:
        raise argparse.ArgumentTypeError("port must be 1..65535, got 0")
    return port


#: Longest batch window and NodeMetrics poll period: the scheduler's thread waits that long on a
#: threading.Event, which raises OverflowError (the thread dies, no pod is scheduled) beyond ~9e9 s.
MAX_WINDOW_S = 3600.0
MAX_METRICS_POLL_S = 86400.0
#: Longest pod backoff and unschedulable wait (kube-scheduler's defaults are 1 s, 10 s and 5 min).
MAX_POD_BACKOFF_S = 3600.0
MAX_UNSCHEDULABLE_S = 86400.0
#: Longest ``--api-timeout-s`` (an API write's wait for its answer; Kube.write_timeout_s, 30 s by
#: default) and ``--watch-timeout-s`` (a watch's ``timeoutSeconds``, whole seconds as the API takes
#: it; 60..119 s at random by default): an hour, as long as kube-apiserver keeps a watch open of its own accord.
MAX_API_TIMEOUT_S = 3600.0
MAX_WATCH_TIMEOUT_S = 3600
#: Largest ``--list-page-size`` (objects per page of a list; client.LIST_PAGE_SIZE, 500, by default):
#: a page this big is already tens of MB parsed at once.
MAX_LIST_PAGE_SIZE = 100_000
#: The webhook configuration's ``timeoutSeconds`` (``--timeout-seconds``): the API server takes 1..30.
MAX_WEBHOOK_TIMEOUT_S = 30
#: Longest ``--http-timeout-s`` (kube-scheduler's extender ``httpTimeout``).
MAX_EXTENDER_HTTP_TIMEOUT_S = 3600.0
#: The extender's bind waits for the API server at most this share of its caller's timeout when
#: ``--api-timeout-s`` is not given (and no longer than ``Kube.write_timeout_s``): kube-scheduler
#: stops waiting for the extender after ``httpTimeout`` and retries the pod, and a Binding made
#: after that could bind it where it was not scheduled (then the retry's bind gets 409). The rest
#: (1 s of kube's 5 s) is for the request's body to arrive and the answer to go back.
EXTENDER_BIND_SHARE = 0.8


def _k8s_name(flag: str, value: str, label: bool = False, max_len: int = 253) -> str:
    """``value`` if Kubernetes accepts it as a name (a pod would never match a scheduler name it rejects)."""
    if not value:
        raise UsageError(f"{flag}: must not be empty")
    limit = 63 if label else max_len
    # spec.schedulerName and the Lease name are DNS-1123 subdomains, namespaces labels.
    if len(value) > limit or not (DNS_LABEL if label else DNS_SUBDOMAIN).fullmatch(value):
        kind = "DNS-1123 label" if label else "DNS-1123 subdomain"
        raise UsageError(f"{flag}: {value!r} is not a valid Kubernetes name ({kind}: lowercase letters, digits"
                         f"{'' if label else ', dots'} and '-', at most {limit} characters)")
    return value


def _url_prefix(prefix: str) -> str:
    if any(c.isspace() or c in "?#%" for c in prefix):
        raise UsageError(f"--url-prefix: expected a URL path such as /iro, got {prefix!r}")
    return prefix


def _file(path: str | None, option: str) -> str | None:
    return None if path is None else str(check_input_file(option, path))


_PRIVATE_KEY = re.compile(rb"-----BEGIN (?:RSA |EC |DSA )?PRIVATE KEY-----")


def _tls_problem(cert: str | None, key: str | None) -> str | None:
    """Which of the TLS files OpenSSL could not use, in words (its own "[SSL] PEM lib" names neither)."""
    import ssl

    from iro_fed.k8s.webhook import _tls_context

    def head(path: str) -> bytes:
        with open(path, "rb") as handle:
            return handle.read(1 << 20)

    try:
        cert_text, key_text = head(cert or ""), head(key or "")
    except OSError:
        return None
    if b"-----BEGIN CERTIFICATE-----" not in cert_text:
        return f"--tls-cert: {cert} holds no PEM certificate ('-----BEGIN CERTIFICATE-----')"
    if b"-----BEGIN ENCRYPTED PRIVATE KEY-----" in key_text or b"Proc-Type: 4,ENCRYPTED" in key_text:
        return f"--tls-key: {key} is an encrypted private key; give it unencrypted (a Secret mounts it as a file)"
    if not _PRIVATE_KEY.search(key_text):
        return f"--tls-key: {key} holds no PEM private key ('-----BEGIN PRIVATE KEY-----')"
    try:
        _tls_context(cert or "", key or "")  # as the server loads them: never a pass-phrase prompt
    except ssl.SSLError as exc:
        if "KEY_VALUES_MISMATCH" in str(exc) or "key values mismatch" in str(exc):
            return f"--tls-key: {key} is not the private key of the certificate in --tls-cert {cert}"
        return f"--tls-cert/--tls-key: {cert} / {key}: {exc.reason or exc}"
    return None


def _config(path: str | None) -> Any:
    """The ``--cluster-config`` file; every error names the flag and the file. Read by the one
    document loader (``problem_io.load_document``: a byte-order mark is fine, the same messages
    as every other file)."""
    from iro_fed.k8s.snapshot import load_config
    from iro_fed.problem_io import ProblemValidationError

    if path is not None:
        _file(path, "--cluster-config")
    try:  # unreadable, not UTF-8, not JSON/YAML, then the shapes and values, each error with its field
        return load_config(path)
    except ProblemValidationError as exc:
        raise UsageError(f"--cluster-config: {exc}") from exc


def _kube(kubeconfig: str | None, user_agent: str, api_timeout_s: float | None = None,
          list_page_size: int | None = None) -> Any:
    """The API client of ``--kubeconfig`` (else the in-cluster service account); its writes wait
    ``api_timeout_s`` for an answer when given, else ``Kube.write_timeout_s``; its lists read
    ``list_page_size`` objects a page when given, else ``Kube.list_page_size``."""
    from iro_fed.k8s.client import Kube

    if kubeconfig is None and not os.environ.get("KUBERNETES_SERVICE_HOST"):
        raise UsageError("--kubeconfig: required when not running inside a cluster (no in-cluster service account found)")
    try:
        kube = Kube.from_kubeconfig(_file(kubeconfig, "--kubeconfig"), user_agent=user_agent)
    except UsageError:
        raise
    except Exception as exc:  # kubernetes.config.ConfigException and friends
        raise UsageError(f"--kubeconfig: cannot load {kubeconfig!r}: {exc}") from exc
    if api_timeout_s is not None:
        kube.write_timeout_s = api_timeout_s
    if list_page_size is not None:
        kube.list_page_size = list_page_size
    return kube


def _api_timeouts(args: argparse.Namespace, talks: bool, needs: str) -> tuple[float | None, int | None]:
    """``--api-timeout-s`` and ``--watch-timeout-s`` (None: not given, the library's defaults),
    checked, and ``--list-page-size`` checked (``_kube`` reads it); given to a command that does not talk to the API server (``talks`` false), they are
    an error naming the flag and what it ``needs``, not silently unused."""
    api = getattr(args, "api_timeout_s", None)
    watch = args.watch_timeout_s
    page = getattr(args, "list_page_size", None)
    if api is not None:
        check_number("--api-timeout-s", api, 0.0, MAX_API_TIMEOUT_S, low_open=True)
    if watch is not None:
        check_int("--watch-timeout-s", watch, 1, MAX_WATCH_TIMEOUT_S)
    if page is not None:
        check_int("--list-page-size", page, 0, MAX_LIST_PAGE_SIZE)
    for flag, value in (("--api-timeout-s", api), ("--watch-timeout-s", watch), ("--list-page-size", page)):
        if value is not None and not talks:
            raise UsageError(f"{flag}: needs {needs} (without it no API server is called)")
    return api, watch


def _watch_kwargs(watch_timeout_s: int | None) -> dict[str, Any]:
    """``watch_timeout_s`` for ClusterCache / IroScheduler when ``--watch-timeout-s`` was given,
    exactly (no jitter), else theirs: the defaults stay in one place.

    Only the default is stretched at random (up to twice, as client-go's reflector does): a
    timeout the operator gives is a bound they know of (a proxy's or load balancer's limit on a
    stream), which a longer watch would break, and kube-apiserver, too, draws a watch's timeout at
    random only when the client names none."""
    return {} if watch_timeout_s is None else {"watch_timeout_s": watch_timeout_s, "watch_jitter": 0.0}


def _watches_text(reflector: Any) -> str:
    """A reflector's watch timeout in words: ``60 s`` or ``60 s to 120 s at random``."""
    low = reflector.watch_timeout_s
    if not reflector.watch_jitter:
        return f"{low} s"
    return f"{low} s to {low * (1 + reflector.watch_jitter):g} s at random (client-go's jitter)"


def _timeouts_row(kube: Any, cache: Any, writes_note: str = "") -> tuple[str, str]:
    """The settings table's row of the API timeouts in effect (``writes_note``: where the write
    timeout comes from, when not from ``--api-timeout-s``)."""
    note = f" ({writes_note})" if writes_note else ""
    return "API timeouts", f"writes {kube.write_timeout_s:g} s{note}, watches {_watches_text(cache.nodes)}"


def _below_caller(flag: str, value: float, caller_flag: str, caller: float, given: bool, why: str) -> None:
    """``value`` of ``flag`` must be below its caller's timeout (``caller_flag``, its default when
    not ``given``): at or past it no one is left to read the answer."""
    if value >= caller:
        where = f"{caller:g}" if given else f"{caller:g} when not given"
        raise UsageError(f"{flag}: must be below {caller_flag} ({where}), got {value:g}: {why}")


def _settings_table(title: str, rows: list[tuple[str, str]]) -> None:
    table = Table(title=title)
    table.add_column("setting")
    table.add_column("value")
    for k, v in rows:
        table.add_row(k, v)
    _console(markup=False).print(table)  # values are user data (paths, label selectors such as a[b])


def _logging(verbose: bool) -> None:
    logging.basicConfig(level=logging.DEBUG if verbose else logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")


# --- extender ---------------------------------------------------------------------------------


def cmd_extender(args: argparse.Namespace) -> int:
    from iro_fed.k8s.client import ClusterCache, Kube
    from iro_fed.k8s.extender import HTTP_TIMEOUT_S, Extender, ExtenderServer

    _logging(args.verbose)
    _server_args(args)
    _url_prefix(args.url_prefix)
    check_number("--solver-weight", args.solver_weight, 0.0, 1.0)
    if args.http_timeout_s is not None:
        check_number("--http-timeout-s", args.http_timeout_s, 0.0, MAX_EXTENDER_HTTP_TIMEOUT_S, low_open=True)
    watching = bool(args.kubeconfig or args.watch)
    api_timeout, watch_timeout = _api_timeouts(args, watching, "--kubeconfig or --watch")
    if api_timeout is not None:
        _below_caller("--api-timeout-s", api_timeout, "--http-timeout-s",
                      HTTP_TIMEOUT_S if args.http_timeout_s is None else args.http_timeout_s, args.http_timeout_s is not None,
                      "a bind still waiting for the API server when kube-scheduler stops waiting for it can bind the "
                      "pod after kube-scheduler has retried it")
    settings = _parse_settings(args.set or [], args.solver)
    config = _config(args.cluster_config)
    kube = cache = None
    writes_note = ""
    if watching:
        if api_timeout is None:  # a bind ends before its caller gives up
            caller = HTTP_TIMEOUT_S if args.http_timeout_s is None else args.http_timeout_s
            api_timeout = min(Kube.write_timeout_s, EXTENDER_BIND_SHARE * caller)
            writes_note = f"default: {EXTENDER_BIND_SHARE:g} x the caller timeout, at most {Kube.write_timeout_s:g} s"
        kube = _kube(args.kubeconfig, "iro-extender", api_timeout, args.list_page_size)
        cache = ClusterCache(kube, config, **_watch_kwargs(watch_timeout)).start()
    ext = Extender(args.solver, settings, cache=cache, kube=kube, config=config, solver_weight=args.solver_weight)
    try:
        server = ExtenderServer(ext, args.host, args.port, args.url_prefix, http_timeout_s=args.http_timeout_s)
    except OSError as exc:
        raise _listen_error(exc, args.host, args.port) from exc
    _settings_table("iro extender", [
        ("url", server.url),
        ("verbs", "filter, prioritize, bind, preempt"),
        ("mode", "nodeCacheCapable: true (node cache from a watch)" if cache else "nodeCacheCapable: false (stateless NodeList)"),
        ("solver", f"{args.solver} {settings or ''}".strip()),
        ("solver weight", f"{args.solver_weight:g} (objective {1 - args.solver_weight:g})"),
        ("caller timeout", f"{server.body_timeout_s:g} s (kube-scheduler's httpTimeout)"),
        *([_timeouts_row(kube, cache, writes_note)] if cache is not None else []),
    ])
    return stop_status(_serve_until_signal(server, args.ready_file, cache))


def _listen_error(exc: OSError, host: str, port: int, host_flag: str = "--host",
                  port_flag: str = "--port") -> UsageError:
    """A failed bind, naming the flag at fault: the address (not resolved, not this machine's, a
    family the kernel lacks) or the port (in use, privileged); IPv6 shown as ``[::1]:8443``."""
    from iro_fed.k8s.httpjson import host_port, listen_error_is_host

    flag = host_flag if listen_error_is_host(exc) else port_flag
    return UsageError(f"{flag}: cannot listen on {host_port(host, port)}: {exc.strerror or exc}")


def _listen_ip(host: str, port: int) -> Any:
    """The IP address a server of this module binds for ``host`` (``listen_address``: IPv4 first;
    an IPv4-mapped IPv6 address as its IPv4 one), an ``ipaddress`` address."""
    import ipaddress

    from iro_fed.k8s.httpjson import listen_address

    _family, address = listen_address(host, port)
    ip = ipaddress.ip_address(str(address[0] or "0.0.0.0").split("%")[0])  # "": INADDR_ANY; "fe80::1%eth0"
    if ip.version == 6 and ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    return ip


def _check_distinct_ports(first: tuple[str, str, str, int], second: tuple[str, str, str, int]) -> None:
    """Two servers of one command, each ``(host_flag, port_flag, host, port)``, must not listen on
    the same port where their addresses overlap (the same address, or either is every address:
    0.0.0.0 every IPv4 one, :: every one, dual stack as AnyFamily binds it): the second's bind
    failed with "Address already in use" blaming its own flag, after the first had started. Port 0
    (any free port) never collides."""
    (host_flag_a, port_flag_a, host_a, port_a), (host_flag_b, port_flag_b, host_b, port_b) = first, second
    if port_a == 0 or port_b == 0 or port_a != port_b:
        return
    try:
        a, b = _listen_ip(host_a, port_a), _listen_ip(host_b, port_b)
    except (OSError, ValueError):  # not resolved: the host's own check names it
        overlap = host_a == host_b
    else:
        if a.version == b.version:
            overlap = a == b or a.is_unspecified or b.is_unspecified
        else:  # an IPv4 address and an IPv6 one: only :: (dual stack) takes the IPv4 port too
            overlap = (a if a.version == 6 else b).is_unspecified
    if overlap:
        raise UsageError(f"{port_flag_a} / {port_flag_b}: both are port {port_a} on overlapping addresses "
                         f"({host_flag_a} {host_a}, {host_flag_b} {host_b}: the same address, or one of them "
                         f"every address), where only one server can listen; give {port_flag_b} another port")


def _fill_defaults(args: argparse.Namespace, defaults: dict[str, Any]) -> set[str]:
    """The dests given on the command line (not None); then each of ``defaults`` not given is set
    to its default. Those flags' argparse default is None, so that one given where it does nothing
    is seen (:func:`_needs`) and refused."""
    given = {dest for dest, value in vars(args).items() if value is not None}
    for dest, value in defaults.items():
        if dest not in given:
            setattr(args, dest, value)
    return given


def _needs(given: set[str], flags: tuple[tuple[str, str], ...], ok: bool, needs: str) -> None:
    """Each of ``flags`` (``(flag, dest)``) ``given`` while ``ok`` is false is an error naming the
    flag and what it ``needs`` ("--x: needs --y (why)"): it would do nothing, silently."""
    if ok:
        return
    for flag, dest in flags:
        if dest in given:
            raise UsageError(f"{flag}: needs {needs}")


def _server_args(args: argparse.Namespace) -> None:
    """Checks shared by the extender and the webhook, before anything listens."""
    check_listen_host("--host", args.host)
    if args.ready_file:
        # A file left by an earlier run would announce a URL nothing listens on.
        check_output_file("--ready-file", args.ready_file).unlink(missing_ok=True)


def _serve_until_signal(server: Any, ready_file: str | None, cache: Any) -> int:
    """Serve in a thread, announce the URL in ``ready_file``, stop cleanly on SIGTERM / SIGINT;
    returns the signal."""
    with stop_signals() as wait_for_stop:
        server.serve_in_thread()
        try:
            if ready_file:
                # Renamed into place whole: a reader polling for the file never sees it empty.
                write_file_atomic(ready_file, lambda tmp: Path(tmp).write_text(server.url + "\n"))
            return wait_for_stop()
        finally:
            server.shutdown()  # no new connections
            server.close_idle_reads()  # no new requests: idle connections close, one under way is answered
            # The request threads are daemons: the replies still due are waited for, no longer than
            # the caller waits for them (kube-scheduler's httpTimeout, the webhook's timeoutSeconds).
            server.wait_closed(server.body_timeout_s)
            server.server_close()
            if cache is not None:
                cache.stop()


# --- webhook ----------------------------------------------------------------------------------


def cmd_webhook(args: argparse.Namespace) -> int:
    import ssl

    from iro_fed.k8s.client import ClusterCache
    from iro_fed.k8s.httpjson import host_port
    from iro_fed.k8s.webhook import TIMEOUT_SECONDS, Webhook, WebhookServer, parse_selector

    _logging(args.verbose)
    given = _fill_defaults(args, WEBHOOK_DEFAULTS)
    _server_args(args)
    cert = _file(args.tls_cert, "--tls-cert")
    key = _file(args.tls_key, "--tls-key")
    try:
        selector = parse_selector(args.selector)
    except ValueError as exc:
        raise UsageError(f"--selector: {exc}") from exc
    ns_text = args.namespaces
    if ns_text is not None and not ns_text.strip():  # was read as no namespace: every pod selected
        raise UsageError(f"--namespaces: give at least one namespace name, got {ns_text!r} (leave the flag out "
                         f"to select by --selector alone)")
    ns_parts = ns_text.split(",") if ns_text is not None else []
    # "a,,b" or "a," (a name lost in an edit) was read as fewer namespaces
    empty = next((i for i, n in enumerate(ns_parts, start=1) if not n.strip()), None)
    if empty is not None:
        raise UsageError(f"--namespaces: empty name at position {empty} of {len(ns_parts)} in {ns_text!r}")
    namespaces = [_k8s_name("--namespaces", n.strip(), label=True) for n in ns_parts]
    _k8s_name("--scheduler-name", args.scheduler_name)
    # The API server waits at most 30 s for a webhook (timeoutSeconds 1..30): a longer budget is never used.
    check_number("--budget-s", args.budget_s, 0.0, 30.0, low_open=True)
    if args.timeout_seconds is not None:
        check_int("--timeout-seconds", args.timeout_seconds, 1, MAX_WEBHOOK_TIMEOUT_S)
    # Also against the default (deploy/'s timeoutSeconds), which the server's deadlines assume.
    _below_caller("--budget-s", args.budget_s, "--timeout-seconds",
                  TIMEOUT_SECONDS if args.timeout_seconds is None else args.timeout_seconds, args.timeout_seconds is not None,
                  "the answer would come after the API server gave up on the call")
    check_int("--top-k", args.top_k, 1, MAX_TOP_K)
    _, watch_timeout = _api_timeouts(args, args.mode == "affinity", "--mode affinity")
    settings = _parse_settings(args.set or [], args.solver)
    config = _config(args.cluster_config)
    # Each value checked, then whether it does anything in this mode: one that does not is refused.
    _needs(given, WEBHOOK_AFFINITY_FLAGS, args.mode == "affinity",
           "--mode affinity (--mode scheduler-name, the default, only sets spec.schedulerName)")
    _needs(given, (("--scheduler-name", "scheduler_name"),), args.mode == "scheduler-name",
           "--mode scheduler-name, the default (--mode affinity adds node affinity, spec.schedulerName left alone)")
    metrics_host = args.metrics_host or METRICS_HOST
    registry = None
    if args.metrics_host is not None and args.metrics_port is None:
        raise UsageError("--metrics-host: needs --metrics-port (no metrics are served without it)")
    if args.metrics_port is not None:
        check_listen_host("--metrics-host", metrics_host)
        _check_distinct_ports(("--host", "--port", args.host, args.port),
                              ("--metrics-host", "--metrics-port", metrics_host, args.metrics_port))
        try:
            from prometheus_client import CollectorRegistry
        except ImportError as exc:
            raise UsageError("--metrics-port: needs prometheus-client (pip install 'iro-fed[agent]')") from exc
        registry = CollectorRegistry()
    cache = None
    if args.mode == "affinity":
        if not args.kubeconfig and not os.environ.get("KUBERNETES_SERVICE_HOST"):
            raise UsageError("--mode affinity: needs --kubeconfig (or to run in a cluster) to see the nodes")
        cache = ClusterCache(_kube(args.kubeconfig, "iro-webhook", list_page_size=args.list_page_size), config,
                             **_watch_kwargs(watch_timeout)).start()
    hook = Webhook(args.mode, args.scheduler_name, selector, namespaces, cache, args.solver, settings, args.top_k,
                   args.budget_s, config)
    if registry is not None:
        from iro_fed.k8s.webhook import WebhookCollector

        registry.register(WebhookCollector(hook))
        try:
            start_metrics_server(registry, metrics_host, args.metrics_port)
        except OSError as exc:
            raise _listen_error(exc, metrics_host, args.metrics_port, "--metrics-host", "--metrics-port") from exc
    try:
        server = WebhookServer(hook, cert, key, args.host, args.port, timeout_seconds=args.timeout_seconds)
    except OSError as exc:  # ssl.SSLError is an OSError
        problem = _tls_problem(cert, key)
        if problem is None and not isinstance(exc, ssl.SSLError):  # the files loaded: the bind failed
            raise _listen_error(exc, args.host, args.port) from exc
        raise UsageError(problem or f"cannot serve HTTPS on {host_port(args.host, args.port)} with --tls-cert/--tls-key: {exc}") from exc
    _settings_table("iro webhook", [
        ("url", server.url + "/mutate"),
        ("mode", args.mode),
        ("scheduler name" if args.mode == "scheduler-name" else "top-K", args.scheduler_name if args.mode == "scheduler-name" else str(args.top_k)),
        ("selects", f"labels {selector or 'any'}; namespaces {namespaces or 'any'}"),
        ("answer budget", f"{args.budget_s:g} s"),
        ("caller timeout", f"{server.body_timeout_s:g} s (the webhook configuration's timeoutSeconds)"),
        *([("API timeouts", f"watches {_watches_text(cache.nodes)}")] if cache is not None else []),
        ("metrics", "off" if registry is None else f"{host_port(metrics_host, args.metrics_port)}/metrics"),
    ])
    return stop_status(_serve_until_signal(server, args.ready_file, cache))


# --- scheduler --------------------------------------------------------------------------------


@dataclass
class SchedulerParts:
    """What ``iro scheduler`` runs, built from its arguments (:func:`build_scheduler`)."""

    scheduler: Any  # iro_fed.k8s.scheduler.IroScheduler, not started
    settings: dict[str, Any] = field(default_factory=dict)  # the solver's --set values
    registry: Any = None  # prometheus_client.CollectorRegistry with --metrics-port


def build_scheduler(args: argparse.Namespace) -> SchedulerParts:
    """Check every ``iro scheduler`` argument (a UsageError names the flag) and build the
    scheduler (with its feedback loop) and its metrics registry; nothing is started or listens yet."""
    from iro_fed.k8s.scheduler import IroScheduler

    given = _fill_defaults(args, SCHEDULER_DEFAULTS)
    _k8s_name("--name", args.name, max_len=253 - len("-scheduler"))  # the Lease is named NAME-scheduler
    _k8s_name("--lease-namespace", args.lease_namespace, label=True)
    check_number("--time-limit-s", args.time_limit_s, 0.0, low_open=True)
    check_number("--window-s", args.window_s, 0.0, MAX_WINDOW_S)
    check_number("--metrics-poll-s", args.metrics_poll_s, 0.0, MAX_METRICS_POLL_S, low_open=True)
    if args.feedback_threshold is not None:
        check_number("--feedback-threshold", args.feedback_threshold, 0.0, low_open=True)
    if args.max_batch < 1:
        raise UsageError(f"--max-batch: must be >= 1, got {args.max_batch}")
    check_number("--pod-initial-backoff-s", args.pod_initial_backoff_s, 0.0, MAX_POD_BACKOFF_S, low_open=True)
    check_number("--pod-max-backoff-s", args.pod_max_backoff_s, 0.0, MAX_POD_BACKOFF_S, low_open=True)
    if args.pod_max_backoff_s < args.pod_initial_backoff_s:  # kube-scheduler's config validation too
        raise UsageError(f"--pod-max-backoff-s: must be >= --pod-initial-backoff-s ({args.pod_initial_backoff_s:g}), "
                         f"got {args.pod_max_backoff_s:g}")
    check_number("--max-unschedulable-s", args.max_unschedulable_s, 0.0, MAX_UNSCHEDULABLE_S, low_open=True)
    api_timeout, watch_timeout = _api_timeouts(args, True, "")
    settings = _parse_settings(args.set or [], args.solver)
    config = _config(args.cluster_config)
    import solvers

    if args.fallback not in solvers.registered():
        raise UsageError(f"--fallback: unknown solver {args.fallback!r}")
    if (args.fine_tune_registry is not None or args.round_request is not None) and args.feedback_threshold is None:
        raise UsageError("--fine-tune-registry / --round-request: need --feedback-threshold (the drift that triggers them)")
    actions = _fine_tune_actions(args)  # the values checked; then whether each flag given does anything
    _needs(given, (("--fine-tune-scenario", "fine_tune_scenario"), ("--fine-tune-steps", "fine_tune_steps")),
           args.fine_tune_registry is not None, "--fine-tune-registry (the DQN fine-tune it sets runs only with it)")
    _needs(given, (("--metrics-poll-s", "metrics_poll_s"),), args.feedback_threshold is not None,
           "--feedback-threshold (NodeMetrics are polled only for the feedback loop)")
    if args.metrics_host is not None:
        if args.metrics_port is None:
            raise UsageError("--metrics-host: needs --metrics-port (no metrics are served without it)")
        check_listen_host("--metrics-host", args.metrics_host)
    kube = _kube(args.kubeconfig, f"iro-scheduler/{args.name}", api_timeout, args.list_page_size)
    feedback, registry = None, None
    if args.metrics_port is not None:
        try:
            from prometheus_client import CollectorRegistry
        except ImportError as exc:
            raise UsageError("--metrics-port: needs prometheus-client (pip install 'iro-fed[agent]')") from exc
        registry = CollectorRegistry()
    if args.feedback_threshold is not None:
        from iro_fed.k8s.feedback import FeedbackLoop

        def on_drift(signal: Any) -> None:
            logging.getLogger("iro_fed.k8s.feedback").warning(
                "drift: moving error %.3f > %.3f; usage factor refitted %.3f -> %.3f (error now %.3f)",
                signal.moving_error, signal.threshold, signal.factor_before, signal.factor_after, signal.error_after)

        feedback = FeedbackLoop(threshold=args.feedback_threshold, on_drift=on_drift, registry=registry,
                                actions=actions, background_actions=True)
    try:
        sched = IroScheduler(kube, name=args.name, solver=args.solver, solver_params=settings, fallback=args.fallback,
                             time_limit_s=args.time_limit_s, window_s=args.window_s, max_batch=args.max_batch,
                             config=config, lease_namespace=args.lease_namespace,
                             leader_election=not args.no_leader_elect, feedback=feedback,
                             metrics_poll_s=args.metrics_poll_s if feedback is not None else None,
                             pod_initial_backoff_s=args.pod_initial_backoff_s, pod_max_backoff_s=args.pod_max_backoff_s,
                             max_unschedulable_s=args.max_unschedulable_s, **_watch_kwargs(watch_timeout))
    except ValueError as exc:
        raise UsageError(str(exc)) from exc
    if registry is not None:
        registry.register(QueueCollector(sched))
    return SchedulerParts(sched, settings, registry)


class QueueCollector:
    """The scheduler's unschedulable queue as Prometheus metrics, read from
    ``IroScheduler.queue_status()`` at each scrape: ``iro_scheduler_unschedulable_pods`` (a
    gauge: pods waiting after a failed attempt) and ``iro_scheduler_pod_backoff_seconds`` (a
    gauge histogram of their current backoff, one bucket per step of the doubling, so
    ``histogram_quantile`` reads it without ``rate``)."""

    UNSCHEDULABLE = "iro_scheduler_unschedulable_pods"
    BACKOFF = "iro_scheduler_pod_backoff_seconds"
    MAX_BUCKETS = 40  # a tiny initial backoff under a large maximum: the rest goes to +Inf

    def __init__(self, scheduler: Any) -> None:
        self.scheduler = scheduler
        steps = (scheduler.backoff_s(a) for a in range(1, self.MAX_BUCKETS + 1))
        self.bounds = sorted(set(steps))

    def describe(self) -> list[Any]:
        return list(self._families({}))

    def collect(self) -> list[Any]:
        return list(self._families(self.scheduler.queue_status()))

    def _families(self, queue: dict[str, dict[str, Any]]) -> Any:
        from prometheus_client.core import GaugeHistogramMetricFamily, GaugeMetricFamily

        yield GaugeMetricFamily(self.UNSCHEDULABLE, "Pods waiting in iro scheduler's unschedulable queue after a failed "
                                "attempt (until their backoff is over and the cluster changed, or max-unschedulable-s).",
                                value=len(queue))
        backoffs = [float(q["backoff_s"]) for q in queue.values()]
        buckets = [(str(b), sum(1 for x in backoffs if x <= b)) for b in self.bounds] + [("+Inf", len(backoffs))]
        yield GaugeHistogramMetricFamily(self.BACKOFF, "Current backoff of the pods in the unschedulable queue (seconds).",
                                         buckets=buckets, gsum_value=sum(backoffs))


#: ``iro scheduler``'s metrics server: open connections at once (one thread each; more get 503),
#: and the seconds a request's line and headers may take, and an idle keep-alive connection
#: waits. Prometheus scrapes over one connection and gives up after its scrape_timeout (10 s).
METRICS_MAX_CONNECTIONS = 32
METRICS_TIMEOUT_S = 10.0


def start_metrics_server(registry: Any, host: str, port: int, max_connections: int = METRICS_MAX_CONNECTIONS,
                         timeout_s: float = METRICS_TIMEOUT_S,
                         health: Callable[[], tuple[bool, str]] | None = None) -> Any:
    """Serve ``GET /metrics`` (and ``/``) of ``registry`` on ``host``:``port`` in a daemon thread
    and return the server (``server_address``; ``shutdown()``). ``health``: also ``GET /healthz``,
    200 ``{"ok": true, "status": ...}`` or 503 ``{"ok": false, "error": ...}`` as it answers
    (``IroScheduler.health``: the liveness probe's). The exposition is prometheus_client's
    (the format the ``Accept`` header asks for, gzip when accepted, ``name[]`` filters), served by the
    bounded server of the extender and the webhook (:mod:`iro_fed.k8s.httpjson`): at most
    ``max_connections`` open, ``timeout_s`` for a request's line and headers and for an idle
    connection. prometheus_client's ``start_http_server`` had neither: 200 half-sent requests held
    200 threads for ever. OSError where it cannot listen."""
    import gzip
    from http.server import ThreadingHTTPServer
    from urllib.parse import parse_qs, urlsplit

    from prometheus_client.exposition import choose_encoder, gzip_accepted

    from iro_fed.k8s.httpjson import AnyFamily, ConnectionLimit, RoutedJsonHandler, serve_in_thread

    class Handler(RoutedJsonHandler):
        error_key = "error"
        drain_bytes = 0  # a body sent with a GET is never read as the next request: the connection closes

        def routes(self) -> dict[str, dict[str, Any]]:
            out = {path: {"GET": self._metrics, "HEAD": self._metrics} for path in ("/metrics", "/")}
            if health is not None:
                out["/healthz"] = {"GET": self._health}
            return out

        def not_found(self, path: str) -> str:
            return f"unknown path {path[:100]!r} (GET /metrics{', /healthz' if health is not None else ''})"

        def _health(self) -> None:
            ok, why = health()
            if ok:
                self._send(200, {"ok": True, "status": why})
            else:  # the kubelet restarts the container after failureThreshold of these
                self._send(503, {"ok": False, "error": why})

        def _metrics(self) -> None:
            encoder, content_type = choose_encoder(self.headers.get("Accept", ""))
            names = parse_qs(urlsplit(self.path).query).get("name[]")
            data = encoder(registry.restricted_registry(names) if names else registry)
            headers: dict[str, str] = {}
            if gzip_accepted(self.headers.get("Accept-Encoding", "")):
                data = gzip.compress(data)
                headers["Content-Encoding"] = "gzip"
            self.send_body(200, data, content_type, headers)

    class Server(ConnectionLimit, AnyFamily, ThreadingHTTPServer):
        daemon_threads = True
        allow_reuse_address = True
        busy_message = "too many connections to the metrics server: retry"

        def handle_error(self, request: Any, client_address: Any) -> None:
            logging.getLogger(__name__).debug("metrics connection from %s failed", client_address, exc_info=True)

    Server.max_connections = max_connections
    Server.header_timeout_s = Server.body_timeout_s = Server.idle_timeout_s = timeout_s
    server = Server((host, port), Handler)
    serve_in_thread(server, "iro-scheduler-metrics")
    return server


def cmd_scheduler(args: argparse.Namespace) -> int:
    _logging(args.verbose)
    parts = build_scheduler(args)
    sched, registry = parts.scheduler, parts.registry
    feedback = sched.feedback
    from iro_fed.k8s.httpjson import host_port

    metrics_host = args.metrics_host or METRICS_HOST
    if registry is not None:
        try:
            # The address resolved as the other servers resolve theirs (IPv4 first; "::" dual stack).
            start_metrics_server(registry, metrics_host, args.metrics_port, health=sched.health)
        except OSError as exc:
            raise _listen_error(exc, metrics_host, args.metrics_port, "--metrics-host", "--metrics-port") from exc
    for flag, folder in _action_folders(args):  # every flag accepted (the port too): now they are made
        check_output_folder(flag, folder)
    _settings_table("iro scheduler", [
        ("scheduler name", args.name),
        ("identity", sched.identity),
        ("solver", f"{args.solver} {parts.settings or ''}".strip() + f" (fallback {args.fallback} after {args.time_limit_s:g} s)"),
        ("batch window", f"{args.window_s:g} s, at most {args.max_batch} pods"),
        ("unschedulable queue", f"backoff {args.pod_initial_backoff_s:g} s doubling to {args.pod_max_backoff_s:g} s, "
                                f"retried after {args.max_unschedulable_s:g} s anyway"),
        ("leader election", "off" if args.no_leader_elect else f"Lease {args.lease_namespace}/{args.name}-scheduler"),
        _timeouts_row(sched.kube, sched.cache),
        ("feedback", "off" if feedback is None else
         f"threshold {args.feedback_threshold:g}, NodeMetrics every {args.metrics_poll_s:g} s"
         + "".join(f"; on drift: {a.name}" for a in feedback.actions)),
        ("metrics", "off" if registry is None else f"{host_port(metrics_host, args.metrics_port)}/metrics, /healthz"),
    ])
    with stop_signals() as wait_for_stop:
        sched.start()
        try:
            signum = wait_for_stop()
        finally:
            sched.stop(release=True)
            if feedback is not None:
                feedback.close(timeout=5.0)  # a fine-tune still running is abandoned: its version is published atomically or not at all
    return stop_status(signum)


def _action_folders(args: argparse.Namespace) -> list[tuple[str, str]]:
    """``(flag, folder)`` of the fine-tune actions given (an empty one included, to be refused)."""
    given = (("--round-request", args.round_request), ("--fine-tune-registry", args.fine_tune_registry))
    return [(flag, folder) for flag, folder in given if folder is not None]


def _fine_tune_actions(args: argparse.Namespace) -> list[Any]:
    """The fine-tune actions of ``iro scheduler`` on drift (they run on the loop's worker thread)."""
    from iro_fed.feedback import DQNFineTune, FederatedRoundRequest
    from iro_fed.sim.cli import _check_output_folder, check_fine_tune_steps, fine_tune_start

    # against the registry's latest version when it has one (a policy of a larger batch needs more)
    check_fine_tune_steps("--fine-tune-steps", args.fine_tune_steps,
                          fine_tune_start(("--fine-tune-registry", args.fine_tune_registry)))
    _check_scenario(args.fine_tune_scenario)  # given or not (the default is one), used or not
    # The folders are written on drift, maybe hours later, in a worker thread: a typo must fail
    # now. They are only checked here, and made by cmd_scheduler once every flag is accepted
    # (a later bad flag exited 2 leaving them behind).
    for flag, folder in _action_folders(args):
        if not folder.strip():  # "" was falsy: the action was silently left out
            raise UsageError(f"{flag}: expected a folder, got {folder!r}")
        _check_output_folder(flag, folder)
    actions: list[Any] = []
    try:
        if args.round_request:
            actions.append(FederatedRoundRequest(args.round_request, site=args.name))
        if args.fine_tune_registry:
            # No scenario clock on a cluster (Trigger.at is wall-clock time): step_s None trains
            # every fine-tune on the scenario's first hour, each on episodes of its own seed.
            actions.append(DQNFineTune(registry=args.fine_tune_registry, scenario=args.fine_tune_scenario,
                                       steps=args.fine_tune_steps, steps_flag="--fine-tune-steps", step_s=None))
    except ValueError as exc:
        raise UsageError(f"--round-request / --fine-tune-registry: {exc}") from exc
    return actions


def _check_scenario(name: str) -> None:
    """``--fine-tune-scenario`` a scenario of the simulator (a typo failed only on drift, hours later)."""
    from iro_fed.sim.scenarios import SCENARIOS

    if name not in SCENARIOS:
        raise UsageError(f"--fine-tune-scenario: unknown scenario {name!r} (known: {', '.join(sorted(SCENARIOS))})")


# --- registration -----------------------------------------------------------------------------


def _add_api_timeouts(p: argparse.ArgumentParser, writes: str | None, watches: str, write_default: str = "30") -> None:
    """``--api-timeout-s`` (when the command writes: ``writes`` says what; ``write_default`` its
    default, in words), ``--watch-timeout-s`` and ``--list-page-size``."""
    if writes is not None:
        p.add_argument("--api-timeout-s", type=float, metavar="S",
                       help=f"seconds each API write ({writes}) waits for the API server's answer before it counts "
                            f"as failed (default {write_default}, at most {MAX_API_TIMEOUT_S:g})")
    p.add_argument("--watch-timeout-s", type=int, metavar="S",
                   help=f"whole seconds each watch of the API server ({watches}) lasts: its timeoutSeconds, after "
                        f"which it is renewed from where it stopped (1..{MAX_WATCH_TIMEOUT_S}); a given S is "
                        f"exact; without it each watch lasts 60..119 s at random, as client-go's, so that "
                        f"replicas do not renew theirs together")
    p.add_argument("--list-page-size", type=int, metavar="N",
                   help=f"objects per page when listing {watches.split(';')[0]} (the list's limit, as client-go's "
                        f"pager; 0: each list in one answer; default 500, at most {MAX_LIST_PAGE_SIZE:,})")


def register(sub: Any) -> None:
    """Add ``extender``, ``webhook`` and ``scheduler`` to the ``iro`` command."""
    p = sub.add_parser("extender", help="serve the kube-scheduler extender (filter, prioritize, bind, preempt)")
    p.add_argument("--port", type=_port, required=True, help="TCP port (0 = any free port)")
    p.add_argument("--host", default="127.0.0.1",
                   help="address to listen on (default 127.0.0.1: bind is unauthenticated; kube-scheduler runs the "
                        "extender as a sidecar on loopback; 0.0.0.0 to serve other hosts)")
    p.add_argument("--url-prefix", default="", metavar="X", help="path prefix of the verbs, e.g. /iro (default none)")
    p.add_argument("--solver", default="greedy-objective", metavar="NAME", help="solver whose ranking scores nodes (default greedy-objective)")
    p.add_argument("--set", action="append", metavar="KEY=VALUE", help="solver setting; repeat for several")
    p.add_argument("--solver-weight", type=float, default=0.5, metavar="A",
                   help="share of the solver's ranking in the score; the objective's marginal gets 1-A (default 0.5)")
    p.add_argument("--kubeconfig", metavar="F", help="watch nodes and pods (nodeCacheCapable: true) and enable bind")
    p.add_argument("--watch", action="store_true",
                   help="same as --kubeconfig with the in-cluster service account (inside a pod)")
    p.add_argument("--cluster-config", metavar="F", help="domains (prices, carbon, PUE), latency, weights: YAML or JSON")
    p.add_argument("--http-timeout-s", type=float, metavar="S",
                   help="kube-scheduler's httpTimeout for this extender: a request's headers and body must arrive "
                        f"within S seconds, else 408 (default 5, kube's default; at most {MAX_EXTENDER_HTTP_TIMEOUT_S:g})")
    _add_api_timeouts(p, "a bind; with --kubeconfig or --watch", "nodes and bound pods; with --kubeconfig or --watch",
                      f"{EXTENDER_BIND_SHARE:g} x --http-timeout-s up to 30, i.e. {EXTENDER_BIND_SHARE * 5:g} with kube's 5 s httpTimeout: "
                      f"a bind ends before kube-scheduler stops waiting; must be below --http-timeout-s")
    p.add_argument("--ready-file", metavar="F", help=argparse.SUPPRESS)
    p.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    p.set_defaults(func=cmd_extender, service=True)

    p = sub.add_parser("webhook", help="serve the mutating admission webhook (HTTPS)")
    p.add_argument("--port", type=_port, required=True, help="TCP port (0 = any free port)")
    p.add_argument("--host", default="0.0.0.0", help="address to listen on (default 0.0.0.0)")
    p.add_argument("--tls-cert", required=True, metavar="F", help="PEM certificate (chain) served to the API server")
    p.add_argument("--tls-key", required=True, metavar="F", help="PEM private key of the certificate")
    p.add_argument("--mode", choices=("scheduler-name", "affinity"), default="scheduler-name",
                   help="set spec.schedulerName, or add preferred node affinity for the top-K nodes (default scheduler-name)")
    p.add_argument("--scheduler-name", help="schedulerName to set (default iro; --mode scheduler-name only)")
    p.add_argument("--selector", metavar="K=V,...",
                   help="mutate pods with these labels (or, with --namespaces, any pod in those namespaces)")
    p.add_argument("--namespaces", metavar="A,B", help="mutate every pod in these namespaces (in addition to --selector's)")
    p.add_argument("--top-k", type=int, metavar="K",
                   help="nodes to prefer in affinity mode, 1..1000 (default 3; --mode affinity only)")
    p.add_argument("--budget-s", type=float, default=2.0, metavar="S",
                   help="answer within S seconds, unchanged if the recommendation is late (default 2, at most 30; "
                        "must be below --timeout-seconds, 5 when not given)")
    p.add_argument("--solver", metavar="NAME", help="solver for affinity mode (default greedy-objective; --mode affinity only)")
    p.add_argument("--set", action="append", metavar="KEY=VALUE",
                   help="solver setting; repeat for several (--mode affinity only)")
    p.add_argument("--kubeconfig", metavar="F", help="cluster access for affinity mode (--mode affinity only)")
    p.add_argument("--cluster-config", metavar="F", help="domains (prices, carbon, PUE), latency, weights: YAML or JSON (--mode affinity only)")
    p.add_argument("--timeout-seconds", type=int, metavar="S",
                   help="the webhook configuration's timeoutSeconds: a review's headers and body must arrive within "
                        f"S seconds, else 408; --budget-s must be below it (default 5, as deploy/; 1..{MAX_WEBHOOK_TIMEOUT_S})")
    _add_api_timeouts(p, None, "nodes and bound pods; with --mode affinity")
    p.add_argument("--metrics-port", type=_listen_port, metavar="P",
                   help="serve Prometheus metrics (iro_webhook_*: reviews, patches, budget refusals) over HTTP on P")
    p.add_argument("--metrics-host", metavar="ADDR",
                   help=f"address the --metrics-port server listens on (default {METRICS_HOST}; :: for IPv6)")
    p.add_argument("--ready-file", metavar="F", help=argparse.SUPPRESS)
    p.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    p.set_defaults(func=cmd_webhook, service=True)

    p = sub.add_parser("scheduler", help="run IRO as a secondary scheduler (batches, leader election, events)")
    p.add_argument("--name", default="iro", help="spec.schedulerName this scheduler serves (default iro)")
    p.add_argument("--kubeconfig", metavar="F", help="cluster access (default: in-cluster service account)")
    p.add_argument("--solver", default="greedy-objective", metavar="NAME", help="solver for each batch (default greedy-objective)")
    p.add_argument("--set", action="append", metavar="KEY=VALUE", help="solver setting; repeat for several")
    p.add_argument("--fallback", default="kube-default", metavar="NAME", help="heuristic on solver error or timeout (default kube-default)")
    p.add_argument("--time-limit-s", type=float, default=5.0, metavar="S", help="time the solver may take per batch (default 5)")
    p.add_argument("--window-s", type=float, default=1.0, metavar="S", help=f"gather pending pods this long before solving (default 1, at most {MAX_WINDOW_S:g})")
    p.add_argument("--max-batch", type=int, default=500, metavar="N", help="pods per batch at most (default 500)")
    p.add_argument("--pod-initial-backoff-s", type=float, default=1.0, metavar="S",
                   help=f"an unschedulable pod's backoff after its first failed attempt, doubled after each "
                        f"further one (default 1, as kube-scheduler; at most {MAX_POD_BACKOFF_S:g})")
    p.add_argument("--pod-max-backoff-s", type=float, default=10.0, metavar="S",
                   help=f"longest backoff, >= --pod-initial-backoff-s (default 10; at most {MAX_POD_BACKOFF_S:g})")
    p.add_argument("--max-unschedulable-s", type=float, default=300.0, metavar="S",
                   help="retry an unschedulable pod after this long even if the cluster did not change "
                        f"(default 300, kube's podMaxInUnschedulablePodsDuration; at most {MAX_UNSCHEDULABLE_S:g})")
    p.add_argument("--lease-namespace", default="iro-system", metavar="NS", help="namespace of the leader-election Lease")
    p.add_argument("--no-leader-elect", action="store_true", help="run without leader election (one replica only)")
    p.add_argument("--feedback-threshold", type=float, metavar="E",
                   help="track predicted vs measured node CPU utilization (metrics-server) and refit on drift above E")
    p.add_argument("--metrics-poll-s", type=float, metavar="S",
                   help=f"NodeMetrics poll period (default 30, at most {MAX_METRICS_POLL_S:g}; with --feedback-threshold)")
    p.add_argument("--fine-tune-registry", metavar="DIR",
                   help="on drift, also fine-tune the DQN policy (latest version in DIR, else the shipped one) on "
                        "--fine-tune-scenario and publish it to the policy registry DIR")
    p.add_argument("--fine-tune-scenario", metavar="NAME",
                   help="simulator scenario of the DQN fine-tune (default edge-iot; with --fine-tune-registry)")
    p.add_argument("--fine-tune-steps", type=int, metavar="N", help=f"decisions per DQN fine-tune, with --fine-tune-registry (default 256; at least one gradient update's: batch_size + n_step - 1 of the registry's latest policy, 66 for the shipped one; at most {MAX_TRAIN_STEPS:,})")
    p.add_argument("--round-request", metavar="DIR",
                   help="on drift, also write a federated round request into DIR/requests (for iro fed rounds)")
    p.add_argument("--metrics-port", type=_listen_port, metavar="P", help="serve Prometheus metrics (unschedulable queue; feedback error, drift) on P")
    p.add_argument("--metrics-host", metavar="ADDR",
                   help=f"address the --metrics-port server listens on (default {METRICS_HOST}; :: for IPv6)")
    p.add_argument("--cluster-config", metavar="F", help="domains (prices, carbon, PUE), latency, weights: YAML or JSON")
    _add_api_timeouts(p, "a bind, an Event, a pod status patch", "nodes, bound and pending pods")
    p.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    p.set_defaults(func=cmd_scheduler, service=True)

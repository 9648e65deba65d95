"""A warm ClientApp executor for a SuperNode in Flower's ``process`` isolation mode.

Flower 1.42 runs every message a SuperNode receives in a fresh ``flwr-clientapp`` process
(one task, one process, then exit). With the default ``subprocess`` isolation the SuperNode's
own SuperExec starts that process with ``subprocess.Popen``, so every round of every site
pays Python's start-up plus ``import flwr`` (~1.3 s), ``import torch`` (~1.5 s) and
``torch._dynamo`` (imported by the first optimizer, ~1.3 s) before any training starts.

With ``flower-supernode --isolation process`` the SuperNode starts no executor and waits
for one to connect to its Runtime API. This module is that executor: the same loop as
``flower-superexec`` (``AcquireTask`` on the SuperNode's Runtime API, then Flower's
``AutoExecPlugin`` builds the ``ExecutionSpec``), with one difference in how a task's
process is made: instead of ``exec``-ing ``flwr-clientapp``, it **forks** itself after
importing the heavy third-party modules once (:data:`PRELOAD`). The child runs Flower's own
ClientApp runtime (``flwr.supernode.runtime.run_clientapp``) with the task's token, exactly
what ``flwr-clientapp --token ...`` would run, and exits. So each message still runs in its
own, fresh process (same isolation, same Runtime API, the app installed from the run's FAB),
only without the imports.

The app's own packages (:data:`APP_PACKAGES`) are preloaded too, and warmed (:func:`warm_app`:
each site's scenario is built once, so the carbon-intensity files are parsed once). A child
keeps them only when the run's FAB, as Flower installed it under ``$FLWR_HOME/apps``, holds
byte-identical sources for every file of those packages (:func:`fab_matches`); otherwise (a
different app version, or the run's first task, before the FAB is installed) the child drops
them from ``sys.modules`` and imports the run's app code from the FAB like ``flwr-clientapp``.

Run one per SuperNode, next to it::

    flower-supernode --isolation process --port 9094 --superlink HOST:PORT ... &
    python -m iro_fed.federated.executor --runtime-api-address 127.0.0.1:9094 --insecure \
        --parent-pid <supernode pid>

``iro fed local`` does this for every node it starts (``LocalFederation(executor="warm")``).
The executor exits when its SuperNode (``--parent-pid``) exits or on SIGTERM/SIGINT; its
children also watch it (Flower's ``--parent-pid`` monitor) and stop with it.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib
import os
import signal
import sys
import threading
import time
from collections.abc import Iterable, Sequence
from logging import INFO, WARNING
from pathlib import Path
from typing import Any

#: Imported once by the executor, inherited by every forked ClientApp process (missing optional
#: ones are skipped). The app's own modules among them are used by a task only when its FAB
#: holds the same sources (see :data:`APP_PACKAGES`).
PRELOAD: tuple[str, ...] = (
    "numpy", "flwr.app", "flwr.clientapp", "flwr.supernode.runtime.run_clientapp",
    "torch", "torch.nn", "torch.optim", "torch._dynamo", "gymnasium",
    "iro_fed.federated.client_app", "iro_fed.federated.task", "iro_fed.sim.env", "iro_fed.sim.scenarios",
    "solvers.dqn.agent", "solvers.dqn.train", "codecarbon",
)

#: Top-level packages of the Flower app: kept for a task only if its FAB holds byte-identical
#: sources (:func:`fab_matches`), otherwise dropped so that the task imports them from its FAB.
APP_PACKAGES: tuple[str, ...] = ("iro_fed", "solvers", "edge_agent")

#: What the executor logs once it is ready (``iro fed local`` waits for it).
READY_LINE = "iro-fed warm executor: preloaded"

#: Logged for a task that runs with the warm app modules (its FAB holds the same sources).
WARM_TASK = "uses the warm app modules"

#: Seconds between ``AcquireTask`` polls of the local Runtime API (Flower's SuperExec: 1 s).
DEFAULT_POLL_S = 0.1


def preload(modules: Iterable[str]) -> dict[str, float]:
    """Import ``modules``; seconds per module that loaded (one that is not installed, or fails to
    import, is skipped: the ClientApps import it themselves)."""
    took: dict[str, float] = {}
    for name in modules:
        started = time.perf_counter()
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 - ImportError for optional ones; a broken app module is the app's problem
            continue
        took[name] = time.perf_counter() - started
    return took


def forget_app_modules(packages: Sequence[str] = APP_PACKAGES) -> list[str]:
    """Drop the app's packages from ``sys.modules`` (third-party modules stay); the names dropped."""
    dropped = [name for name in list(sys.modules) if name.split(".", 1)[0] in packages]
    for name in dropped:
        del sys.modules[name]
    return dropped


def warm_app() -> int:
    """Build every ``edge-iot`` site's scenario once (parses the carbon-intensity files into the
    simulator's cache, which forked ClientApps then share); the number of sites warmed."""
    from iro_fed.federated.task import EDGE_IOT_SITES, FedConfig, make_site_env

    cfg = FedConfig()
    for site in range(len(EDGE_IOT_SITES)):
        env = make_site_env(cfg.scenario, site, 0, 1.0, cfg.top_k)
        env.reset(seed=0)
        env.close()
    return len(EDGE_IOT_SITES)


def _py_files(root: Path) -> dict[str, Path]:
    return {str(p.relative_to(root)): p for p in root.rglob("*.py") if "__pycache__" not in p.parts}


def app_roots(packages: Sequence[str] = APP_PACKAGES) -> dict[str, Path]:
    """Folder of each loaded app package (``iro_fed`` -> ``.../iro_fed``)."""
    roots = {}
    for name in packages:
        module = sys.modules.get(name)
        paths = list(getattr(module, "__path__", []) or [])
        if module is not None and len(paths) == 1:
            roots[name] = Path(paths[0]).resolve()
    return roots


def snapshot(roots: dict[str, Path]) -> dict[str, dict[str, str]]:
    """SHA-256 of every ``.py`` file of each app package: what this process imported from."""
    return {name: {rel: hashlib.sha256(p.read_bytes()).hexdigest() for rel, p in _py_files(root).items()}
            for name, root in roots.items()}


def fab_dir(fab_hash: str | None, flwr_home: Path | None = None) -> Path | None:
    """Where Flower installed the FAB with this hash (``$FLWR_HOME/apps/<publisher>.<app>.<version>.<hash[:8]>``)."""
    if not fab_hash:
        return None
    from flwr.common.constant import FAB_HASH_TRUNCATION
    from flwr.supercore.utils import get_flwr_home

    home = Path(flwr_home) if flwr_home is not None else Path(get_flwr_home())
    found = sorted((home / "apps").glob(f"*.{fab_hash[:FAB_HASH_TRUNCATION]}"))
    return found[0] if len(found) == 1 and found[0].is_dir() else None


def fab_matches(installed: Path | None, sources: dict[str, dict[str, str]]) -> bool:
    """Whether the installed FAB holds exactly the ``.py`` files of :func:`snapshot` for every app package."""
    if installed is None or not sources:
        return False
    return snapshot({name: installed / name for name in sources}) == sources


def repoint_app_packages(roots: dict[str, Path], installed: Path) -> None:
    """Point the loaded app packages' ``__path__`` at the FAB, so any module not imported yet comes from it."""
    for name, module in list(sys.modules.items()):
        top = name.split(".", 1)[0]
        paths = getattr(module, "__path__", None)
        if top in roots and paths is not None and len(list(paths)) == 1:
            try:
                rel = Path(list(paths)[0]).resolve().relative_to(roots[top])
            except ValueError:
                continue
            module.__path__ = [str(installed / top / rel)]


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class ForkExecutor:
    """Flower's ``Executor`` protocol: each ClientApp task runs in a child forked from this process."""

    def __init__(self, roots: dict[str, Path] | None = None, sources: dict[str, dict[str, str]] | None = None) -> None:
        self.children: dict[int, int] = {}  # pid -> task id
        self.roots = dict(roots or {})  # the app packages this process holds warm ...
        self.sources = dict(sources or {})  # ... and the sources they were imported from
        self.matches: dict[str, Path] = {}  # FAB hash -> its folder, once it was found to hold the same sources
        self.kept = 0

    def get_eligible_capacity(self, supported_task_types: set[Any], *, insecure: bool = False,
                              root_certificates_path: str | None = None) -> tuple[set[Any], set[str]]:
        from flwr.supercore.constant import TaskType

        return {t for t in supported_task_types if t == TaskType.CLIENT_APP}, set()

    def wait_for_capacity(self, task_type: Any = None, *, fab_hash: str | None = None, insecure: bool = False,
                          root_certificates_path: str | None = None) -> None:
        return None

    def launch(self, spec: Any) -> Any:
        """Fork; the child runs Flower's ClientApp runtime for ``spec.token`` and exits with its status."""
        from flwr.supercore.constant import TaskType
        from flwr.supercore.superexec.executor import LaunchResult

        if spec.task_type != TaskType.CLIENT_APP:
            return LaunchResult.failed(f"this executor runs ClientApp tasks only, got {spec.task_type}")
        installed = self.warm_fab(spec.fab_hash)
        from flwr.supercore import log

        log(INFO, "iro-fed warm executor: task %d %s", spec.task_id,
            f"{WARM_TASK} ({installed})" if installed is not None else "imports the app from its FAB")
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:  # the child: never returns
            _run_task(spec, self.roots, installed)
        self.children[pid] = int(spec.task_id)
        self.kept += int(installed is not None)
        return LaunchResult.accepted()

    def warm_fab(self, fab_hash: str | None) -> Path | None:
        """The installed FAB's folder if its tasks may use the warm app modules (decided once per FAB)."""
        if not self.roots or not fab_hash:
            return None
        if fab_hash in self.matches:
            return self.matches[fab_hash]
        installed = fab_dir(fab_hash)  # None before the run's first task has installed it
        if installed is not None and fab_matches(installed, self.sources):
            self.matches[fab_hash] = installed
            return installed
        return None  # checked again for the next task (~10 ms): an install may have been in progress

    def reconcile(self) -> None:
        """Reap finished children."""
        for pid in list(self.children):
            try:
                done, _ = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                done = pid
            if done:
                self.children.pop(pid, None)

    def close(self) -> None:
        """Stop children still running (they would stop by themselves once this process is gone)."""
        for pid in list(self.children):
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + 5.0
        while self.children and time.monotonic() < deadline:
            self.reconcile()
            time.sleep(0.05)


#: Object-pull retry of a forked ClientApp: first retry after 20 ms (Flower: 1 s), at most 0.5 s apart (Flower: 10 s).
PULL_BACKOFF = {"initial_backoff": 0.02, "backoff_cap": 0.5}


def quick_object_pull_retry() -> bool:
    """Make Flower's object pulls in this process retry after 20 ms instead of 1 s; whether it applied.

    Flower announces a message before its content has arrived: a SuperNode creates the task
    before it has pulled the message's content from the SuperLink, and the SuperLink hands a
    reply to the ServerApp before the SuperNode has finished pushing the reply's content. A
    reader that asks early (a forked ClientApp within milliseconds, the ServerApp polling
    every 50-250 ms) finds the content not there yet, and Flower's pull then waits 1 s, 2 s,
    4 s ... before asking again. Only the keyword defaults ``initial_backoff`` / ``backoff_cap``
    of ``pull_objects`` and ``pull_and_inflate_object_from_tree`` change, and only in the process
    that calls this (a forked ClientApp, the ServerApp); if a Flower version renames them,
    nothing is changed.
    """
    from flwr.supercore.inflatable import inflatable_utils

    applied = False
    for fn in (inflatable_utils.pull_objects, inflatable_utils.pull_and_inflate_object_from_tree):
        defaults = fn.__kwdefaults__ or {}
        if set(PULL_BACKOFF) <= set(defaults):
            fn.__kwdefaults__ = {**defaults, **PULL_BACKOFF}
            applied = True
    return applied


def _run_task(spec: Any, roots: dict[str, Path], installed: Path | None) -> None:
    """In the forked child: exactly what ``flwr-clientapp --token ...`` runs, then ``os._exit``.

    With ``installed`` (a FAB holding the very sources of the warm app modules) those modules
    are kept, their packages pointed at the FAB; without it they are dropped first.
    """
    code = 1
    try:
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, signal.SIG_DFL)
        if installed is not None:
            repoint_app_packages(roots, installed)
        else:
            forget_app_modules()
        from flwr.supercore.tls import validate_and_resolve_root_certificates
        from flwr.supernode.runtime.run_clientapp import run_clientapp

        certificates = validate_and_resolve_root_certificates(spec.root_certificates_path, spec.insecure)
        quick_object_pull_retry()
        sys.argv = ["flwr-clientapp"]
        run_clientapp(
            runtime_api_address=spec.runtime_api_address, token=spec.token, insecure=spec.insecure,
            certificates=certificates, parent_pid=spec.parent_pid, runtime_dependency_install=spec.runtime_dependency_install,
        )
        code = 0
    except SystemExit as exc:  # run_clientapp ends with flwr_exit -> sys.exit(status)
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:  # noqa: BLE001 - report and leave the child, never return into the parent's loop
        import traceback

        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def serve(runtime_api_address: str, insecure: bool = True, root_certificates_path: str | None = None,
          parent_pid: int | None = None, poll_s: float = DEFAULT_POLL_S,
          modules: Sequence[str] = PRELOAD, warm: bool = True) -> None:
    """Preload, then acquire ClientApp tasks from the SuperNode's Runtime API and fork one child per task."""
    from flwr.common.constant import RUNTIME_DEPENDENCY_INSTALL
    from flwr.proto.runtime_pb2 import AcquireTaskRequest  # pylint: disable=E0611
    from flwr.supercore import log
    from flwr.supercore.interceptors import RuntimeVersionHttpInterceptor
    from flwr.supercore.retry import make_simple_http_retry_invoker
    from flwr.supercore.runtime import RuntimeHttpClient
    from flwr.supercore.superexec.plugin import AutoExecPlugin
    from flwr.supercore.tls import validate_and_resolve_root_certificates

    started = time.perf_counter()
    roots: dict[str, Path] = {}
    sources: dict[str, dict[str, str]] = {}
    if warm:  # the sources before and after importing them must agree (a checkout edited meanwhile: no)
        import iro_fed  # noqa: F401 - the package folders, to read the sources before importing the rest
        import solvers  # noqa: F401

        before = snapshot(app_roots())
    took = preload(modules)
    app_modules = [m for m in modules if m.split(".", 1)[0] in APP_PACKAGES]
    if warm and any(m not in took for m in app_modules):
        log(WARNING, "iro-fed warm executor: app modules %s did not import; tasks import the app from their FAB",
            sorted(m for m in app_modules if m not in took))
        warm = False
    if warm:
        try:
            warm_app()
            roots = app_roots()
            sources = snapshot(roots)
            if sources != {k: v for k, v in before.items() if k in sources}:
                roots, sources = {}, {}
        except Exception as exc:  # noqa: BLE001 - a warm-up problem only costs speed: run every task cold
            roots, sources = {}, {}
            log(WARNING, "iro-fed warm executor: app warm-up failed (%s: %s); tasks import the app from their FAB",
                type(exc).__name__, exc)
    if not roots:
        forget_app_modules()
    log(INFO, "%s %d modules in %.1f s (app kept warm for identical FABs: %s); pid %d", READY_LINE, len(took),
        time.perf_counter() - started, ", ".join(sorted(roots)) or "no", os.getpid())
    if threading.active_count() > 1:
        log(WARNING, "iro-fed warm executor: %d threads before forking", threading.active_count())

    def _stop(sig: int, _frame: Any) -> None:  # also breaks out of a Runtime API call that is retrying
        raise SystemExit(128 + sig)

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    executor = ForkExecutor(roots, sources)
    client = RuntimeHttpClient.from_server_address(
        server_address=runtime_api_address, insecure=insecure,
        root_certificates=validate_and_resolve_root_certificates(root_certificates_path, insecure),
        interceptors=[RuntimeVersionHttpInterceptor(component_name="SuperExec")],
        retry_invoker=make_simple_http_retry_invoker(),
    )
    plugin = AutoExecPlugin(runtime_api_address=runtime_api_address, insecure=insecure,
                            root_certificates_path=root_certificates_path,
                            runtime_dependency_install=RUNTIME_DEPENDENCY_INSTALL, executor=executor)
    try:
        while True:
            if parent_pid is not None and not _pid_alive(parent_pid):
                log(INFO, "iro-fed warm executor: SuperNode %d is gone, exiting", parent_pid)
                break
            executor.reconcile()
            types, fabs = executor.get_eligible_capacity(set(plugin.supported_task_types))
            res = client.AcquireTask(AcquireTaskRequest(supported_task_types=types, agentapp_fab_hashes=fabs))
            if res.HasField("task") and res.token:
                plugin.launch_task(token=res.token, task=res.task)
                continue  # another task may be waiting: ask again at once
            time.sleep(poll_s)
    finally:
        executor.close()
        client.close()


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m iro_fed.federated.executor", description=__doc__.split("\n")[0])
    ap.add_argument("--runtime-api-address", required=True, help="the SuperNode's Runtime API (HOST:PORT, its --port)")
    ap.add_argument("--insecure", action="store_true", help="plain HTTP to the Runtime API (the SuperNode's default)")
    ap.add_argument("--root-certificates", default=None, help="CA of the Runtime API's certificate (PEM)")
    ap.add_argument("--parent-pid", type=int, default=None, help="exit when this process (the SuperNode) exits")
    ap.add_argument("--no-warm-app", action="store_true",
                    help="never keep the app's own modules warm (every task imports them from its FAB)")
    ap.add_argument("--poll-interval", type=float, default=DEFAULT_POLL_S,
                    help=f"seconds between task polls (default {DEFAULT_POLL_S})")
    args = ap.parse_args(argv)
    if args.insecure == (args.root_certificates is not None):
        ap.error("give exactly one of --insecure and --root-certificates")
    if not 0.0 < args.poll_interval <= 60.0:
        ap.error(f"--poll-interval: expected a number in (0, 60], got {args.poll_interval}")
    serve(args.runtime_api_address, insecure=args.insecure, root_certificates_path=args.root_certificates,
          parent_pid=args.parent_pid, poll_s=args.poll_interval, warm=not args.no_warm_app)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

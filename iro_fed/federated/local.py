"""Real Flower processes on one machine: a SuperLink, N SuperNodes and ``flwr run``.

:class:`LocalFederation` is what ``iro fed local``, the loopback tests and the benchmark use:

* ``flower-superlink`` on 127.0.0.1 and a free port, state in memory;
* one ``flower-supernode`` per site, each with its own free port and ``--node-config "site=S"``
  (``sites``: 0, 1, 2, ... skipping the held-out evaluation site);
* ``executor="warm"`` (default): each SuperNode runs in Flower's ``process`` isolation mode with
  a warm ClientApp executor beside it (:mod:`iro_fed.federated.executor`: torch, flwr and the
  other heavy modules imported once, a fresh forked process per message); ``executor="flower"``
  keeps Flower's default (``subprocess`` isolation: a new ``flwr-clientapp`` process per message);
* a private ``FLWR_HOME`` whose ``config.toml`` names that SuperLink, ``FLWR_TELEMETRY_ENABLED=0``;
* ``flwr run <app> local --stream --run-config ...``, its output read line by line;
* on exit (normal, error or Ctrl-C) every process it started is stopped: each was started in
  its own session, so its process group (with the ServerApp / ClientApp subprocesses Flower
  spawns) is sent SIGTERM, then SIGKILL after a grace period.

TLS: give ``tls=TLSFiles(ca, cert, key)`` and the SuperLink serves HTTPS with them, SuperNodes
and ``flwr`` verify it with the CA (``--root-certificates`` / ``root-certificates``).
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from iro_fed.federated.executor import READY_LINE
from iro_fed.federated.procs import config_arg, find_flower_bin, free_port, signal_process
from iro_fed.federated.server_app import POLL_ENV, ROUND_TAG

#: Lines of `flwr run --stream` that mean the ServerApp failed (flwr run itself may still exit 0).
APP_FAILURES = ("An unhandled exception occurred in the ServerApp", "Exit Code: ")

#: The line of `flwr run` that names the run it started on the SuperLink.
RUN_STARTED = re.compile(r"Successfully started run (\d+)")

#: ClientApp executors: ``warm`` (ours, a forked process per message) or ``flower`` (Flower's SuperExec).
EXECUTORS = ("warm", "flower")


class FederationError(RuntimeError):
    """A Flower process that did not start, or a run that failed; the message says which and why."""


@dataclass(frozen=True)
class TLSFiles:
    """PEM files of a TLS SuperLink: the CA that signed it, its certificate and its key."""

    ca: Path
    cert: Path
    key: Path


def app_dir() -> Path:
    """The Flower app folder: the repository root holding ``pyproject.toml`` with ``[tool.flwr.app]``."""
    root = Path(__file__).resolve().parents[2]
    pyproject = root / "pyproject.toml"
    if not pyproject.is_file() or "[tool.flwr.app]" not in pyproject.read_text(encoding="utf-8"):
        raise FederationError(f"no Flower app at {root} (pyproject.toml with [tool.flwr.app]); run from a source "
                              "checkout of iro-fed (pip install -e .)")
    return root


def shared_data_dir() -> Path:
    """The simulator's data folder as this process resolves it (``$IRO_DATA_DIR`` or beside the repo)."""
    from iro_fed.sim.signals import data_dir

    return Path(data_dir()).resolve()


def flower_bin(name: str) -> str:
    """A Flower executable beside this interpreter (the venv), else on PATH."""
    found = find_flower_bin(name)
    if not found:
        raise FederationError(f"{name}: not found; install the 'fed' extra (pip install 'iro-fed[fed]')")
    return found


def run_config_arg(overrides: Mapping[str, Any]) -> str:
    return config_arg(overrides)


@dataclass
class LocalFederation:
    """A SuperLink and ``nodes`` SuperNodes on loopback; use as a context manager."""

    nodes: int
    workdir: Path | None = None
    tls: TLSFiles | None = None
    node_configs: Sequence[Mapping[str, Any]] | None = None
    supernode_auth: bool = False
    start_timeout: float = 60.0
    log: Callable[[str], None] | None = None
    executor: str = "warm"
    grid_poll_s: float | None = None
    """Fixed seconds between the ServerApp's reply pulls (``3`` = Flower's own); None: 50 ms backing off to 0.25 s."""
    procs: list[tuple[str, subprocess.Popen]] = field(default_factory=list)
    sites: Sequence[int] | None = None
    """Node ``i``'s ``site``; None: :func:`~iro_fed.federated.task.training_sites` of edge-iot with
    the default ``eval-site`` (4), i.e. 0, 1, 2, 3, 5, ...: no node trains on the held-out site."""

    def __post_init__(self) -> None:
        if self.nodes < 1:
            raise ValueError(f"nodes: expected >= 1, got {self.nodes}")
        if self.sites is None:
            from iro_fed.federated.task import FedConfig, training_sites

            self.sites = training_sites(FedConfig.scenario, FedConfig.eval_site, self.nodes)
        if len(self.sites) != self.nodes:
            raise ValueError(f"sites: expected one per node ({self.nodes}), got {len(self.sites)}")
        if self.supernode_auth and self.tls is None:
            raise ValueError("supernode_auth: SuperNode authentication needs TLS")
        if self.executor not in EXECUTORS:
            raise ValueError(f"executor: expected one of {', '.join(EXECUTORS)}, got {self.executor!r}")
        self.workdir = Path(self.workdir or tempfile.mkdtemp(prefix="iro-fed-"))
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.flwr_home = self.workdir / "flwr-home"
        self.flwr_home.mkdir(exist_ok=True)
        self.port = 0

    # -- environment ------------------------------------------------------------------------

    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update({"FLWR_HOME": str(self.flwr_home), "FLWR_TELEMETRY_ENABLED": "0", "PYTHONUNBUFFERED": "1",
                    "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"})
        # The apps run from a copy of the code under FLWR_HOME/apps: point them at the data sets.
        env.setdefault("IRO_DATA_DIR", str(shared_data_dir()))
        # SuperExec's task poll (default 1 s) adds to every round (the ServerApp's and, with executor="flower",
        # the ClientApps'); the SuperNode's own poll of the SuperLink is fixed at 3 s in flwr 1.42.
        env.setdefault("FLWR_SUPEREXEC_TASK_POLL_INTERVAL", "0.2")
        if self.grid_poll_s is not None:
            env[POLL_ENV] = repr(float(self.grid_poll_s))
        # Flower starts helpers (flower-superexec, flwr-serverapp, flwr-clientapp) by name from PATH.
        env["PATH"] = os.pathsep.join([str(Path(flower_bin("flwr")).parent), env.get("PATH", "")])
        return env

    def _spawn(self, name: str, argv: list[str], extra_env: Mapping[str, str] | None = None) -> subprocess.Popen:
        logf = open(self.workdir / f"{name}.log", "wb")  # noqa: SIM115 - kept open for the process's life
        proc = subprocess.Popen(argv, stdout=logf, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env={**self.env(), **(extra_env or {})}, cwd=str(self.workdir), start_new_session=True)
        logf.close()
        self.procs.append((name, proc))
        return proc

    def _tail(self, name: str, lines: int = 15) -> str:
        path = self.workdir / f"{name}.log"
        if not path.is_file():
            return ""
        return "\n".join(path.read_text(encoding="utf-8", errors="replace").splitlines()[-lines:])

    # -- start / stop -------------------------------------------------------------------------

    def start(self) -> LocalFederation:
        """Start the SuperLink, wait until it accepts connections, then the SuperNodes."""
        try:
            self._start()
        except BaseException:
            self.stop()
            raise
        return self

    def _start(self) -> None:
        from iro_fed.federated.cli import supernode_command  # the command ``iro fed node`` and the edge agent run

        self.port = free_port()
        argv = [flower_bin("flower-superlink"), "--host", "127.0.0.1", "--port", str(self.port),
                "--disable-runtime-dependency-installation"]
        argv += (["--ssl-ca-certfile", str(self.tls.ca), "--ssl-certfile", str(self.tls.cert),
                  "--ssl-keyfile", str(self.tls.key)] if self.tls else ["--insecure"])
        if self.supernode_auth:
            argv.append("--enable-supernode-auth")
        link = self._spawn("superlink", argv)
        self._wait_port(self.port, link, "superlink")
        self._write_connection()
        keys = self._register_node_keys() if self.supernode_auth else []
        warm = self.executor == "warm"
        runtime_ports: list[tuple[int, subprocess.Popen]] = []
        for i in range(self.nodes):
            config = self.node_config(i)
            runtime_port = free_port()
            node_argv = supernode_command(flower_bin("flower-supernode"), f"127.0.0.1:{self.port}", runtime_port,
                                          run_config_arg(config), str(self.tls.ca) if self.tls else None,
                                          str(keys[i]) if keys else None)
            if warm:
                node_argv += ["--isolation", "process"]
            runtime_ports.append((runtime_port, self._spawn(f"supernode-{i}", node_argv)))
        if warm:
            self._start_executors(runtime_ports)
        if self.log:
            self.log(f"SuperLink on 127.0.0.1:{self.port} ({'TLS' if self.tls else 'insecure'}), "
                     f"{self.nodes} SuperNode(s) ({self.executor} ClientApp executor), logs in {self.workdir}")

    def node_config(self, i: int) -> dict[str, Any]:
        """SuperNode ``i``'s ``--node-config``: its site (:attr:`sites`), then ``node_configs[i]``."""
        assert self.sites is not None  # set in __post_init__
        return {"site": int(self.sites[i]), **(dict(self.node_configs[i]) if self.node_configs else {})}

    @staticmethod
    def _app_path() -> dict[str, str]:
        """``PYTHONPATH`` with this checkout first, for our own entry points (installed or not)."""
        return {"PYTHONPATH": os.pathsep.join(p for p in (str(app_dir()), os.environ.get("PYTHONPATH", "")) if p)}

    def _start_executors(self, nodes: Sequence[tuple[int, subprocess.Popen]]) -> None:
        """One warm ClientApp executor per SuperNode, on its Runtime API (plain HTTP on loopback, as
        Flower's own SuperExec uses it); returns once every executor has preloaded its modules."""
        from iro_fed.federated.cli import executor_command

        executors = []
        for i, (runtime_port, node) in enumerate(nodes):
            self._wait_port(runtime_port, node, f"supernode-{i}")
            executors.append(self._spawn(f"executor-{i}", executor_command(runtime_port, node.pid), self._app_path()))
        deadline = time.monotonic() + max(self.start_timeout, 120.0)  # preloading torch on a busy machine
        for i, proc in enumerate(executors):
            name = f"executor-{i}"
            while READY_LINE not in self._tail(name, 200):
                if proc.poll() is not None:
                    raise FederationError(f"{name} exited with status {proc.returncode}:\n{self._tail(name)}")
                if time.monotonic() > deadline:
                    raise FederationError(f"{name} did not get ready in time:\n{self._tail(name)}")
                time.sleep(0.1)

    def _register_node_keys(self) -> list[Path]:
        """Make one key pair per SuperNode and register each public key with ``flwr supernode register``."""
        from iro_fed.federated.certs import make_node_key

        keys = []
        for i in range(self.nodes):
            pair = make_node_key(self.workdir / "node-keys", f"node{i}")
            done = subprocess.run([flower_bin("flwr"), "supernode", "register", str(pair["public"]), "local"],
                                  env=self.env(), cwd=str(self.workdir), capture_output=True, text=True,
                                  timeout=self.start_timeout)
            if done.returncode != 0:
                raise FederationError(f"flwr supernode register node{i} failed ({done.returncode}):\n"
                                      f"{done.stdout}{done.stderr}")
            keys.append(pair["private"])
        return keys

    def _wait_port(self, port: int, proc: subprocess.Popen, name: str) -> None:
        deadline = time.monotonic() + self.start_timeout
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise FederationError(f"{name} exited with status {proc.returncode}:\n{self._tail(name)}")
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                    return
            except OSError:
                time.sleep(0.2)
        raise FederationError(f"{name} did not listen on 127.0.0.1:{port} within {self.start_timeout:.0f} s:\n"
                              f"{self._tail(name)}")

    def _write_connection(self) -> None:
        lines = ["[superlink]", 'default = "local"', "", "[superlink.local]", f'address = "127.0.0.1:{self.port}"']
        lines += [f"root-certificates = {json.dumps(str(self.tls.ca))}"] if self.tls else ["insecure = true"]
        (self.flwr_home / "config.toml").write_text("\n".join(lines) + "\n", encoding="utf-8")

    def wait_for_nodes(self, count: int | None = None, timeout: float | None = None) -> None:
        """Return once ``count`` SuperNodes (default: all) are online at the SuperLink, as
        ``flwr supernode list`` reports them. A run whose ``min-nodes`` is below the node count
        would otherwise start round 1 with whichever nodes had joined by then."""
        want = self.nodes if count is None else count
        deadline = time.monotonic() + (self.start_timeout if timeout is None else timeout)
        online = -1
        while True:
            self.check_alive()
            done = subprocess.run([flower_bin("flwr"), "supernode", "list", "local", "--format", "json"],
                                  env=self.env(), cwd=str(self.workdir), capture_output=True, text=True,
                                  timeout=self.start_timeout, stdin=subprocess.DEVNULL)
            try:
                listed = json.loads(done.stdout).get("nodes", []) if done.returncode == 0 else None
            except (json.JSONDecodeError, AttributeError):
                listed = None
            if listed is not None:
                online = sum(1 for node in listed if isinstance(node, dict) and node.get("status") == "online")
                if online >= want:
                    return
            if time.monotonic() > deadline:
                seen = f"{online} online" if online >= 0 else f"no answer: {(done.stdout + done.stderr).strip()[-500:]}"
                raise FederationError(f"{want} SuperNode(s) did not join the SuperLink in time ({seen}):\n"
                                      f"{self._tail('superlink')}")
            time.sleep(0.5)

    def check_alive(self) -> None:
        for name, proc in self.procs:
            if proc.poll() is not None:
                raise FederationError(f"{name} exited with status {proc.returncode}:\n{self._tail(name)}")

    def stop(self, grace: float = 10.0) -> None:
        """Stop every process this object started and their descendants, then forget them.

        Flower detaches some helpers (``flower-superexec`` runs in a new session), so besides each
        process group, every descendant found in /proc before signalling is stopped too.

        A KeyboardInterrupt during the grace period (a second Ctrl-C, or ``iro fed local``'s
        SIGTERM handler) ends the wait, not the stop: every process is killed, then it is raised
        again. Every SIGKILL goes out before the first wait for a process to exit, so an
        interrupt among those waits leaves nothing running (before, one during the grace wait
        left the SuperLink and SuperNodes running).
        """
        descendants = _descendants([p.pid for _, p in self.procs])
        interrupted = False
        try:
            for _, proc in reversed(self.procs):
                if proc.poll() is None:
                    signal_process(proc.pid, signal.SIGTERM, group=True)
            for pid in descendants:
                signal_process(pid, signal.SIGTERM)
            deadline = time.monotonic() + grace
            while time.monotonic() < deadline and any(process_alive(pid) for pid in descendants):
                time.sleep(0.1)
            for _, proc in self.procs:
                try:
                    proc.wait(timeout=max(0.1, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    pass
        except KeyboardInterrupt:
            interrupted = True
        procs, self.procs = self.procs, []
        for _, proc in procs:
            signal_process(proc.pid, signal.SIGKILL, group=True)  # also children left in the group after the leader exited
        for pid in descendants:
            if process_alive(pid):
                signal_process(pid, signal.SIGKILL)
        for _, proc in procs:
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
        # SIGKILL is delivered asynchronously, and a descendant is not ours to wait for: poll, so
        # that nothing this object started still runs (or holds a port) when stop returns.
        until = time.monotonic() + 5.0
        while any(process_alive(pid) for pid in descendants) and time.monotonic() < until:
            time.sleep(0.02)
        if interrupted:
            raise KeyboardInterrupt

    def __enter__(self) -> LocalFederation:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    # -- running the app ----------------------------------------------------------------------

    def run(self, overrides: Mapping[str, Any], on_line: Callable[[str], None] | None = None,
            timeout: float = 1800.0) -> dict[str, Any]:
        """``flwr run`` the app with ``overrides`` (kebab-case keys); returns rounds and the output tail."""
        try:
            return flwr_run(app_dir(), "local", overrides, self.env(), self.workdir, on_line=on_line, timeout=timeout,
                            started=lambda proc: self.procs.append(("flwr-run", proc)))
        except FederationError as exc:
            raise FederationError(f"{exc}\n--- superlink ---\n{self._tail('superlink')}") from None


def flwr_run(app: Path, federation: str, overrides: Mapping[str, Any], env: Mapping[str, str], cwd: Path,
             on_line: Callable[[str], None] | None = None, timeout: float = 1800.0,
             started: Callable[[subprocess.Popen], None] | None = None,
             on_run_id: Callable[[int], None] | None = None) -> dict[str, Any]:
    """``flwr run APP FEDERATION --stream`` with ``overrides`` as ``--run-config``, output read line by line.

    Returns ``rounds`` (the ServerApp's per-round summaries), ``status``, ``wall_s`` and the output
    tail; raises :class:`FederationError` when ``flwr run`` fails, times out or the ServerApp
    reported a failure (``flwr run`` itself may exit 0 then). ``started`` gets the process (its
    own session) as soon as it runs, so a caller can stop it; ``on_run_id`` gets the SuperLink's
    run id as soon as ``flwr run`` names it (``result["run_id"]``), for a caller that stops the run.
    """
    argv = [flower_bin("flwr"), "run", str(app), federation, "--stream"]
    if overrides:
        argv += ["--run-config", run_config_arg(overrides)]
    rounds: list[dict[str, Any]] = []
    tail: list[str] = []
    crashed = False
    run_id: int | None = None
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                            env=dict(env), cwd=str(cwd), start_new_session=True, text=True, bufsize=1)
    if started is not None:
        started(proc)
    begun = time.monotonic()
    try:
        for line in _lines(proc, begun + timeout):
            tail = (tail + [line])[-40:]
            crashed = crashed or any(marker in line for marker in APP_FAILURES)
            if run_id is None and (m := RUN_STARTED.search(line)):
                run_id = int(m.group(1))
                if on_run_id is not None:
                    on_run_id(run_id)
            if ROUND_TAG in line:
                try:
                    rounds.append(json.loads(line.split(ROUND_TAG, 1)[1].strip()))
                except json.JSONDecodeError:
                    pass
            if on_line is not None:
                on_line(line)
        code = proc.wait(timeout=30)
    except subprocess.TimeoutExpired as exc:
        raise FederationError("flwr run did not exit after its output ended") from exc
    text = "\n".join(tail)
    if code != 0:
        raise FederationError(f"flwr run failed (status {code}):\n{text}")
    if crashed:  # flwr run exits 0 when the ServerApp raised: "status 0" read as a success
        raise FederationError(f"the ServerApp failed (flwr run exited 0):\n{text}")
    return {"rounds": rounds, "status": code, "wall_s": time.monotonic() - begun, "output": text, "run_id": run_id}


def check_superlink_connection(app: Path, name: str) -> Path:
    """Check that ``flwr run APP NAME`` will find the SuperLink connection ``name``, as flwr's CLI
    resolves it (``flwr.cli.flower_config.read_superlink_connection``): a ``[superlink.NAME]`` table
    of ``$FLWR_HOME/config.toml`` (default ``~/.flwr``), or a ``[tool.flwr.federations.NAME]`` of the
    app's pyproject.toml, which ``flwr run`` migrates there first. Returns the config file's path.

    Reads only: flwr's own reader writes a default config.toml where there is none, which names
    flwr's default connections (``local``, ``supergrid``), so those are what a missing file knows.
    Raises :class:`FederationError` naming the file and the connections it defines.
    """
    import tomllib

    from flwr.cli.constant import DEFAULT_FLOWER_CONFIG_TOML, FLOWER_CONFIG_FILE
    from flwr.cli.flower_config import parse_superlink_connection
    from flwr.supercore.utils import get_flwr_home

    path = get_flwr_home() / FLOWER_CONFIG_FILE
    missing = not path.exists()
    try:
        doc = tomllib.loads(DEFAULT_FLOWER_CONFIG_TOML if missing else path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise FederationError(f"cannot read the Flower configuration {str(path)!r}: {exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise FederationError(f"the Flower configuration {str(path)!r} is not valid TOML: {exc}") from None
    links = doc.get("superlink")
    known = {k: v for k, v in links.items() if isinstance(v, dict)} if isinstance(links, dict) else {}
    try:
        with open(app / "pyproject.toml", "rb") as fh:
            legacy = tomllib.load(fh).get("tool", {}).get("flwr", {}).get("federations", {})
    except (OSError, tomllib.TOMLDecodeError, AttributeError):
        legacy = {}  # flwr run reports an unreadable or malformed app itself
    if isinstance(legacy, dict) and isinstance(legacy.get(name), dict):
        return path
    if name not in known:
        if missing:
            raise FederationError(f"no SuperLink connection {name!r}: {str(path)!r} does not exist (FLWR_HOME names "
                                  "the folder of the operator's config.toml; without one, flwr knows only its "
                                  f"defaults: {', '.join(sorted(known))})")
        raise FederationError(f"no SuperLink connection {name!r} in {str(path)!r} (its [superlink.NAME] "
                              f"connections: {', '.join(sorted(known)) or 'none'})")
    try:
        parse_superlink_connection(known[name], name)
    except ValueError as exc:
        raise FederationError(f"[superlink.{name}] of {str(path)!r}: {exc}") from None
    return path


def flwr_stop(run_id: int, federation: str, env: Mapping[str, str], cwd: Path, timeout: float = 60.0) -> str | None:
    """Ask the SuperLink to stop run ``run_id`` (``flwr stop``): a run goes on on the SuperLink when
    the ``flwr run`` that started it is stopped. Returns None when it was stopped, else why not."""
    try:
        done = subprocess.run([flower_bin("flwr"), "stop", str(run_id), federation], capture_output=True, text=True,
                              env=dict(env), cwd=str(cwd), timeout=timeout, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return f"flwr stop {run_id}: no answer in {timeout:.0f} s"
    if done.returncode != 0:
        return f"flwr stop {run_id} failed (status {done.returncode}): {(done.stdout + done.stderr).strip()[-500:]}"
    return None


def _lines(proc: subprocess.Popen, deadline: float) -> Iterator[str]:
    assert proc.stdout is not None
    for line in proc.stdout:
        yield line.rstrip("\n")
        if time.monotonic() > deadline:
            signal_process(proc.pid, signal.SIGTERM, group=True)
            raise FederationError("flwr run: timed out")


def _descendants(roots: Sequence[int]) -> list[int]:
    """Live descendants of ``roots`` (children, grandchildren ...) from /proc, deepest last."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().split(")")[-1].split()
            except OSError:
                continue
            if fields[0] != "Z":
                children.setdefault(int(fields[1]), []).append(int(entry.name))
    out: list[int] = []
    todo = list(roots)
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in out:
                out.append(child)
                todo.append(child)
    return out


def process_alive(pid: int) -> bool:
    """Whether a process id still runs (zombies count as gone)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8") as fh:
            return fh.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False

"""Federated participation: the site's Flower SuperNode, supervised (or checked) by the agent.

``federated.mode: start``: :class:`SuperNodeSupervisor` runs ``flower-supernode`` (the command
``iro fed node`` runs, see :func:`supernode_argv`) as a child process

* in its own session / process group, with a private ``FLWR_HOME`` and ``FLWR_TELEMETRY_ENABLED=0``
  and a marker in its environment that every process it starts inherits (Flower's SuperExec and
  ClientApp processes), so none can be left behind, and (Linux) a parent-death signal: SIGTERM
  when the agent dies, ``kill -9`` included (see :func:`with_parent_death_signal`);
* with its output (Flower's log, and the ClientApp's) turned into the agent's JSON log lines
  (``logger`` ``edge_agent.supernode``); ``SuperNode ID: N`` marks it registered with the SuperLink;
* restarted after it exits, with exponential backoff (:class:`edge_agent.backoff.Backoff`; a run
  of ``restart_stable_s`` or more starts the backoff again from ``restart_initial_s``);
* stopped with the agent: SIGTERM to its process group, ``stop_timeout_s``, then SIGKILL to the
  group and to every process still carrying the marker. Leftovers of an agent that was killed with
  ``kill -9`` (same ``FLWR_HOME``) are stopped before the first start.

``federated.mode: connect``: a SuperNode run by someone else; the agent only checks that its
ClientAppIo (runtime API) port on 127.0.0.1 answers.

A registered SuperNode that loses the SuperLink (it went away, the network broke) keeps running
and retries on its own (Flower's ``Connection attempt failed, retrying in N seconds``); the agent
then reports it as not connected (state ``running``, ``superlink_lost_at``) until Flower says
``Connection successful after ...`` or the node registers again.

Either way the state is in ``/federation``, ``/healthz``, ``/readyz`` (as a degradation, never
as not-ready: the agent keeps serving with its last good policy) and the metrics
``iro_agent_supernode_up``, ``iro_agent_supernode_connected`` and ``iro_agent_supernode_restarts_total``.

The node config passes ``site``, ``emissions-country`` when ``federated.emissions_country`` is set
(the country whose grid mix codecarbon measures the site's training with) and, with an experience
store, ``experience-db=<store path>``:
the ClientApp then also trains on the agent's recorded decisions (:func:`policy_sample` makes
them at decision time in the policy's own observation format).
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from edge_agent.backoff import Backoff
from edge_agent.config import FederatedConfig
from edge_agent.logs import LOGGER_NAME, event
from edge_agent.store import PolicySample
from iro_fed.federated.emissions import NODE_CONFIG_KEY as EMISSIONS_KEY
from iro_fed.federated.procs import config_arg, find_flower_bin, free_port, signal_process

#: Environment variable set on the SuperNode; its value (the FLWR_HOME) is inherited by all it starts.
MARKER = "IRO_AGENT_SUPERNODE_OF"
#: Tag of the ClientApp's summary line (``IRO-FED-CLIENT {json}``) in the SuperNode's output.
CLIENT_TAG = "IRO-FED-CLIENT"
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_FLOWER_LINE = re.compile(r"^(DEBUG|INFO|WARNING|ERROR|CRITICAL)\s*:\s*(.*)$")
_NODE_ID = re.compile(r"SuperNode ID: (\d+)")
#: Flower's retry messages (flwr.supercore.retry): the SuperLink is unreachable / reachable again.
_LINK_LOST = "Connection attempt failed"
_LINK_BACK = "Connection successful after"
# Runs before the SuperNode (and the warm executor): asks Linux to SIGTERM it when the agent's
# thread that started it dies (the agent killed with kill -9 included; the setting survives the
# exec), and gives up if the agent is already gone. Without it a SuperNode in its own session
# outlived a killed agent for good (registered as the site beside the next agent's) unless a later
# agent reused its FLWR_HOME.
_PDEATHSIG = ("import ctypes, os, signal, sys\n"
              "if ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGTERM), 0, 0, 0) != 0:\n"  # PR_SET_PDEATHSIG
              "    sys.exit('prctl(PR_SET_PDEATHSIG) failed: ' + os.strerror(ctypes.get_errno()))\n"
              "if os.getppid() != int(sys.argv[1]):\n"
              "    sys.exit('the edge agent exited before its supernode started')\n"
              "os.execv(sys.argv[2], sys.argv[2:])\n")


def with_parent_death_signal(argv: list[str]) -> list[str]:
    """``argv`` run so that the process gets SIGTERM when this (agent) process dies (Linux; else as is)."""
    if not sys.platform.startswith("linux"):
        return argv
    return [sys.executable, "-c", _PDEATHSIG, str(os.getpid()), *argv]


_LEVELS = {"DEBUG": logging.DEBUG, "INFO": logging.INFO, "WARNING": logging.WARNING, "ERROR": logging.ERROR,
           "CRITICAL": logging.CRITICAL}


def node_config_arg(fed: FederatedConfig, experience_db: Path | None) -> str:
    """The ``--node-config`` text: ``site``, ``experience-db`` (when given), ``emissions-country`` (when
    set), then the extra entries."""
    entries: dict[str, Any] = {"site": fed.site}
    if experience_db is not None:
        entries["experience-db"] = str(experience_db)
    if fed.emissions_country:
        entries[EMISSIONS_KEY] = fed.emissions_country
    entries.update(fed.node_config)
    return config_arg(entries)


def supernode_argv(fed: FederatedConfig, port: int, experience_db: Path | None = None) -> list[str]:
    """The ``flower-supernode`` command of ``iro fed node`` for these settings (built by the same function)."""
    exe = find_flower_bin("flower-supernode")
    if exe is None:
        raise FileNotFoundError("flower-supernode: not found; install the 'fed' extra (pip install 'iro-fed[fed]')")
    from iro_fed.federated.cli import supernode_command

    argv = supernode_command(exe, fed.superlink, port, node_config_arg(fed, experience_db),
                             None if fed.root_certificates is None else str(Path(fed.root_certificates).resolve()),
                             None if fed.auth_key is None else str(Path(fed.auth_key).resolve()))
    return argv + (["--isolation", "process"] if fed.executor == "warm" else [])


def port_open(port: int, host: str = "127.0.0.1", timeout: float = 0.5) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def marked_processes(marker_value: str) -> list[int]:
    """Live processes (not zombies) whose environment holds ``MARKER=marker_value`` (Linux /proc)."""
    needle = f"{MARKER}={marker_value}".encode()
    found = []
    me = os.getpid()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == me:
            continue
        try:
            if needle not in (entry / "environ").read_bytes().split(b"\0"):
                continue
            state = (entry / "stat").read_text().rsplit(")", 1)[-1].split()[0]
        except OSError:
            continue
        if state != "Z":
            found.append(int(entry.name))
    return found


class SuperNodeSupervisor:
    """Runs (mode ``start``) or watches (mode ``connect``) the site's SuperNode; ``start()``, then ``stop()``."""

    def __init__(self, fed: FederatedConfig, metrics: Any, store_path: Path | None = None,
                 logger: logging.Logger | None = None) -> None:
        self.fed = fed
        self.metrics = metrics
        self.log = logger or logging.getLogger(LOGGER_NAME)
        self.child_log = logging.getLogger(f"{LOGGER_NAME}.supernode")
        self.experience_db = Path(store_path).resolve() if (store_path is not None and fed.experience) else None
        self._temp_home = fed.flwr_home is None and store_path is None  # made at start(), removed at stop()
        self.flwr_home: Path | None = None
        if fed.flwr_home is not None:
            self.flwr_home = Path(fed.flwr_home).resolve()
        elif store_path is not None:
            self.flwr_home = Path(store_path).resolve().parent / "flwr-home"
        self.stopping = threading.Event()
        self._lock = threading.Lock()
        self.proc: subprocess.Popen | None = None
        self.executor: subprocess.Popen | None = None  # the warm ClientApp executor beside the SuperNode
        self.executor_starts = 0
        self._thread: threading.Thread | None = None
        self._reader: threading.Thread | None = None
        self.state = "stopped"
        self.port = fed.clientappio_port
        self.node_id: str | None = None
        self.link_lost_at: float | None = None  # when the SuperNode last failed to reach the SuperLink
        self.restarts = 0
        self.starts = 0
        self.last_exit: dict[str, Any] | None = None
        self.next_start_at: float | None = None
        self.started_at: float | None = None
        self.last_client: dict[str, Any] | None = None  # the ClientApp's last summary line
        self.client_rounds = 0
        self.reaped_on_start: list[int] = []

    # --- status -----------------------------------------------------------------------------

    @property
    def up(self) -> bool:
        return self.state in ("running", "connected")

    def status(self) -> dict[str, Any]:
        """What ``/federation`` and ``/healthz`` report."""
        with self._lock:
            proc = self.proc
            doc: dict[str, Any] = {
                "mode": self.fed.mode, "state": self.state, "up": self.up, "superlink": self.fed.superlink or None,
                "site": self.fed.site, "clientappio": f"127.0.0.1:{self.port}" if self.port else None,
                "node_id": self.node_id, "connected": self.state == "connected",
                "superlink_lost_at": self.link_lost_at,
                "restarts": self.restarts, "last_exit": self.last_exit,
                "experience_db": str(self.experience_db) if self.experience_db else None,
                "client_rounds": self.client_rounds, "last_client_round": self.last_client,
            }
            if self.fed.mode == "start":
                doc["pid"] = proc.pid if proc is not None and proc.poll() is None else None
                ex = self.executor
                doc["executor"] = {"kind": self.fed.executor, "starts": self.executor_starts,
                                   "pid": ex.pid if ex is not None and ex.poll() is None else None}
                doc["flwr_home"] = str(self.flwr_home) if self.flwr_home else None
                doc["restart_in_s"] = (round(max(self.next_start_at - time.monotonic(), 0.0), 3)
                                       if self.next_start_at is not None else None)
                doc["up_since"] = self.started_at if self.up else None
        return doc

    def degradation(self, st: dict[str, Any] | None = None) -> str | None:
        """A line for ``/readyz``'s ``degraded`` list while the SuperNode is not fully there (None when it is);
        ``st``: a :meth:`status` already taken (the line then matches it)."""
        if self.fed.mode == "connect":
            return None if self.up else f"supernode not reachable on 127.0.0.1:{self.port} (federated.mode connect)"
        st = st if st is not None else self.status()
        if st["state"] == "connected":
            return None
        if st["state"] == "running":
            if st["node_id"] is not None and st["superlink_lost_at"] is not None:
                return f"supernode lost the superlink {self.fed.superlink} (it keeps retrying)"
            return f"supernode not registered with the superlink {self.fed.superlink} yet (it keeps retrying)"
        if st["restart_in_s"] is not None:
            last = st["last_exit"] or {}
            how = (f"signal {last['signal']}" if last.get("signal") else
                   f"exit code {last.get('code')}" if last.get("code") is not None else last.get("error", "failed"))
            return f"supernode down ({how}): restarting in {st['restart_in_s']} s"
        return f"supernode {st['state']}"

    def _set(self, state: str) -> None:
        with self._lock:
            self.state = state
        self.metrics.supernode_up.set(1 if self.up else 0)
        self.metrics.supernode_connected.set(1 if state == "connected" else 0)

    # --- start / stop -----------------------------------------------------------------------

    @property
    def marker(self) -> str:
        return str(self.flwr_home)

    def start(self) -> None:
        if self.flwr_home is None and self.fed.mode == "start":
            self.flwr_home = Path(tempfile.mkdtemp(prefix="iro-agent-flwr-"))
        target = self._run_start if self.fed.mode == "start" else self._run_connect
        self.metrics.supernode_up.set(0)
        self.metrics.supernode_connected.set(0)
        self._thread = threading.Thread(target=target, name="supernode", daemon=True)
        self._thread.start()

    def stop(self, timeout: float | None = None) -> None:
        """Stop the child (SIGTERM, wait, SIGKILL) and everything it started; idempotent."""
        self.stopping.set()
        if self._thread is not None:
            self._thread.join((timeout if timeout is not None else self.fed.stop_timeout_s) + 15.0)
        self._terminate(timeout if timeout is not None else self.fed.stop_timeout_s)
        self._set("stopped")
        if self._temp_home and self.flwr_home is not None:
            shutil.rmtree(self.flwr_home, ignore_errors=True)

    # --- mode connect ------------------------------------------------------------------------

    def _run_connect(self) -> None:
        self._set("starting")
        was_up: bool | None = None
        while not self.stopping.is_set():
            ok = port_open(self.port)
            if ok != was_up:
                event(self.log, logging.INFO if ok else logging.WARNING,
                      "supernode reachable" if ok else "supernode not reachable", clientappio=f"127.0.0.1:{self.port}")
                was_up = ok
            self._set("running" if ok else "down")
            self.stopping.wait(self.fed.check_interval_s)

    # --- mode start --------------------------------------------------------------------------

    def _env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update({"FLWR_HOME": str(self.flwr_home), "FLWR_TELEMETRY_ENABLED": "0", "PYTHONUNBUFFERED": "1",
                    MARKER: self.marker})
        # The ClientApp runs from a copy of the app under FLWR_HOME: point it at the simulator's data.
        try:
            from iro_fed.sim.signals import data_dir

            env.setdefault("IRO_DATA_DIR", str(Path(data_dir()).resolve()))
        except ImportError:
            pass
        exe = find_flower_bin("flower-supernode")
        if exe:  # Flower starts flower-superexec and flwr-clientapp by name
            env["PATH"] = os.pathsep.join([str(Path(exe).parent), env.get("PATH", "")])
        return env

    def _reap_leftovers(self) -> None:
        """Stop SuperNode processes of an earlier agent on this FLWR_HOME (it was killed with kill -9)."""
        left = marked_processes(self.marker)
        if not left:
            return
        event(self.log, logging.WARNING, "stopping supernode processes left by an earlier agent", pids=left)
        for pid in left:
            signal_process(pid, signal.SIGTERM)
        deadline = time.monotonic() + 5.0
        while time.monotonic() < deadline and marked_processes(self.marker):
            time.sleep(0.1)
        for pid in marked_processes(self.marker):
            signal_process(pid, signal.SIGKILL)
        self.reaped_on_start = left

    def _popen(self, argv: list[str], env: dict[str, str]) -> subprocess.Popen:
        """``argv`` in FLWR_HOME, in its own session, its output piped to :meth:`_read_output`, and
        stopped with the agent (:func:`with_parent_death_signal`)."""
        return subprocess.Popen(with_parent_death_signal(argv), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, env=env, cwd=str(self.flwr_home), start_new_session=True)

    def _spawn(self) -> subprocess.Popen:
        self.port = self.fed.clientappio_port or free_port()
        argv = supernode_argv(self.fed, self.port, self.experience_db)
        assert self.flwr_home is not None
        self.flwr_home.mkdir(parents=True, exist_ok=True)
        proc = self._popen(argv, self._env())
        with self._lock:
            self.proc = proc
            self.node_id = None
            self.link_lost_at = None
            self.starts += 1
            self.next_start_at = None
        self._reader = threading.Thread(target=self._read_output, args=(proc,), name="supernode-output", daemon=True)
        self._reader.start()
        event(self.log, logging.INFO, "supernode started", pid=proc.pid, superlink=self.fed.superlink,
              clientappio=f"127.0.0.1:{self.port}", site=self.fed.site, start=self.starts,
              experience_db=str(self.experience_db) if self.experience_db else None)
        return proc

    def _spawn_executor(self, node: subprocess.Popen) -> None:
        """Start (or restart) the warm ClientApp executor on the SuperNode's Runtime API: the
        command ``iro fed node`` runs; its ClientApps' output is read like the SuperNode's."""
        from iro_fed.federated.cli import executor_command

        old = self.executor
        if old is not None:
            event(self.log, logging.WARNING, "clientapp executor exited: restarting", exit_code=old.returncode,
                  pid=old.pid)
        env = self._env()
        app_root = str(Path(__file__).resolve().parents[1])  # the checkout holding iro_fed and solvers
        env["PYTHONPATH"] = os.pathsep.join(p for p in (app_root, env.get("PYTHONPATH", "")) if p)
        try:
            ex = self._popen(executor_command(self.port, node.pid), env)
        except OSError as exc:
            event(self.log, logging.WARNING, "could not start the clientapp executor", error=str(exc))
            return
        with self._lock:
            self.executor = ex
            self.executor_starts += 1
        threading.Thread(target=self._read_output, args=(ex,), name="executor-output", daemon=True).start()
        event(self.log, logging.INFO, "clientapp executor started", pid=ex.pid, clientappio=f"127.0.0.1:{self.port}")

    def _run_start(self) -> None:
        backoff = Backoff(self.fed.restart_initial_s, self.fed.restart_max_s)
        try:
            self._reap_leftovers()
        except OSError as exc:
            event(self.log, logging.WARNING, "could not look for leftover supernode processes", error=str(exc))
        while not self.stopping.is_set():
            self._set("starting")
            try:
                proc = self._spawn()
            except OSError as exc:  # binary gone, cannot fork...: retry like an exit
                code: int | None = None
                error = f"{type(exc).__name__}: {exc}"
                ran = 0.0
            else:
                began = time.monotonic()
                with self._lock:
                    self.started_at = time.time()
                next_executor = 0.0
                while proc.poll() is None and not self.stopping.wait(min(self.fed.check_interval_s, 0.2)):
                    if self.state == "starting" and port_open(self.port, timeout=0.2):
                        self._set("running")
                    if (self.fed.executor == "warm" and self.state in ("running", "connected")
                            and time.monotonic() >= next_executor and (self.executor is None or self.executor.poll() is not None)):
                        self._spawn_executor(proc)
                        next_executor = time.monotonic() + 2.0  # not more often if it keeps dying
                    if self.node_id is not None and self.link_lost_at is None and self.state == "running":
                        self._set("connected")
                if self.stopping.is_set():
                    return
                code, error, ran = proc.returncode, None, time.monotonic() - began
                self._terminate(grace=1.0)  # what it left in its group (SuperExec, ClientApps)
            if ran >= self.fed.restart_stable_s:
                backoff.reset()
            delay = backoff.next_delay()
            with self._lock:
                self.last_exit = {"code": code, "signal": -code if code is not None and code < 0 else None,
                                  "ran_s": round(ran, 3), "at": time.time(), **({"error": error} if error else {})}
                self.restarts += 1
                self.next_start_at = time.monotonic() + delay
            self.metrics.supernode_restarts.inc()
            self._set("backoff")
            event(self.log, logging.WARNING, "supernode exited: restarting", exit_code=code, ran_s=round(ran, 3),
                  retry_in_s=round(delay, 3), failures=backoff.failures, error=error)
            self.stopping.wait(delay)

    def _marked(self) -> list[int]:
        """Processes started by this agent's SuperNodes (the marker is inherited), in mode start."""
        if self.fed.mode != "start" or self.flwr_home is None:
            return []
        return marked_processes(self.marker)

    def _terminate(self, grace: float) -> None:
        """SIGTERM the child's group and marked processes, wait ``grace`` s, then SIGKILL what is left."""
        with self._lock:
            proc, ex = self.proc, self.executor
            self.executor = None
        if ex is not None and ex.poll() is None:
            signal_process(ex.pid, signal.SIGTERM, group=True)  # it also carries the marker: the sweep below finds its children
        marked = self._marked()
        if proc is None and not marked:
            return
        if proc is not None:
            signal_process(proc.pid, signal.SIGTERM, group=True)
        for pid in marked:
            signal_process(pid, signal.SIGTERM)
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline:
            alive = (proc is not None and proc.poll() is None) or bool(self._marked())
            if not alive:
                break
            time.sleep(0.05)
        if proc is not None:
            signal_process(proc.pid, signal.SIGKILL, group=True)  # also members left after the leader exited
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
        for pid in self._marked():
            signal_process(pid, signal.SIGKILL)
        if ex is not None:
            try:
                ex.wait(timeout=5)  # reaped: no zombie left behind
            except subprocess.TimeoutExpired:
                signal_process(ex.pid, signal.SIGKILL, group=True)
        if self._reader is not None:
            self._reader.join(2.0)
        if proc is not None and proc.poll() is not None:
            with self._lock:
                if self.proc is proc:
                    self.proc = None  # its group is gone: never signal that process group id again
            if self.stopping.is_set():
                event(self.log, logging.INFO, "supernode stopped", pid=proc.pid, exit_code=proc.returncode)

    # --- the child's output ------------------------------------------------------------------

    def _read_output(self, proc: subprocess.Popen) -> None:
        assert proc.stdout is not None
        level = logging.INFO
        for raw in proc.stdout:
            line = _ANSI.sub("", raw.decode("utf-8", errors="replace")).rstrip()
            if not line:
                level = logging.INFO  # a blank line ends a multi-line message
                continue
            try:
                level = self._handle_line(line, proc.pid, level)
            except Exception as exc:  # never stop reading: a pipe nobody drains blocks the child once full
                level = logging.INFO
                event(self.log, logging.WARNING, "supernode output line not handled", pid=proc.pid,
                      error=f"{type(exc).__name__}: {exc}", line=line[:500])
        proc.stdout.close()

    def _handle_line(self, line: str, pid: int, level: int = logging.INFO) -> int:
        """Log one output line; returns its level (the next line without a level prefix, e.g. the
        rest of Flower's multi-line exit message or a traceback, keeps it)."""
        msg = line
        m = _FLOWER_LINE.match(line)
        if m:
            level, msg = _LEVELS[m.group(1)], m.group(2).strip()
        if CLIENT_TAG in msg:
            try:
                doc = json.loads(msg.split(CLIENT_TAG, 1)[1].strip())
            except ValueError:
                doc = None
            if isinstance(doc, Mapping):
                with self._lock:
                    self.last_client = {**doc, "at": time.time()}
                    self.client_rounds += 1
                self.metrics.federated_rounds.inc()
                samples = doc.get("experience-samples")
                if isinstance(samples, int | float):
                    self.metrics.federated_experience_samples.set(samples)
                # Its keys go in as fields, never as event()'s own arguments ("pid", "msg", "level").
                self.child_log.info("clientapp round", extra={"fields": {**doc, "pid": pid}})
                return logging.INFO
        node = _NODE_ID.search(msg)
        if node:
            with self._lock:
                self.node_id = node.group(1)
                self.link_lost_at = None
            event(self.log, logging.INFO, "supernode registered with the superlink", node_id=node.group(1), pid=pid,
                  superlink=self.fed.superlink)
            if self.state == "running":
                self._set("connected")
        elif _LINK_LOST in msg and level >= logging.WARNING:  # (its DEBUG twin repeats the same failure)
            with self._lock:
                lost = self.link_lost_at is None and self.node_id is not None
                if self.link_lost_at is None:
                    self.link_lost_at = time.time()
            if lost:
                event(self.log, logging.WARNING, "supernode lost the superlink (it keeps retrying)",
                      node_id=self.node_id, pid=pid, superlink=self.fed.superlink)
            if self.state == "connected":
                self._set("running")
        elif _LINK_BACK in msg:
            with self._lock:
                back = self.link_lost_at is not None and self.node_id is not None
                self.link_lost_at = None
            if back:
                event(self.log, logging.INFO, "supernode reached the superlink again", node_id=self.node_id, pid=pid,
                      superlink=self.fed.superlink)
            if self.state == "running" and self.node_id is not None:
                self._set("connected")
        self.child_log.log(level, msg, extra={"fields": {"pid": pid, "source": "supernode"}})
        return level


def policy_sample(rec: Any, k: int) -> PolicySample | None:
    """The decision of ``rec`` (a :class:`edge_agent.recommend.Recommendation`) as a sample for the
    federated DQN: an observation in its format (:mod:`iro_fed.features`, ``k`` candidate slots
    and the defer slot, context as the ``dqn`` solver sets it), the slot of the node the agent
    chose (its top-1) and the simulator env's reward for it, ``(delta_R * W - w_unplaced) / w_unplaced``.

    The candidates are the policy's own: the ``k`` feasible nodes of best marginal R
    (:func:`iro_fed.features.observation`). When the agent's ranker (a configured solver such as
    ``kube-default``) chose a node outside them, the last of those ``k`` gives its slot to the
    chosen node (the set ordered the same way), so the sample still shows a choice the policy can
    score: off-policy data, as Q-learning allows. None when nothing was chosen.
    """
    from iro_fed.features import (
        CONTEXT_FEATURES,
        candidate_features,
        context_features,
        observation,
        order_candidates,
        preselect,
    )

    if not rec.top:
        return None
    state = rec.state
    context = {"deferrable": 0.0}  # the agent places now (as the dqn solver ranks)
    chosen = int(rec.top[0][0])
    obs, slots = observation(state, 0, k, defer_action=True, context=context)
    hits = [i for i, n in enumerate(slots.tolist()) if n == chosen]
    if not hits:
        nodes, _, num_feasible = preselect(state, 0, k)
        nodes, gains = order_candidates(state, 0, np.append(nodes[: k - 1], chosen))
        ctx = context_features(state, 0, num_feasible, nodes.size, k, context)
        mask = np.zeros(k + 1, dtype=np.int8)
        mask[: nodes.size] = 1
        mask[k] = 1 if ctx[CONTEXT_FEATURES.index("deferrable")] > 0 else 0
        obs = {"candidates": candidate_features(state, 0, nodes, gains, k), "context": ctx, "mask": mask}
        hits = [i for i, n in enumerate(nodes.tolist()) if n == chosen]
    p = rec.problem
    w_unplaced = float(p.weights.unplaced) or 1.0
    reward = (float(rec.deltas[0]) * p.num_workloads - w_unplaced) / w_unplaced
    return PolicySample(obs, hits[0], reward)

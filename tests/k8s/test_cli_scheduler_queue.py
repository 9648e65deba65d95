"""``iro scheduler``'s unschedulable-queue flags and their Prometheus metrics.

The flags (``--pod-initial-backoff-s``, ``--pod-max-backoff-s``, ``--max-unschedulable-s``) did
not exist: the queue ran with kube's defaults whatever the operator wanted, and nothing showed it.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
import urllib.request

import pytest

from iro_fed.cli import build_parser, main
from iro_fed.federated.procs import free_port
from iro_fed.k8s.cli import QueueCollector, build_scheduler
from iro_fed.k8s.testing import make_node, make_pod


def scheduler_args(*argv: str):
    return build_parser().parse_args(["scheduler", *argv])


def test_queue_flags_reach_the_scheduler(kubeconfig):
    sched = build_scheduler(scheduler_args("--kubeconfig", kubeconfig, "--pod-initial-backoff-s", "2",
                                           "--pod-max-backoff-s", "5", "--max-unschedulable-s", "60")).scheduler
    assert (sched.pod_initial_backoff_s, sched.pod_max_backoff_s, sched.max_unschedulable_s) == (2.0, 5.0, 60.0)
    assert [sched.backoff_s(a) for a in (1, 2, 3, 4)] == [2.0, 4.0, 5.0, 5.0]  # doubled, capped at the max


def test_queue_flags_default_to_kube_schedulers(kubeconfig):
    parts = build_scheduler(scheduler_args("--kubeconfig", kubeconfig))
    sched = parts.scheduler
    assert (sched.pod_initial_backoff_s, sched.pod_max_backoff_s, sched.max_unschedulable_s) == (1.0, 10.0, 300.0)
    assert parts.registry is None  # no --metrics-port: no registry, nothing collected


def test_metrics_buckets_follow_the_backoff_steps(kubeconfig):
    parts = build_scheduler(scheduler_args("--kubeconfig", kubeconfig, "--metrics-port", "9999"))
    assert parts.registry is not None
    assert QueueCollector(parts.scheduler).bounds == [1.0, 2.0, 4.0, 8.0, 10.0]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--pod-initial-backoff-s", "0"], "--pod-initial-backoff-s: must be > 0 and finite, at most 3600, got 0"),
        (["--pod-initial-backoff-s", "nan"], "--pod-initial-backoff-s: must be > 0 and finite, at most 3600, got nan"),
        (["--pod-max-backoff-s", "inf"], "--pod-max-backoff-s: must be > 0 and finite, at most 3600, got inf"),
        (["--pod-max-backoff-s", "-1"], "--pod-max-backoff-s: must be > 0 and finite, at most 3600, got -1"),
        (["--pod-initial-backoff-s", "5", "--pod-max-backoff-s", "2"],
         "--pod-max-backoff-s: must be >= --pod-initial-backoff-s (5), got 2"),
        # The default maximum (10) is below an initial backoff of 20: the maximum is the flag to fix.
        (["--pod-initial-backoff-s", "20"], "--pod-max-backoff-s: must be >= --pod-initial-backoff-s (20), got 10"),
        (["--max-unschedulable-s", "0"], "--max-unschedulable-s: must be > 0 and finite, at most 86400, got 0"),
        (["--max-unschedulable-s", "1e10"], "--max-unschedulable-s: must be > 0 and finite, at most 86400, got 1e+10"),
    ],
)
def test_bad_queue_values_exit_2_naming_the_flag(argv, message, capsys, monkeypatch):
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    # Checked before the cluster is needed: no --kubeconfig, yet the flag is what is reported.
    assert main(["scheduler", *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and "--kubeconfig" not in err, err


def scrape(port: int) -> str:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
            return r.read().decode()
    except OSError:
        return ""  # not listening yet


def test_the_queue_is_exported_on_the_metrics_port(api, kubeconfig):
    api.add_node(make_node("n1", cpu="1"))
    api.add_pod(make_pod("big", cpu="4", scheduler="iro"))  # fits nowhere: 4 cpus on a 1-cpu node
    port = free_port()
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    proc = subprocess.Popen([sys.executable, "-m", "iro_fed.cli", "scheduler", "--name", "iro", "--kubeconfig", kubeconfig,
                             "--window-s", "0.1", "--solver", "best-fit", "--no-leader-elect", "--metrics-port", str(port),
                             "--pod-initial-backoff-s", "2", "--pod-max-backoff-s", "3"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    text = ""
    try:
        deadline = time.monotonic() + 60
        while "iro_scheduler_unschedulable_pods 1.0" not in text and time.monotonic() < deadline:
            assert proc.poll() is None, proc.communicate()
            text = scrape(port)
            time.sleep(0.1)
    finally:
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=20)
    assert proc.returncode == 0, err
    assert "iro_scheduler_unschedulable_pods 1.0" in text, text
    # One bucket per backoff step of these flags (2 s, then 3 s at most), and the pod in it.
    buckets = re.findall(r'^iro_scheduler_pod_backoff_seconds_bucket\{le="([^"]+)"\} (\S+)$', text, re.M)
    assert [le for le, _ in buckets] == ["2.0", "3.0", "+Inf"], text
    assert buckets[-1][1] == "1.0"
    gsum = float(re.search(r"^iro_scheduler_pod_backoff_seconds_gsum (\S+)$", text, re.M).group(1))
    assert gsum in (2.0, 3.0)  # its first attempt's backoff, or the second's if the node came after it
    assert "unschedulable queue" in out and "backoff 2 s doubling to 3 s" in out

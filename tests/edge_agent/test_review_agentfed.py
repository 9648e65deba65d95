"""Review of the agent's federation and policy parts (findings):

* the restart / retry backoff raised OverflowError after about 1024 consecutive failures
  (``2.0 ** 1024``), which ended the SuperNode supervisor thread and the agent's dependency loops
  for good (a registry missing for a day at 60 s steps never got read again);
* one output line of the SuperNode that its handler could not take (``IRO-FED-CLIENT`` JSON with a
  ``pid`` / ``msg`` key) ended the thread that drains the child's stdout pipe: the child then
  blocks for good once the pipe is full;
* a ``latest`` pointer that is not UTF-8 escaped ``poll()`` as a UnicodeDecodeError instead of a
  PolicyLoadError, so ``last_error`` (what /readyz and the fallback reason say) was not set.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest

import edge_agent
from edge_agent.backoff import Backoff
from edge_agent.config import FederatedConfig
from edge_agent.federation import SuperNodeSupervisor
from edge_agent.policy import PolicyLoadError, RegistryPolicySource
from tests.edge_agent.test_policy import publish


def test_backoff_stays_capped_after_thousands_of_failures() -> None:
    backoff = Backoff(1.0, 60.0, seed=1)
    delays = [backoff.next_delay() for _ in range(3000)]
    assert backoff.failures == 3000
    assert all(54.0 <= d <= 60.0 for d in delays[10:])  # the cap, with its 10 % jitter below it
    backoff.reset()
    assert backoff.next_delay() == pytest.approx(1.0, rel=0.11)


def test_an_unhandled_output_line_does_not_stop_draining_the_child(tmp_path: Path) -> None:
    """A child prints a ClientApp line whose keys clash with the log call's arguments, then 1 MiB
    (far more than a pipe holds): the reader logs the bad line, keeps reading, and the child ends."""
    from edge_agent.metrics import AgentMetrics

    metrics = AgentMetrics("n", "s")
    metrics.add_federated()
    sup = SuperNodeSupervisor(FederatedConfig(enabled=True, superlink="127.0.0.1:9", insecure=True,
                                              flwr_home=tmp_path / "home"), metrics)
    records: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = records.append  # type: ignore[method-assign]
    sup.log = logging.getLogger("test_review_agentfed")
    sup.log.addHandler(handler)
    sup.child_log = sup.log
    sup.log.propagate = False
    sup.log.setLevel(logging.DEBUG)
    script = ("import sys\n"
              "print('IRO-FED-CLIENT {\"pid\": 1, \"msg\": \"x\", \"round\": 3}', flush=True)\n"
              "for i in range(16384): sys.stdout.write('INFO :      line %05d %s\\n' % (i, 'x' * 48))\n"
              "print('IRO-FED-CLIENT {\"round\": 4, \"experience-samples\": 7}', flush=True)\n")
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        sup._read_output(proc)  # raised TypeError at the first line and left the rest unread
        assert proc.wait(60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        sup.log.removeHandler(handler)
    rounds = [r for r in records if r.getMessage() == "clientapp round"]
    assert [r.fields["round"] for r in rounds] == [3, 4]  # type: ignore[attr-defined]
    assert rounds[0].fields["pid"] == proc.pid and rounds[0].fields["msg"] == "x"  # type: ignore[attr-defined]
    assert sup.client_rounds == 2
    assert sum(1 for r in records if r.getMessage().startswith("line ")) == 16384


def test_a_latest_pointer_that_is_not_utf8_keeps_the_last_good_policy(tmp_path: Path) -> None:
    reg = tmp_path / "policies"
    publish(reg, "v0001", {"solver": "best-fit", "params": {"seed": 3}})
    src = RegistryPolicySource(reg)
    assert src.poll() is True
    (reg / "latest").write_bytes(b"\xffv0002\n")
    with pytest.raises(PolicyLoadError, match="latest: cannot read"):
        src.poll()
    assert src.current is not None and src.current.version == "v0001"
    assert src.last_error is not None and "utf-8" in src.last_error


AGENT = """
import sys, time
sys.path.insert(0, sys.argv[3])  # the edge_agent package of the test's own process
from pathlib import Path
from edge_agent.config import FederatedConfig
from edge_agent.federation import SuperNodeSupervisor
from edge_agent.metrics import AgentMetrics

metrics = AgentMetrics("n", "s")
metrics.add_federated()
sup = SuperNodeSupervisor(FederatedConfig(enabled=True, superlink=sys.argv[1], insecure=True, clientappio_port=0,
                                          executor="flower", flwr_home=Path(sys.argv[2])), metrics)
sup.start()
while sup.state != "running":
    time.sleep(0.05)
print(sup.status()["pid"], flush=True)
time.sleep(600)
"""


def test_a_supernode_does_not_outlive_an_agent_killed_with_sigkill(tmp_path: Path) -> None:
    """An agent (a real process supervising a real flower-supernode) is killed with kill -9: its
    SuperNode, in its own session, used to run on for good (still registered as the site)."""
    from edge_agent.federation import marked_processes
    from iro_fed.federated.procs import find_flower_bin, free_port
    from iro_fed.testing import wait_for

    if find_flower_bin("flower-supernode") is None:
        pytest.skip("needs the fed extra")
    home = tmp_path / "home"
    repo = Path(__file__).resolve().parents[2]
    agent = subprocess.Popen([sys.executable, "-c", AGENT, f"127.0.0.1:{free_port()}", str(home),
                              str(Path(edge_agent.__file__).resolve().parents[1])], cwd=repo,
                             stdout=subprocess.PIPE, env={**os.environ, "FLWR_TELEMETRY_ENABLED": "0"})
    try:
        assert agent.stdout is not None
        node = int(agent.stdout.readline())  # the SuperNode runs and answers on its port
        assert node in marked_processes(str(home))
        agent.kill()
        agent.wait(10)
        wait_for(lambda: not marked_processes(str(home)), timeout=30.0, what="the SuperNode to exit",
                 interval=0.1)
    finally:
        if agent.poll() is None:
            agent.kill()
            agent.wait()
        for pid in marked_processes(str(home)):
            os.kill(pid, 9)

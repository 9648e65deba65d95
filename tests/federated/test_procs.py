"""Process helpers shared by ``iro fed`` and the edge agent, which must import without Flower."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import tomllib

from iro_fed.federated.procs import free_port, signal_process, toml_value


def test_toml_values_read_back_as_toml():
    values = {"a": True, "b": 3, "c": 0.25, "d": 'say "hi"\\n', "e": "x y"}
    text = "\n".join(f"{k} = {toml_value(v)}" for k, v in values.items())
    assert tomllib.loads(text) == values


def test_free_port_can_be_bound_on_loopback():
    port = free_port()
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", port))


def test_signalling_a_process_that_is_gone_is_not_an_error():
    proc = subprocess.Popen([sys.executable, "-c", "pass"], start_new_session=True)
    proc.wait()
    signal_process(proc.pid, signal.SIGTERM)
    signal_process(proc.pid, signal.SIGKILL, group=True)


def test_the_agents_supervisor_imports_without_flower():
    # A site runs the agent without the 'fed' extra: make `import flwr` fail and import it.
    code = ("import sys; sys.modules['flwr'] = None\n"
            "import edge_agent.federation, edge_agent.agent, iro_fed.federated.procs\n"
            "assert not any(m == 'flwr' or m.startswith('flwr.') for m, v in sys.modules.items() if v is not None)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr

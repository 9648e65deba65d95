"""Process helpers shared by ``iro fed`` and the edge agent, which must import without Flower."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import tomllib

import pytest

from iro_fed.federated.procs import config_arg, free_port, signal_process, toml_value

# Values a store path, a site name or an operator's node_config entry may hold.
HOSTILE = ['/var/lib/iro "edge"/exp.db', "it's", """both ' and " """, "C:\\data\\", 'end\\"', "\\u0022",
           "a b=c,d e=f", "k='v'", "café €  😀 中文", "", "tab\tin", "new\nline\r", "nul\x00del\x7f", "x.toml",
           "=", "'", '"', "\\", "  lead and trail  ", "\u00a0\u2028"]


def test_toml_values_read_back_as_toml():
    values = {"a": True, "b": 3, "c": 0.25, "d": 'say "hi"\\n', "e": "x y"}
    text = "\n".join(f"{k} = {toml_value(v)}" for k, v in values.items())
    assert tomllib.loads(text) == values


@pytest.mark.parametrize("value", HOSTILE)
def test_flowers_own_parser_reads_each_value_back_exactly(value):
    # Review finding: 'a"b' was written "a\"b", which Flower's --node-config pattern cuts at the
    # escaped quote: the SuperNode refused its config (or, among other pairs, read a wrong value).
    config = pytest.importorskip("flwr.common.config")
    text = config_arg({"experience-db": value, "site": "edge-madrid"})
    assert config.parse_config_args([text]) == {"experience-db": value, "site": "edge-madrid"}
    assert tomllib.loads(f"v = {toml_value(value)}")["v"] == value  # and it is TOML


def test_all_values_together_and_the_other_types_read_back():
    config = pytest.importorskip("flwr.common.config")
    entries = {f"k{i}": v for i, v in enumerate(HOSTILE)} | {"n": -(2**63), "f": 0.1, "big": 1e300, "on": True,
                                                              "off": False, "nested.key": "x y"}
    assert config.parse_config_args([config_arg(entries)]) == entries


@pytest.mark.parametrize(("entries", "message"), [
    ({"store": "bad \udc80 surrogate"}, "store: .* not valid Unicode"),
    ({"count": 2**63}, "count: 9223372036854775808 is outside the 64-bit integers"),
    ({"a key": "v"}, "'a key': a config key is letters"),
    ({"k=v": "v"}, "'k=v': a config key"),
])
def test_what_flower_cannot_carry_is_refused_naming_the_key(entries, message):
    with pytest.raises(ValueError, match=message):
        config_arg(entries)


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

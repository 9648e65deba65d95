"""Every help text of ``iro`` and ``edge-agent`` formats; a missing optional package gives an
install hint, not a traceback; ``import solvers`` does not load the Kubernetes adapter."""

from __future__ import annotations

import argparse
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import solvers
from edge_agent.cli import build_parser as agent_parser
from edge_agent.cli import main as agent_main
from iro_fed.cli import build_parser as iro_parser
from iro_fed.cli import main as iro_main

PROMETHEUS_HINT = "edge-agent needs prometheus-client: pip install 'iro-fed[agent]'"
EXAMPLE_PROBLEM = Path(__file__).resolve().parents[1] / "examples" / "problems" / "edge-cloud-gpu.yaml"


def _parsers(parser: argparse.ArgumentParser) -> Iterator[argparse.ArgumentParser]:
    """``parser`` and every subparser under it, at any depth (``iro fed local``, ...)."""
    yield parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                yield from _parsers(sub)


@pytest.mark.parametrize("build", [iro_parser, agent_parser], ids=["iro", "edge-agent"])
def test_every_help_text_formats(build):
    progs = []
    for parser in _parsers(build()):
        assert parser.format_help()  # a bare "%" in a help string raised TypeError (iro replay --help)
        progs.append(parser.prog)
    assert len(progs) > 3  # the walk reached the subcommands


def test_replay_help_shows_the_percent_signs(capsys):
    with pytest.raises(SystemExit) as stop:
        iro_main(["replay", "--help"])
    assert stop.value.code == 0
    assert "unallocated GPU % at 100 %" in " ".join(capsys.readouterr().out.split())


# --- dimod installed without dwave-samplers ---------------------------------------------------


@pytest.fixture
def no_dwave(monkeypatch):
    """As if dwave-samplers were not installed: ``find_spec("dwave.samplers")`` imports the
    parent ``dwave``, which is missing (None in sys.modules: ModuleNotFoundError)."""
    monkeypatch.delitem(sys.modules, "dwave.samplers", raising=False)
    monkeypatch.setitem(sys.modules, "dwave", None)


def test_available_without_dwave_samplers(no_dwave):
    assert not solvers.registered()["qubo"].properties.installed()
    names = solvers.available()
    assert "qubo" not in names and "best-fit" in names


def test_solvers_command_without_dwave_samplers(no_dwave, capsys):
    assert iro_main(["solvers"]) == 0
    assert "pip install 'iro-fed[qubo]'" in capsys.readouterr().out


def test_compare_without_dwave_samplers(no_dwave, tmp_path, capsys):
    assert iro_main(["compare", str(EXAMPLE_PROBLEM), "--solvers", "best-fit,qubo"]) == 0
    assert "'iro-fed[qubo]')" in capsys.readouterr().out  # the qubo row's error cell


# --- edge-agent without prometheus-client ----------------------------------------------------


@pytest.mark.parametrize("command", ["check", "run"])
def test_edge_agent_without_prometheus_client(command, tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "prometheus_client", None)  # import raises ModuleNotFoundError
    store = tmp_path / "exp.db"
    config = tmp_path / "agent.yaml"
    config.write_text(
        f"problem: {EXAMPLE_PROBLEM}\nsite: edge-munich\nlisten: {{host: 127.0.0.1, port: 0}}\n"
        f"store: {{path: {store}}}\n"
    )
    assert agent_main([command, "--config", str(config)]) == 2
    err = capsys.readouterr().err
    assert f"edge-agent {command}: error: {PROMETHEUS_HINT}" in err
    assert not store.exists()  # nothing half-made


# --- layering -------------------------------------------------------------------------------


def test_import_solvers_loads_no_kubernetes_adapter():
    code = (
        "import sys, solvers\n"
        "solvers.registered()\n"
        "loaded = sorted(m for m in sys.modules if m == 'iro_fed.k8s' or m.startswith('iro_fed.k8s.'))\n"
        "print(','.join(loaded))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=Path(__file__).resolve().parents[1],
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == ""


def test_topology_names_importable_from_snapshot_and_shared():
    from iro_fed import feasibility
    from iro_fed.k8s import snapshot
    from solvers import kube_default

    for name in ("ZONE_LABELS", "REGION_LABELS", "topology_label"):
        assert getattr(snapshot, name) is getattr(feasibility, name) is getattr(kube_default, name)
    labels = {"topology.kubernetes.io/zone": "b", "failure-domain.beta.kubernetes.io/zone": "a"}
    assert feasibility.topology_label(labels, feasibility.ZONE_LABELS) == "a"  # GetZoneKey: beta first
    assert snapshot.node_domain({"topology.kubernetes.io/region": "r"}) == "r"

"""Tidies with no change of behaviour: every solver takes the typical tasks (a no-op by default), the store
removes its own files, one emissions formatter, and `iro fed local` / `iro fed rounds` share their option code."""

from __future__ import annotations

import argparse

import pytest

import solvers
from iro_fed.fragmentation import typical_tasks
from iro_fed.traces.openb import OpenbNode, OpenbPod, build_problem


def _tasks():
    nodes = [OpenbNode(f"n{i}", 64000, 262144, 4, "T4") for i in range(2)]
    return typical_tasks(build_problem(nodes, [OpenbPod(f"o{i}", 2000, 4096, 1, 250) for i in range(4)]))


def test_every_solver_takes_typical_tasks():
    for name, cls in solvers.registered().items():
        assert callable(getattr(cls, "use_typical_tasks", None)), name


def test_the_base_default_keeps_nothing():
    solver = solvers.make("greedy-objective")
    before = dict(vars(solver))
    assert solver.use_typical_tasks(_tasks()) is None
    assert vars(solver) == before


@pytest.mark.parametrize(("composite", "settings", "inner"), [
    ("fallback", {"primary": "fgd", "fallback": "first-fit"}, "_primary"),
    ("time-budget", {"solver": "fgd", "then": "none"}, "_inner"),
])
def test_a_composite_hands_the_tasks_to_its_solvers(composite, settings, inner):
    solver = solvers.make(composite, **settings)
    tasks = _tasks()
    solver.use_typical_tasks(tasks)  # its other solver (first-fit, or none) takes them too, as a no-op
    assert getattr(solver, inner).given_tasks is tasks


def test_remove_store_files_takes_the_wal_and_shm_files_too(tmp_path):
    from edge_agent.store import ExperienceStore, remove_store_files

    path = tmp_path / "exp.db"
    ExperienceStore(path).close()
    for suffix in ("-wal", "-shm"):
        (tmp_path / f"exp.db{suffix}").write_bytes(b"")
    (tmp_path / "other.db").write_bytes(b"")
    remove_store_files(path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["other.db"]
    remove_store_files(path)  # nothing there: no error


def test_one_emissions_formatter(load_benchmark):
    from iro_fed.federated.cli import format_grams

    assert format_grams(None) == "-" and format_grams(0.12345) == "0.123"
    bench = load_benchmark("federated", "m3_federated_bench")
    assert not hasattr(bench, "_grams")


def _args(**values):
    base = {"rounds": None, "strategy": None, "local_steps": None, "carbon_aware": False, "registry": None,
            "fresh": False}
    return argparse.Namespace(**{**base, **values})


@pytest.mark.parametrize(("values", "given"), [
    ({}, []),
    ({"rounds": 2, "local_steps": 0, "carbon_aware": True}, ["num-server-rounds", "local-steps", "carbon-aware"]),
    ({"registry": "r", "fresh": True, "strategy": "krum"}, ["registry", "strategy", "resume"]),
])
def test_options_given_reads_each_setting_option(values, given):
    from iro_fed.federated.cli import OPTION_SETTINGS, options_given

    assert sorted(options_given(_args(**values), OPTION_SETTINGS)) == sorted(given)


def test_rounds_option_default_and_check():
    from iro_fed.cli import UsageError
    from iro_fed.federated.cli import DEFAULT_ROUNDS, rounds_option

    assert rounds_option(_args()) == DEFAULT_ROUNDS
    assert rounds_option(_args(rounds=5)) == 5
    with pytest.raises(UsageError, match="--rounds"):
        rounds_option(_args(rounds=0))

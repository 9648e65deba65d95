"""Errors of keys set by an environment variable name the variable in every check (also those run
once all settings are read); an unknown IRO_AGENT_* variable is an error, as an unknown key is;
recommend.solver_params without recommend.solver are logged as not used."""

from __future__ import annotations

from pathlib import Path

import pytest

from edge_agent.config import ConfigError, load_config

PROBLEM = Path(__file__).resolve().parents[2] / "examples" / "problems" / "edge-cloud-gpu.yaml"


def _errors(path: Path | None, env: dict[str, str]) -> dict[str, str]:
    with pytest.raises(ConfigError) as info:
        load_config(path, env=env)
    return dict(info.value.errors)


@pytest.mark.parametrize(
    ("var", "value", "key"),
    [
        ("IRO_AGENT_PROMETHEUS_URL", "ftp://x", "prometheus.url"),  # the client's checks
        ("IRO_AGENT_STORE_PATH", "/etc/passwd", "store.path"),  # _check_paths
        ("IRO_AGENT_SOLVER", "nosuch", "recommend.solver"),  # _check_solvers
        ("IRO_AGENT_SUPERLINK", "no-port", "federated.superlink"),  # _check_federated
    ],
)
def test_checks_after_reading_name_the_variable(tmp_path, var, value, key) -> None:
    """Old code: 'prometheus.url: ...' with no word of IRO_AGENT_PROMETHEUS_URL."""
    env = {"IRO_AGENT_PROBLEM": str(PROBLEM), var: value}
    if var == "IRO_AGENT_SUPERLINK":
        env |= {"IRO_AGENT_FEDERATED_ENABLED": "true", "IRO_AGENT_FEDERATED_MODE": "connect"}
    errors = _errors(None, env)
    assert f"{key} (from {var})" in errors, errors
    assert key not in errors


def test_a_key_from_the_file_is_named_plainly(tmp_path) -> None:
    path = tmp_path / "agent.yaml"
    path.write_text(f"problem: {PROBLEM}\nprometheus: {{url: 'ftp://x'}}\n")
    assert "prometheus.url" in _errors(path, {})


def test_an_unknown_agent_variable_is_an_error_with_the_closest_name(tmp_path) -> None:
    """Old code: IRO_AGENT_PROMETHEUS=... was ignored; the agent ran without Prometheus."""
    errors = _errors(None, {"IRO_AGENT_PROBLEM": str(PROBLEM), "IRO_AGENT_PROMETHEUS": "http://127.0.0.1:9090"})
    assert "did you mean IRO_AGENT_PROMETHEUS_URL?" in errors["IRO_AGENT_PROMETHEUS"], errors
    # The SuperNode marker its children inherit is no setting and no error; other variables are not ours.
    cfg = load_config(None, env={"IRO_AGENT_PROBLEM": str(PROBLEM), "IRO_AGENT_SUPERNODE_OF": "/tmp/x", "IRO_X": "1"})
    assert cfg.problem == PROBLEM


def test_solver_params_without_a_solver_are_not_used_and_logged(write_config, caplog) -> None:
    """The rule: solver_params are recommend.solver's only; emptied solver (here by the variable
    that a DaemonSet sets) is no error, but the unused parameters are logged, not dropped silently."""
    import logging

    from edge_agent.agent import Agent

    cfg = load_config(write_config(), env={"IRO_AGENT_SOLVER": ""})
    assert cfg.recommend.solver == "" and cfg.recommend.solver_params == {"seed": 0}
    with caplog.at_level(logging.WARNING, logger="edge_agent"):
        agent = Agent(cfg)
    assert agent.solver is None
    [record] = [r for r in caplog.records if "solver_params not used" in r.getMessage()]
    assert record.fields["solver"] == "recommend.solver (from IRO_AGENT_SOLVER)"
    assert record.fields["solver_params"] == ["seed"]

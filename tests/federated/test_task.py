"""The typed run config, the site envs, weight exchange, the policy registry and the in-process server loop."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("gymnasium")

from iro_fed.federated.registry import PolicyRegistry, RegistryError  # noqa: E402
from iro_fed.federated.task import (  # noqa: E402
    FedConfig,
    FedConfigError,
    WeightLayout,
    build_agent,
    get_weights,
    make_site_env,
    pack_weights,
    set_weights,
)

ROOT = Path(__file__).resolve().parents[2]
TINY = dict(local_steps=80, hours=1.0, learning_starts=32, batch_size=16, track_emissions=False, min_nodes=2,
            embed_dim=16, hidden_dim=32)


def test_pyproject_config_is_the_typed_default() -> None:
    with open(ROOT / "pyproject.toml", "rb") as fh:
        app = tomllib.load(fh)["tool"]["flwr"]["app"]
    assert app["components"] == {"serverapp": "iro_fed.federated.server_app:app",
                                 "clientapp": "iro_fed.federated.client_app:app"}
    cfg = FedConfig.from_run_config(app["config"])
    assert cfg == FedConfig()
    assert all("_" not in k for k in app["config"])  # kebab-case keys


def test_run_config_errors_name_the_key() -> None:
    with pytest.raises(FedConfigError, match="unknown federated setting.*local_steps"):
        FedConfig.from_run_config({"local_steps": 10})
    with pytest.raises(FedConfigError, match="local-steps: expected int"):
        FedConfig.from_run_config({"local-steps": "ten"})
    with pytest.raises(FedConfigError, match="strategy: unknown 'median'"):
        FedConfig.from_run_config({"strategy": "median"})
    with pytest.raises(FedConfigError, match="trim-beta"):
        FedConfig.from_run_config({"trim-beta": 0.7})
    with pytest.raises(FedConfigError, match="DQN setting: attention_heads"):
        FedConfig.from_run_config({"embed-dim": 30, "attention-heads": 4})
    assert FedConfig.from_run_config({"hours": 2}).hours == 2.0  # TOML ints are fine for float keys


def test_site_env_gives_the_dqn_dict_observation() -> None:
    from iro_fed.features import CANDIDATE_FEATURES, CONTEXT_FEATURES

    env = make_site_env("edge-iot", 1, seed=3, hours=1.0, k=8)
    obs, _ = env.reset(seed=3)
    assert obs["candidates"].shape == (8, len(CANDIDATE_FEATURES))
    assert obs["context"].shape == (len(CONTEXT_FEATURES),)
    assert obs["mask"].shape == (9,) and obs["mask"][:8].any()
    assert env.observation_space.contains(obs)
    steps, total = 0, 0.0
    done = False
    while not done:
        valid = np.flatnonzero(obs["mask"])
        obs, r, term, trunc, info = env.step(int(valid[0]))
        total += r
        steps += 1
        done = term or trunc
    assert steps > 5 and np.isfinite(total) and "totals" in info
    with pytest.raises(FedConfigError, match="scenario"):
        make_site_env("bank", 0, 0)


def test_weights_round_trip_and_shape_errors() -> None:
    cfg = FedConfig(**TINY)
    a, b = build_agent(cfg, seed=1), build_agent(cfg, seed=2)
    wa = get_weights(a.online)
    assert not any(k.endswith(("eps_in", "eps_out")) for k in wa)  # noise samples are not exchanged
    set_weights(b.online, wa)
    for k, v in get_weights(b.online).items():
        np.testing.assert_array_equal(v, wa[k])
    bad = dict(wa)
    key = next(k for k, v in bad.items() if v.ndim >= 2)
    bad[key] = bad[key].reshape(-1)
    with pytest.raises(ValueError, match=key.replace(".", r"\.")):
        set_weights(b.online, bad)
    with pytest.raises(ValueError, match="missing"):
        set_weights(b.online, {k: v for k, v in wa.items() if k != key})



def test_flat_weights_round_trip_through_the_layout() -> None:
    cfg = FedConfig(**TINY)
    a, b = build_agent(cfg, seed=1), build_agent(cfg, seed=2)
    wa = get_weights(a.online)
    flat, layout = pack_weights(wa)
    assert flat.ndim == 1 and flat.dtype == np.float32 and flat.size == sum(v.size for v in wa.values())
    again = WeightLayout.from_json(layout.to_json().encode())
    assert again == layout and again.names == list(wa)
    set_weights(b.online, again.unflatten(flat))
    for k, v in get_weights(b.online).items():
        np.testing.assert_array_equal(v, wa[k])
    last = layout.names[-1]
    assert layout.locate(flat.size - 1) == last and layout.locate(0) == layout.names[0]
    with pytest.raises(ValueError, match=r"layout needs"):
        layout.unflatten(flat[:-1])
    key = next(k for k, v in wa.items() if v.ndim >= 2)
    transposed = {k: (v.T if k == key else v) for k, v in wa.items()}
    with pytest.raises(ValueError, match=r"shape of '" + key.replace(".", r"\.")):
        layout.flatten(transposed)


@pytest.mark.parametrize("text, message", [
    ("{", "not JSON"), ("{}", "expected a list"), ('[["a", [2], "float32"], ["a", [1], "float32"]]', "repeated"),
    ('[["a", [-1], "float32"]]', "entry 0"), ('[["a", [2], "nonsense"]]', "unknown dtype"), (b"\xff", "UTF-8"),
    (3, "expected JSON text"),
])
def test_malformed_layouts_are_errors_saying_what(text, message) -> None:
    with pytest.raises(ValueError, match=message):
        WeightLayout.from_json(text)


def test_client_replies_in_the_format_it_was_sent() -> None:
    """Flat in, flat out (the deployed format); one array per layer in, the same out (previous release)."""
    pytest.importorskip("flwr")
    from flwr.app import ConfigRecord, RecordDict

    from iro_fed.federated import wire
    from iro_fed.federated.inprocess import InProcessGrid

    cfg = FedConfig(**{**TINY, "local_steps": 20})
    weights = get_weights(build_agent(cfg).online)
    grid = InProcessGrid([{"site": 0}], cfg.to_run_config())
    flat, layout = wire.encode(weights)
    for arrays, config in ((flat, wire.layout_config(layout, **{"server-round": 1})),
                           (wire.per_layer_record(weights), ConfigRecord({"server-round": 1}))):
        msg = grid.create_message(RecordDict({"arrays": arrays, "config": config}), "train", 1, "1")
        (reply,) = grid.send_and_receive([msg])
        assert not reply.has_error(), reply.error
        got, got_layout = wire.read_weights(reply.content)
        assert list(got) == list(weights) and all(got[k].shape == v.shape for k, v in weights.items())
        if config is not None and "layout" in config:
            assert got_layout == layout and list(reply.content.array_records["arrays"].keys()) == ["weights"]
        else:
            assert got_layout is None and len(reply.content.array_records["arrays"]) == len(weights)

def test_registry_layout_is_what_the_dqn_solver_loads(tmp_path) -> None:
    from iro_fed.problem_io import load_problem
    from solvers.dqn.solver import DQNSolver, resolve_policy

    pytest.importorskip("flwr")
    from iro_fed.federated.inprocess import InProcessGrid
    from iro_fed.federated.server_app import run_federation

    reg = tmp_path / "policies"
    cfg = FedConfig(num_server_rounds=2, registry=str(reg), **TINY)
    grid = InProcessGrid([{"site": 0}, {"site": 2}], cfg.to_run_config())
    summary = run_federation(grid, cfg)
    assert [r["version"] for r in summary["rounds"]] == [1, 2]
    registry = PolicyRegistry(reg)
    assert registry.versions() == [1, 2] and registry.latest_version() == 2
    assert (reg / "latest").read_text().strip() == "v0002/policy.pt"
    meta = json.loads((reg / "v0002" / "policy.json").read_text())
    assert meta["version"] == 2 and meta["round"] == 2 and meta["strategy"] == "fedavg"
    assert len(meta["nodes"]) == 2 and sorted(meta["sites"]) == [0, 2]
    assert np.isfinite(meta["evaluation"]["eval-reward"]) and "emissions_g_total" in meta
    solver_meta = json.loads((reg / "v0002" / "metadata.json").read_text())
    assert solver_meta["version"] == "v0002" and solver_meta["solver"] == "dqn"
    assert solver_meta["params"] == {"policy": "{version_dir}/policy.pt"}
    initial = get_weights(build_agent(cfg).online)
    state, _ = registry.load()
    assert any(not np.allclose(state[k].numpy(), v) for k, v in initial.items())
    # the dqn solver reads the folder's latest version and places pods with it
    assert resolve_policy(reg) == reg / "v0002" / "policy.pt"
    placement = DQNSolver(policy=str(reg)).solve(load_problem(ROOT / "examples/problems/bank-three-zone.json"))
    assert placement.status in ("feasible", "optimal") and placement.objective.placed > 0


def test_registry_refuses_incomplete_metadata(tmp_path) -> None:
    with pytest.raises(RegistryError, match="lacks 'config'"):
        PolicyRegistry(tmp_path).publish({}, {"candidate_features": 1, "context_features": 1})
    assert not (tmp_path / "latest").exists()
    (tmp_path / "file").write_text("x")
    with pytest.raises(RegistryError, match="not a folder"):
        PolicyRegistry(tmp_path / "file")


def test_resume_starts_from_the_registrys_latest_policy(tmp_path) -> None:
    pytest.importorskip("flwr")
    from iro_fed.federated.inprocess import InProcessGrid
    from iro_fed.federated.server_app import run_federation

    reg = tmp_path / "policies"
    cfg = FedConfig(num_server_rounds=1, registry=str(reg), **TINY)
    first = run_federation(InProcessGrid([{"site": 0}, {"site": 2}], cfg.to_run_config()), cfg)
    assert first["resumed_from"] is None
    v1 = PolicyRegistry(reg).metadata(1)

    resumed = cfg.replace(resume=True)
    second = run_federation(InProcessGrid([{"site": 0}, {"site": 2}], resumed.to_run_config()), resumed)
    assert second["resumed_from"] == 1 and [r["version"] for r in second["rounds"]] == [2]
    # the run started from version 1: its initial evaluation is version 1's, not a fresh policy's
    assert second["initial"] == v1["evaluation"] != first["initial"]
    assert PolicyRegistry(reg).metadata(2)["resumed_from"] == 1

    wider = resumed.replace(hidden_dim=2 * resumed.hidden_dim)
    with pytest.raises(ValueError, match="resume: registry version 2 .* does not fit"):
        run_federation(InProcessGrid([{"site": 0}, {"site": 2}], wider.to_run_config()), wider)

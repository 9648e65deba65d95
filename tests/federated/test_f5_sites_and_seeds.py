"""Sites of ``iro fed local`` never include the held-out evaluation site, and every (site, round)
trains on its own stream of scenario seeds."""

from __future__ import annotations

from pathlib import Path

import pytest

from iro_fed.federated.task import (
    EVAL_SEEDS,
    MAX_SEED,
    FedConfig,
    build_agent,
    get_weights,
    local_train,
    site_profile,
    site_seed,
    training_sites,
)
from iro_fed.sim.env import PlacementEnv

TINY = {
    "local_steps": 100,
    "learning_starts": 8,
    "batch_size": 4,
    "buffer_size": 128,
    "hours": 0.25,
    "track_emissions": False,
    "embed_dim": 8,
    "hidden_dim": 16,
}


@pytest.mark.parametrize(
    ("eval_site", "count", "expected"),
    [
        (4, 3, [0, 1, 2]),
        (4, 5, [0, 1, 2, 3, 5]),
        (4, 7, [0, 1, 2, 3, 5, 6, 7]),
        (0, 5, [1, 2, 3, 4, 6]),
        (9, 5, [0, 1, 2, 3, 5]),  # 9 wraps to site 4's slice
    ],
)
def test_training_sites_skip_the_held_out_slice(eval_site: int, count: int, expected: list[int]) -> None:
    got = training_sites("edge-iot", eval_site, count)
    assert got == expected
    held = site_profile("edge-iot", eval_site)["name"]
    assert all(site_profile("edge-iot", s)["name"] != held for s in got)


def test_local_federation_gives_node_4_of_5_another_site(tmp_path: Path) -> None:
    pytest.importorskip("flwr")
    from iro_fed.federated.local import LocalFederation

    # Was: node i got site i, so --nodes 5 (Krum's least) trained on the held-out site 4.
    fed = LocalFederation(5, workdir=tmp_path)
    assert [fed.node_config(i)["site"] for i in range(5)] == [0, 1, 2, 3, 5]
    fed = LocalFederation(2, workdir=tmp_path, sites=[7, 8], node_configs=[{}, {"experience-db": "x.db"}])
    assert fed.node_config(1) == {"site": 8, "experience-db": "x.db"}
    with pytest.raises(ValueError, match="^sites: expected one per node"):
        LocalFederation(2, workdir=tmp_path, sites=[0])


def test_fed_local_starts_its_nodes_on_sites_without_the_eval_site(tmp_path: Path, monkeypatch) -> None:
    pytest.importorskip("flwr")
    from iro_fed.cli import main
    from iro_fed.federated import local

    seen: dict = {}

    class Stop(local.LocalFederation):
        def __enter__(self):  # noqa: ANN204 - records what cmd_local asked for, starts nothing
            seen["sites"] = [self.node_config(i)["site"] for i in range(self.nodes)]
            raise local.FederationError("stopped by the test")

    monkeypatch.setattr(local, "LocalFederation", Stop)
    argv = [
        "fed",
        "local",
        "--nodes",
        "6",
        "--rounds",
        "1",
        "--registry",
        str(tmp_path / "reg"),
        "--workdir",
        str(tmp_path / "work"),
        "--set",
        "eval-site=2",
    ]
    assert main(argv) == 1
    assert seen["sites"] == [0, 1, 3, 4, 5, 6]


def test_site_seeds_are_deterministic_and_in_numpys_range() -> None:
    assert site_seed(3, 1, 2) == site_seed(3, 1, 2)
    seeds = {site_seed(s, site, r) for s in (0, 1, MAX_SEED) for site in range(6) for r in range(6)}
    assert len(seeds) == 3 * 36
    assert all(0 <= s < 2**32 for s in seeds)


@pytest.fixture
def run_seeds(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The scenario seed of every episode any PlacementEnv runs (the real reset, recorded)."""
    seen: list[int] = []
    reset = PlacementEnv.reset

    def recording_reset(self: PlacementEnv, **kwargs):  # noqa: ANN202
        out = reset(self, **kwargs)
        seen.append(int(self.sim.seed))
        return out

    monkeypatch.setattr(PlacementEnv, "reset", recording_reset)
    return seen


def test_rounds_and_sites_train_on_disjoint_episodes(run_seeds: list[int]) -> None:
    # Was: seed * 1000 + site * 97 + round, the env running S, S + 1, ...: round 2 reran round 1's
    # episodes from its second on (audit: rounds 1..3 of site 0 ran 1..7, 2..8, 3..9).
    pytest.importorskip("torch")
    cfg = FedConfig(**TINY)
    weights = get_weights(build_agent(cfg).online)
    streams: dict[tuple[int, int], set[int]] = {}
    for site, server_round in ((0, 1), (0, 2), (0, 3), (1, 1)):
        run_seeds.clear()
        local_train(weights, cfg, site=site, server_round=server_round)
        assert len(run_seeds) >= 2  # several episodes each
        streams[(site, server_round)] = set(run_seeds)
    keys = list(streams)
    for i, a in enumerate(keys):
        assert not streams[a] & set(EVAL_SEEDS)
        for b in keys[i + 1 :]:
            assert not streams[a] & streams[b], (a, b)


def test_a_federated_buffer_too_small_to_learn_is_refused() -> None:
    from iro_fed.federated.task import FedConfigError

    # Was accepted (buffer-size=20 < learning-starts 100): every site's rounds trained nothing.
    with pytest.raises(FedConfigError, match=r"^DQN setting: buffer_size: 20 holds fewer transitions than the 100"):
        FedConfig(buffer_size=20)

"""The held-out evaluation site stays held out: a node on the run's ``eval-site`` does not train.

Before, `iro fed node --site 4` (4 is the default eval-site) trained on the site the server
evaluates every round's policy on, and nothing said so; `--site 100000` was taken too.
"""

from __future__ import annotations

import json

import pytest

pytest.importorskip("flwr")

from flwr.app import RecordDict  # noqa: E402

from iro_fed.cli import main  # noqa: E402
from iro_fed.federated import wire  # noqa: E402
from iro_fed.federated.inprocess import InProcessGrid  # noqa: E402
from iro_fed.federated.task import FedConfig, build_agent, get_weights  # noqa: E402

TINY = dict(local_steps=20, hours=1.0, learning_starts=8, batch_size=8, track_emissions=False, min_nodes=1,
            embed_dim=16, hidden_dim=32)


def _train_reply(cfg: FedConfig, site: int):
    grid = InProcessGrid([{"site": site}], cfg.to_run_config())
    flat, layout = wire.encode(get_weights(build_agent(cfg).online))
    msg = grid.create_message(RecordDict({"arrays": flat, "config": wire.layout_config(layout, **{"server-round": 1})}),
                              "train", 1, "1")
    (reply,) = grid.send_and_receive([msg])
    return reply


@pytest.mark.parametrize("eval_site, site", [(4, 4), (4, 9), (0, 5)])  # 9, 5: the same slice, the list wraps
def test_a_node_on_the_eval_site_answers_with_an_error(eval_site, site) -> None:
    reply = _train_reply(FedConfig(**TINY, eval_site=eval_site), site)
    assert reply.has_error()
    reason = reply.error.reason
    assert f"site {site} is the run's held-out evaluation site (eval-site {eval_site}" in reason, reason


def test_the_eval_site_of_the_run_decides_not_the_default() -> None:
    reply = _train_reply(FedConfig(**TINY, eval_site=0), 4)  # site 4 trains when another site is held out
    assert not reply.has_error(), reply.error
    assert reply.content.metric_records["metrics"]["site"] == 4


def test_the_server_counts_the_eval_site_node_as_failed(tmp_path) -> None:
    from iro_fed.federated.server_app import run_federation

    cfg = FedConfig(**{**TINY, "min_nodes": 2}, num_server_rounds=1, registry=str(tmp_path / "reg"))
    grid = InProcessGrid([{"site": 0}, {"site": 4}], cfg.to_run_config())
    summary = run_federation(grid, cfg)
    assert [r["nodes"] for r in summary["rounds"]] == [1]  # only site 0's update is in the aggregate
    meta = json.loads((tmp_path / "reg" / "v0001" / "policy.json").read_text())
    assert meta["sites"] == [0] and meta["valid_sites"] == [0], meta


@pytest.mark.parametrize("site", ["1000", "100000"])
def test_node_site_out_of_range_exits_2(site, capsys) -> None:
    assert main(["fed", "node", "--superlink", "127.0.0.1:9092", "--site", site, "--insecure", "--dry-run"]) == 2
    assert f"iro fed node: error: --site: expected 0..999, got {site}" in capsys.readouterr().err


def test_node_on_the_apps_eval_site_is_noted_and_help_says_it_is_held_out(capsys) -> None:
    assert main(["fed", "node", "--superlink", "127.0.0.1:9092", "--site", "9", "--insecure", "--dry-run"]) == 0
    out = capsys.readouterr()
    assert "site=9" in out.out
    assert "note: --site 9 is the app's held-out eval-site 4" in out.err and "refuses to train" in out.err
    assert main(["fed", "node", "--superlink", "127.0.0.1:9092", "--site", "3", "--insecure", "--dry-run"]) == 0
    assert "note:" not in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["fed", "node", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "edge-iot has sites 0..4" in text and "eval-site (4 by default; also 9, 14, ...) is held out" in text

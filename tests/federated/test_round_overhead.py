"""What makes a round short: the ServerApp's reply polling, the round-time breakdown, the warm executor's pieces.

The end-to-end use of the warm executor (real SuperNodes in ``process`` isolation) is covered
by ``test_loopback.py``; these are the parts that can be checked without starting Flower's servers.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("flwr")

from flwr.app import Context, Message, MetricRecord, RecordDict  # noqa: E402
from flwr.clientapp import ClientApp  # noqa: E402

from iro_fed.federated.inprocess import InProcessGrid  # noqa: E402
from iro_fed.federated.server_app import POLL_ENV, PollingGrid, polling_grid  # noqa: E402
from iro_fed.federated.strategies import round_timing  # noqa: E402

REPO = Path(__file__).resolve().parents[2]

echo = ClientApp()


@echo.train()
def _train(msg: Message, context: Context) -> Message:
    """Reply with the node's configured timings as the ClientApp's metrics."""
    node = context.node_config
    metrics = {"num-examples": 1, "handler-s": float(node["handler"]), "train-s": float(node["train"])}
    return Message(content=RecordDict({"metrics": MetricRecord(metrics)}), reply_to=msg)


class HeldBackGrid(InProcessGrid):
    """Replies exist at once but are handed out only from the ``hold + 1``-th pull on (a slow federation)."""

    def __init__(self, hold: int, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.hold, self.pulls = hold, 0

    def pull_messages(self, message_ids: Any) -> Any:
        self.pulls += 1
        return [] if self.pulls <= self.hold else super().pull_messages(message_ids)


def _grid(hold: int = 0) -> HeldBackGrid:
    nodes = [{"handler": 2.0, "train": 0.5}, {"handler": 3.0, "train": 1.25}]
    return HeldBackGrid(hold, nodes, {}, app=echo)


def _messages(grid: InProcessGrid) -> list[Message]:
    return [Message(content=RecordDict(), dst_node_id=n, message_type="train") for n in grid.get_node_ids()]


def test_polling_grid_keeps_pulling_until_every_reply_is_there() -> None:
    inner = _grid(hold=3)
    grid = PollingGrid(inner, interval=0.001, max_interval=0.002)
    replies = list(grid.send_and_receive(_messages(inner)))
    assert sorted(int(r.metadata.src_node_id) for r in replies) == [1, 2]
    assert not any(r.has_error() for r in replies)
    assert grid.polls == 4 and inner.pulls == 4  # three empty pulls, then both replies
    assert list(grid.get_node_ids()) == [1, 2]  # everything else is the wrapped grid's


def test_polling_grid_returns_what_it_has_at_the_timeout() -> None:
    inner = _grid(hold=10**9)
    grid = PollingGrid(inner, interval=0.001, max_interval=0.01)
    assert list(grid.send_and_receive(_messages(inner), timeout=0.05)) == []
    assert grid.polls >= 2


@pytest.mark.parametrize("kwargs, message", [
    ({"interval": 0.0}, "interval"), ({"interval": 1.0, "max_interval": 0.5}, "interval"), ({"backoff": 0.5}, "backoff"),
])
def test_polling_grid_rejects_bad_intervals(kwargs: dict[str, float], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        PollingGrid(_grid(), **kwargs)


def test_poll_interval_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(POLL_ENV, "3")
    grid = polling_grid(_grid())
    assert (grid.interval, grid.max_interval, grid.backoff) == (3.0, 3.0, 1.0)  # Flower's own fixed 3 s wait
    monkeypatch.delenv(POLL_ENV)
    assert polling_grid(_grid()).interval == 0.05
    for bad in ("soon", "0", "-1", "100"):
        monkeypatch.setenv(POLL_ENV, bad)
        with pytest.raises(ValueError, match=POLL_ENV):
            polling_grid(_grid())


def test_round_timing_follows_the_reply_created_last() -> None:
    inner = _grid()
    replies = list(PollingGrid(inner).send_and_receive(_messages(inner)))
    last = max(replies, key=lambda m: m.metadata.created_at)
    created = float(last.metadata.created_at)
    handler = float(last.content.metric_records["metrics"]["handler-s"])
    train = float(last.content.metric_records["metrics"]["train-s"])
    t = round_timing(replies, sent=created - 10.0, received=created + 2.0)
    assert t["replies_s"] == pytest.approx(12.0)
    assert t["dispatch_s"] == pytest.approx(10.0 - handler)  # sent -> the handler of the last reply started
    assert t["client_setup_s"] == pytest.approx(handler - train)
    assert t["client_train_s"] == pytest.approx(train)
    assert t["return_s"] == pytest.approx(2.0)
    assert t["client_handler_s"] == 3.0 and t["client_train_s_max"] == 1.25  # maxima over both sites
    assert round_timing([], sent=0.0, received=4.0) == {"replies_s": 4.0}


def test_benchmark_overhead_is_wall_time_minus_the_slowest_training(load_benchmark) -> None:
    bench = load_benchmark("federated", "bench_federated")
    rows = [{"round": 1}, {"round": 2, "client_train_s_max": 1.0, "replies_s": 4.0, "server_eval_s": 0.5},
            {"round": 3, "client_train_s_max": 2.0, "replies_s": 6.0, "server_eval_s": 0.5}]
    res = bench.round_overhead([100.0, 105.0, 112.0], rows)
    assert [r["wall_s"] for r in res["per_round"]] == [5.0, 7.0]  # round 1 (start-up) left out
    assert [r["overhead_s"] for r in res["per_round"]] == [4.0, 5.0]
    assert [r["server_other_s"] for r in res["per_round"]] == [0.5, 0.5]
    assert res["mean"]["overhead_s"] == 4.5


def _python(code: str) -> dict[str, Any]:
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=str(REPO))
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_executor_keeps_third_party_modules_and_drops_the_app() -> None:
    out = _python(
        "import json, sys\n"
        "from iro_fed.federated.executor import forget_app_modules, preload\n"
        "took = preload(['numpy', 'iro_fed.federated.task', 'no_such_module_xyz'])\n"
        "dropped = forget_app_modules()\n"
        "print(json.dumps({'took': sorted(took), 'dropped': dropped,\n"
        "  'left': [m for m in sys.modules if m.split('.')[0] in ('iro_fed', 'solvers', 'edge_agent')],\n"
        "  'numpy': 'numpy' in sys.modules}))\n")
    assert out["took"] == ["iro_fed.federated.task", "numpy"]  # a missing optional module is skipped
    assert "iro_fed.federated.task" in out["dropped"] and out["left"] == []
    assert out["numpy"]  # third-party modules stay loaded for the forked ClientApps


def test_executor_shortens_only_the_object_pull_retry() -> None:
    out = _python(
        "import json\n"
        "from flwr.supercore.inflatable import inflatable_utils as iu\n"
        "fns = (iu.pull_objects, iu.pull_and_inflate_object_from_tree)\n"
        "before = [dict(f.__kwdefaults__) for f in fns]\n"
        "from iro_fed.federated.executor import quick_object_pull_retry\n"
        "applied = quick_object_pull_retry()\n"
        "after = [f.__kwdefaults__ for f in fns]\n"
        "print(json.dumps({'applied': applied, 'before': [{k: repr(v) for k, v in d.items()} for d in before],\n"
        "                  'after': [{k: repr(v) for k, v in d.items()} for d in after]}))\n")
    assert out["applied"]
    for before, after in zip(out["before"], out["after"], strict=True):
        assert before["initial_backoff"] == "1" and after["initial_backoff"] == "0.02"
        assert before["backoff_cap"] == "10" and after["backoff_cap"] == "0.5"
        assert {k for k in before if before[k] != after[k]} == {"initial_backoff", "backoff_cap"}


@pytest.mark.parametrize("argv", [
    ["--runtime-api-address", "127.0.0.1:9094"],  # neither --insecure nor --root-certificates
    ["--runtime-api-address", "127.0.0.1:9094", "--insecure", "--root-certificates", "ca.crt"],
    ["--runtime-api-address", "127.0.0.1:9094", "--insecure", "--poll-interval", "0"],
])
def test_executor_command_line_errors_exit_2(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    from iro_fed.federated.executor import main

    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "--insecure" in err or "--poll-interval" in err


def test_local_federation_rejects_an_unknown_executor(tmp_path: Path) -> None:
    from iro_fed.federated.local import LocalFederation

    with pytest.raises(ValueError, match="executor"):
        LocalFederation(2, workdir=tmp_path, executor="threads")


def test_warm_app_modules_are_kept_only_for_a_fab_with_the_same_sources(tmp_path: Path) -> None:
    from iro_fed.federated.executor import fab_dir, fab_matches, snapshot

    repo, home = tmp_path / "repo", tmp_path / "flwr-home"
    for rel, text in {"pkg/__init__.py": "", "pkg/a.py": "X = 1\n", "pkg/sub/b.py": "Y = 2\n"}.items():
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        (repo / rel).write_text(text)
    sources = snapshot({"pkg": repo / "pkg"})
    assert sorted(sources["pkg"]) == ["__init__.py", "a.py", "sub/b.py"]

    fab_hash = "0123456789abcdef" * 4
    installed = home / "apps" / f"pub.app.1.0.0.{fab_hash[:8]}"
    (installed / "pkg").parent.mkdir(parents=True)
    shutil.copytree(repo / "pkg", installed / "pkg")
    (installed / "pkg" / "__pycache__").mkdir()
    (installed / "pkg" / "__pycache__" / "a.cpython-311.pyc").write_bytes(b"\0")  # bytecode does not count
    assert fab_dir(fab_hash, home) == installed and fab_dir("ffff" * 16, home) is None and fab_dir(None, home) is None
    assert fab_matches(installed, sources)

    (installed / "pkg" / "a.py").write_text("X = 2\n")  # the run's app differs: import it from the FAB
    assert not fab_matches(installed, sources)
    (installed / "pkg" / "a.py").write_text("X = 1\n")
    (installed / "pkg" / "sub" / "c.py").write_text("Z = 3\n")  # a file the warm process does not have
    assert not fab_matches(installed, sources)
    assert not fab_matches(None, sources) and not fab_matches(installed, {})


def test_benchmark_reads_set_as_iro_fed_does(load_benchmark, capsys) -> None:
    from iro_fed.federated.cli import parse_sets

    assert parse_sets(["keep_replay=false", "lr=0.5", "local-steps=32", "scenario=edge-iot", 'note="a b"']) == {
        "keep-replay": False, "lr": 0.5, "local-steps": 32, "scenario": "edge-iot", "note": "a b"}
    bench = load_benchmark("federated", "bench_federated")
    for argv, message in ((["--set", "keep-replay"], "expected KEY=VALUE"),
                          (["--set", "local-steps=lots"], "local-steps")):
        with pytest.raises(SystemExit) as info:
            bench.main([*argv, "--out", "/nonexistent/never-written.json"])
        assert info.value.code == 2
        assert message in capsys.readouterr().err

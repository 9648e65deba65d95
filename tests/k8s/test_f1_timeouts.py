"""Timeouts that only make sense in order, and watches that do not renew in step.

* ``iro extender --api-timeout-s`` at or past ``--http-timeout-s`` (kube-scheduler's
  ``httpTimeout``, 5 s when not given) was accepted: a bind could still be waiting for the API
  server when kube-scheduler had given up and retried the pod. ``iro webhook --budget-s`` was
  checked against ``--timeout-seconds`` only when that was given, not against its default (5,
  which the server's deadlines assume). Both exit 2 naming both flags.
* Every watch asked for exactly 60 s, so replicas that relisted together renewed together for
  good. By default each watch now asks for 60..119 s at random, as client-go's reflector does
  (``minWatchTimeout * (rand.Float64() + 1.0)``); a given ``--watch-timeout-s`` stays exact.
"""

from __future__ import annotations

import random
from urllib.parse import parse_qs

import pytest

from iro_fed.cli import build_parser, main
from iro_fed.k8s import cli as k8s_cli
from iro_fed.k8s.client import WATCH_JITTER, ClusterCache, Kube, Reflector
from iro_fed.k8s.testing import FakeApiServer, make_node

TLS = ["--tls-cert", __file__, "--tls-key", __file__]


@pytest.fixture(autouse=True)
def _outside_a_cluster(monkeypatch) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)


# --- timeouts in order ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["extender", "--port", "0", "--kubeconfig", __file__, "--api-timeout-s", "5"],
            "--api-timeout-s: must be below --http-timeout-s (5 when not given), got 5: a bind still waiting",
        ),
        (
            ["extender", "--port", "0", "--watch", "--api-timeout-s", "12"],
            "--api-timeout-s: must be below --http-timeout-s (5 when not given), got 12",
        ),
        (
            ["extender", "--port", "0", "--kubeconfig", __file__, "--http-timeout-s", "2", "--api-timeout-s", "2"],
            "--api-timeout-s: must be below --http-timeout-s (2), got 2",
        ),
        (
            ["extender", "--port", "0", "--kubeconfig", __file__, "--http-timeout-s", "30", "--api-timeout-s", "60"],
            "--api-timeout-s: must be below --http-timeout-s (30), got 60",
        ),
        (
            ["webhook", "--port", "0", *TLS, "--budget-s", "5"],
            "--budget-s: must be below --timeout-seconds (5 when not given), got 5: the answer would come after",
        ),
        (
            ["webhook", "--port", "0", *TLS, "--budget-s", "12", "--timeout-seconds", "10"],
            "--budget-s: must be below --timeout-seconds (10), got 12",
        ),
    ],
)
def test_a_timeout_at_or_past_its_callers_exits_2_naming_both_flags(argv: list[str], message: str, capsys) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert f"iro {argv[0]}: error: {message}" in err, err


@pytest.mark.parametrize(
    ("argv", "next_error"),
    [
        # Below the caller's timeout: past the check, to the next one (the kubeconfig is this file).
        (["extender", "--port", "0", "--kubeconfig", __file__, "--api-timeout-s", "4.9"], "--kubeconfig: cannot load"),
        (
            ["extender", "--port", "0", "--kubeconfig", __file__, "--http-timeout-s", "60", "--api-timeout-s", "30"],
            "--kubeconfig: cannot load",
        ),
        (["webhook", "--port", "0", *TLS, "--budget-s", "8", "--timeout-seconds", "10"], "--tls-cert:"),
        (["webhook", "--port", "0", *TLS, "--budget-s", "4.5"], "--tls-cert:"),
    ],
)
def test_a_timeout_below_its_callers_is_accepted(argv: list[str], next_error: str, capsys) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "must be below" not in err and f"iro {argv[0]}: error: {next_error}" in err, err


# --- watch jitter ---------------------------------------------------------------------------


def test_the_default_watch_timeout_is_drawn_as_client_gos() -> None:
    r = Reflector(lambda **kw: None, "nodes", rng=random.Random(1))
    draws = [r.next_watch_timeout() for _ in range(2000)]
    assert r.watch_timeout_s == 60 and r.watch_jitter == WATCH_JITTER == 1.0
    assert min(draws) == 60 and max(draws) == 119  # [60, 120), whole seconds
    assert len(set(draws)) == 60
    expected = random.Random(1)
    assert draws[:50] == [int(60 * (expected.random() + 1.0)) for _ in range(50)]  # reflector.go's formula
    exact = Reflector(lambda **kw: None, "nodes", watch_timeout_s=7, watch_jitter=0.0, rng=random.Random(1))
    assert {exact.next_watch_timeout() for _ in range(100)} == {7}


def test_replicas_draw_differently_and_a_seed_repeats_the_draws() -> None:
    a, b = (Reflector(lambda **kw: None, "nodes") for _ in range(2))  # seeded by the OS, as two replicas
    assert [a.next_watch_timeout() for _ in range(20)] != [b.next_watch_timeout() for _ in range(20)]
    kube = Kube.__new__(Kube)  # no API calls: the cache is only built
    kube.core = type("Core", (), {"list_node": None, "list_pod_for_all_namespaces": None})()
    first, second = (ClusterCache(kube, rng=random.Random(5)) for _ in range(2))
    seq = {
        name: [getattr(c, name).next_watch_timeout() for _ in range(10)] for c in (first,) for name in ("nodes", "pods")
    }
    assert seq == {name: [getattr(second, name).next_watch_timeout() for _ in range(10)] for name in ("nodes", "pods")}
    assert seq["nodes"] != seq["pods"]  # a generator each: not one shared by two threads


@pytest.mark.parametrize("jitter", [-0.5, float("nan"), float("inf")])
def test_a_bad_jitter_is_refused(jitter: float) -> None:
    with pytest.raises(ValueError, match="watch_jitter: must be a finite number >= 0"):
        Reflector(lambda **kw: None, "nodes", watch_jitter=jitter)


def _watch_timeouts(api: FakeApiServer) -> list[str]:
    with api._lock:
        return [
            parse_qs(r["query"]).get("timeoutSeconds", [""])[0]
            for r in api.requests
            if r["method"] == "GET" and r["path"] == "/api/v1/nodes" and "watch=true" in r["query"]
        ]


def test_each_watch_asks_the_api_server_for_a_new_draw(api: FakeApiServer, kube: Kube) -> None:
    api.add_node(make_node("n1"))
    r = Reflector(kube.core.list_node, "nodes", rng=random.Random(11), read_timeout_s=5).start()
    try:
        for n in range(1, 6):
            assert api.wait_for(
                lambda n=n: len(_watch_timeouts(api)) == n and api.open_watches("nodes") == 1, timeout=30
            )
            if n < 5:
                api.close_watches()  # as its timeoutSeconds would: the reflector watches again
    finally:
        r.stop()
    expected = random.Random(11)
    assert _watch_timeouts(api) == [str(int(60 * (1 + expected.random()))) for _ in range(5)]
    assert r.lists == 1  # renewed from where it stopped: no relist


def test_the_cli_jitters_the_default_and_keeps_a_given_timeout_exact(api: FakeApiServer, kubeconfig: str) -> None:
    parse = build_parser().parse_args
    default = k8s_cli.build_scheduler(parse(["scheduler", "--kubeconfig", kubeconfig, "--no-leader-elect"])).scheduler
    watches = (default.cache.nodes, default.cache.pods, default.pending)
    assert {(r.watch_timeout_s, r.watch_jitter) for r in watches} == {(60, 1.0)}
    assert k8s_cli._timeouts_row(default.kube, default.cache) == (
        "API timeouts",
        "writes 30 s, watches 60 s to 120 s at random (client-go's jitter)",
    )
    given = k8s_cli.build_scheduler(
        parse(["scheduler", "--kubeconfig", kubeconfig, "--no-leader-elect", "--watch-timeout-s", "60"])
    ).scheduler
    watches = (given.cache.nodes, given.cache.pods, given.pending)
    assert {(r.watch_timeout_s, r.watch_jitter) for r in watches} == {(60, 0.0)}
    assert {r.next_watch_timeout() for r in watches for _ in range(50)} == {60}
    assert k8s_cli._timeouts_row(given.kube, given.cache) == ("API timeouts", "writes 30 s, watches 60 s")

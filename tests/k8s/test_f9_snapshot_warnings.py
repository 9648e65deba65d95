"""The cluster model's usage warnings reach the log (once per key, as the gpu-cards one), and
``iro-fed.io/max-latency-ms`` is read as a JSON number, not by ``float()``."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest

from iro_fed.k8s import snapshot
from iro_fed.k8s.snapshot import ClusterConfig, ClusterModel, PodSpecError, build_snapshot
from iro_fed.k8s.testing import make_node, make_pod

LOGGER = "iro_fed.k8s.snapshot"
LATENCY = "iro-fed.io/max-latency-ms"


@pytest.fixture(autouse=True)
def _fresh_logs() -> Iterator[None]:
    once = [getattr(snapshot, name, None) for name in ("_CARDS_LOGGED", "_USAGE_LOGGED")]  # the old module lacks one
    for o in once:
        if o is not None:
            o.clear()
    yield
    for o in once:
        if o is not None:
            o.clear()


def _logged(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == LOGGER and r.levelno == logging.WARNING]


def _bad_request_pod(name: str, node: str) -> dict:
    pod = make_pod(name, node=node)
    pod["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "lots"
    return pod


def test_usage_warnings_are_logged_once_per_key_not_per_rebuild(caplog) -> None:
    caplog.set_level(logging.WARNING, logger=LOGGER)
    nodes = [make_node("g1", gpus=1, gpu_model="A100"), make_node("n1", cpu="1")]
    pods = [
        make_pod("a", node="g1", gpus=1),
        make_pod("b", node="g1", gpus=1),  # b: the one card is a's
        make_pod("big", cpu="2", node="n1"),  # over n1's 1 core
        _bad_request_pod("bad", "n1"),
    ]
    for _ in range(4):  # the model is rebuilt on every change of the cluster
        model = ClusterModel(nodes, pods)
        assert len(model.warnings) == 3, model.warnings  # each model still says all of them
    messages = _logged(caplog)
    assert len(messages) == 3, messages  # was 0: they went only into model.warnings
    assert "node g1: pod default/b holds GPUs the node does not have free" in messages
    assert "node n1: cpu requested 2000 exceeds allocatable 1000; clamped" in messages
    assert any(
        m.startswith("ignored in usage: pod default/bad: spec.containers[0].resources.requests.cpu") for m in messages
    )


def test_a_changed_sum_over_allocatable_is_not_logged_again(caplog) -> None:
    caplog.set_level(logging.WARNING, logger=LOGGER)
    ClusterModel([make_node("n1", cpu="1")], [make_pod("a", cpu="2", node="n1")])
    ClusterModel([make_node("n1", cpu="1")], [make_pod("a", cpu="2", node="n1"), make_pod("b", cpu="1", node="n1")])
    ClusterModel([make_node("n2", cpu="1")], [make_pod("a", cpu="2", node="n2")])  # another node: said
    assert [m.split(" requested")[0] for m in _logged(caplog)] == ["node n1: cpu", "node n2: cpu"]


def test_a_bound_pod_with_a_bad_node_name_is_logged(caplog) -> None:
    caplog.set_level(logging.WARNING, logger=LOGGER)
    pod = make_pod("odd")
    pod["spec"]["nodeName"] = ["n1"]
    for _ in range(2):
        ClusterModel([make_node("n1")], [pod])
    messages = _logged(caplog)
    assert len(messages) == 1 and "spec.nodeName: expected a string, got" in messages[0], messages


# --- iro-fed.io/max-latency-ms -------------------------------------------------------------

CONFIG = ClusterConfig.from_dict({"latency_ms": {"users-eu": {"default": 5}}})


def _latency(value: str) -> float | None:
    pod = make_pod("api", annotations={"iro-fed.io/user-region": "users-eu", LATENCY: value})
    return build_snapshot([make_node("n1")], [], [pod], CONFIG).problem.workloads[0].max_latency_ms


@pytest.mark.parametrize(
    ("text", "value"), [("25", 25.0), ("12.5", 12.5), ("1e3", 1000.0), ("2.5E+1", 25.0), (" 12 ", 12.0), ("0.5", 0.5)]
)
def test_a_plain_number_is_read(text: str, value: float) -> None:
    assert _latency(text) == value


@pytest.mark.parametrize(
    "text", ["1_0", "+5", "nan", "NaN", "inf", "Infinity", "\u0665", ".5", "5.", "05", "0x10", "1 0", "5ms", "1e999"]
)
def test_anything_else_is_refused_naming_the_annotation(text: str) -> None:
    # float() read "1_0" as 10, "\u0665" (Arabic-Indic five) as 5, "nan" as a latency bound
    # no node meets and "inf" as none; "1e999" was inf, refused by the loader as a field.
    prefix = f"pod default/api: metadata.annotations.{LATENCY}: expected a number, got {text!r}"
    with pytest.raises(PodSpecError) as exc:
        _latency(text)
    assert str(exc.value).startswith(prefix), str(exc.value)
    model = ClusterModel([make_node("n1")], [], CONFIG)
    pod = make_pod("api", annotations={"iro-fed.io/user-region": "users-eu", LATENCY: text})
    with pytest.raises(PodSpecError) as exc:  # the extender's and the webhook's check of one pod
        model.check_pod(pod)
    assert str(exc.value).startswith(prefix), str(exc.value)

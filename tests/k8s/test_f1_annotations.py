"""Pod annotations read strictly and loudly: ``iro-fed.io/gpu-cards`` only as IRO's scheduler
writes it (ASCII digits and commas; ``int()`` took ``"+1"``, ``"1_0"``, ``" 3"``), a card list that
is ignored said once in the log per node and value (it was silent), and a blank scalar
annotation (``iro-fed.io/class``, ``user-region``, ``max-latency-ms``) read as absent, as a
blank comma list is, with the loader's errors on them naming the annotation."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest

from iro_fed.k8s import snapshot
from iro_fed.k8s.snapshot import ClusterConfig, ClusterModel, PodSpecError, build_snapshot
from iro_fed.k8s.testing import make_node, make_pod

CARDS = "iro-fed.io/gpu-cards"
LOGGER = "iro_fed.k8s.snapshot"


@pytest.fixture(autouse=True)
def _fresh_log() -> Iterator[None]:
    once = getattr(snapshot, "_CARDS_LOGGED", None)  # getattr: the file also runs against the old module
    if once is not None:
        once.clear()
    yield
    if once is not None:
        once.clear()


def _free(annotation: str, gpus: int = 1, node_gpus: int = 4, node: str = "g1") -> tuple[list[int], list[str]]:
    """gpu_free_milli of a node whose one bound pod holds ``gpus`` cards and carries ``annotation``."""
    pod = make_pod("holder", node=node, gpus=gpus, annotations={CARDS: annotation})
    model = ClusterModel([make_node(node, gpus=node_gpus, gpu_model="A100")], [pod])
    return model.node_docs[0]["gpu_free_milli"], model.warnings


@pytest.mark.parametrize("text", ["+1", "1_0", " 3", "3 ", "1, 2", "-1", "\u0663", "1\n", "0,,1", ",", "0x1", "1.0"])
def test_a_card_list_that_is_not_plain_digits_is_ignored(text: str) -> None:
    free, warnings = _free(text, gpus=1 if text.count(",") == 0 else 2)
    # First fit: the first cards, whatever the annotation's digits would have said.
    assert free == ([0, 1000, 1000, 1000] if text.count(",") == 0 else [0, 0, 1000, 1000]), text
    assert any("ASCII decimal digits separated by ','" in w for w in warnings), warnings


def test_plain_digits_are_read_as_before() -> None:
    assert _free("3") == ([1000, 1000, 1000, 0], [])
    assert _free("03") == ([1000, 1000, 1000, 0], [])  # still decimal digits: card 3
    assert _free("2,0", gpus=2) == ([0, 1000, 0, 1000], [])
    assert _free("") == ([0, 1000, 1000, 1000], [])  # empty or blank: no annotation, nothing to say
    assert _free("  ") == ([0, 1000, 1000, 1000], [])


def test_a_huge_card_number_is_out_of_range_not_a_crash() -> None:
    free, warnings = _free("9" * 5000)  # int() refuses over 4,300 digits (ValueError deep inside)
    assert free == [0, 1000, 1000, 1000]
    assert any("card number 99999999999999999999... is past any node's cards" in w for w in warnings), warnings


@pytest.mark.parametrize(
    ("text", "gpus", "why"),
    [
        ("1_0", 1, "not card numbers in ASCII decimal digits separated by ',', as IRO's scheduler writes them"),
        ("0,0", 2, "lists card 0 twice"),
        ("7", 1, "card 7 is not on the node (it has 4)"),
        ("1", 2, "lists 1 card(s), but the pod holds 2"),
    ],
)
def test_an_ignored_card_list_is_logged_naming_node_pod_annotation_and_why(
    text: str, gpus: int, why: str, caplog
) -> None:
    caplog.set_level(logging.WARNING, logger=LOGGER)
    _free(text, gpus=gpus)
    records = [r for r in caplog.records if r.name == LOGGER]
    assert len(records) == 1, [r.getMessage() for r in records]
    message = records[0].getMessage()
    assert records[0].levelno == logging.WARNING
    assert message.startswith(f"node g1: pod default/holder: annotation {CARDS} {text!r} ignored ({why})"), message
    assert message.endswith("its GPUs are counted first fit"), message


def test_the_warning_is_logged_once_per_node_and_value_not_per_rebuild(caplog) -> None:
    caplog.set_level(logging.WARNING, logger=LOGGER)
    for _ in range(5):  # the cluster model is rebuilt on every change of the cluster
        _, warnings = _free("+1")
        assert len(warnings) == 1  # each snapshot still says it
    _free("+2")  # another value on the same node: said once more
    _free("+1", node="g2")  # the same value on another node: said too
    for _ in range(3):
        _free("+2")
        _free("+1", node="g2")
    messages = [r.getMessage() for r in caplog.records if r.name == LOGGER]
    assert len(messages) == 3, messages
    assert [m.split(" ignored")[0] for m in messages] == [
        f"node g1: pod default/holder: annotation {CARDS} '+1'",
        f"node g1: pod default/holder: annotation {CARDS} '+2'",
        f"node g2: pod default/holder: annotation {CARDS} '+1'",
    ]


def test_the_once_log_is_bounded() -> None:
    once = snapshot._OnceLog(size=3)
    assert [once.first(("n", str(i))) for i in range(4)] == [True] * 4
    assert len(once._seen) == 3
    assert once.first(("n", "0")) is True  # the oldest was forgotten
    assert once.first(("n", "3")) is False


# --- scalar annotations --------------------------------------------------------------------

CONFIG = ClusterConfig.from_dict({"latency_ms": {"users-eu": {"default": 5}}})


def _workload(annotations: dict[str, str]) -> dict:
    snap = build_snapshot([make_node("n1")], [], [make_pod("api", annotations=annotations)], CONFIG)
    w = snap.problem.workloads[0]
    return {"class": w.klass, "user_region": w.user_region, "max_latency_ms": w.max_latency_ms}


@pytest.mark.parametrize("blank", [" ", "  \t", "\n"])
def test_a_blank_scalar_annotation_reads_as_absent(blank: str) -> None:
    absent = _workload({})
    assert absent == {"class": "online", "user_region": "", "max_latency_ms": None}
    # Before: a class of " " and a user region of " " were refused as unknown values under the
    # workload's field names, and a blank max-latency-ms as "expected a number".
    for key in ("iro-fed.io/class", "iro-fed.io/user-region", "iro-fed.io/max-latency-ms"):
        assert _workload({key: blank}) == absent, key


def test_scalar_annotations_are_stripped_as_list_entries_are() -> None:
    got = _workload(
        {"iro-fed.io/class": " batch ", "iro-fed.io/user-region": "users-eu\n", "iro-fed.io/max-latency-ms": " 12 "}
    )
    assert got == {"class": "batch", "user_region": "users-eu", "max_latency_ms": 12.0}


@pytest.mark.parametrize(
    ("annotations", "message"),
    [
        (
            {"iro-fed.io/class": "gold"},
            "pod default/api: metadata.annotations.iro-fed.io/class: must be one of online, batch, burst, got 'gold'",
        ),
        (
            {"iro-fed.io/user-region": "users-mars"},
            "pod default/api: metadata.annotations.iro-fed.io/user-region: unknown user region 'users-mars'",
        ),
        (
            {"iro-fed.io/user-region": "users-eu", "iro-fed.io/max-latency-ms": "-3"},
            "pod default/api: metadata.annotations.iro-fed.io/max-latency-ms: must be > 0, got -3",
        ),
        (
            {"iro-fed.io/max-latency-ms": "soon"},
            "pod default/api: metadata.annotations.iro-fed.io/max-latency-ms: expected a number, got 'soon'",
        ),
        (
            {"iro-fed.io/max-latency-ms": "5"},
            "pod default/api: metadata.annotations.iro-fed.io/max-latency-ms: needs iro-fed.io/user-region to know where",
        ),
        (
            {"iro-fed.io/allowed-domains": "default, mars"},
            "pod default/api: metadata.annotations.iro-fed.io/allowed-domains[1]: unknown domain 'mars' (domains: default)",
        ),
    ],
)
def test_a_refused_scalar_annotation_is_named(annotations: dict[str, str], message: str) -> None:
    with pytest.raises(PodSpecError) as exc:
        _workload(annotations)
    assert str(exc.value).startswith(message), str(exc.value)
    model = ClusterModel([make_node("n1")], [], CONFIG)
    with pytest.raises(PodSpecError) as exc:  # the extender's and the webhook's check of one pod
        model.check_pod(make_pod("api", annotations=annotations))
    assert str(exc.value).startswith(message), str(exc.value)


def test_a_long_value_is_remembered_by_its_digest(caplog) -> None:
    caplog.set_level(logging.WARNING, logger=LOGGER)
    long = "1," * 50_000 + "x"  # annotations may hold 256 KiB
    for _ in range(3):
        _free(long)
    _free(long[:-1] + "y")  # another long value: said too
    messages = [r.getMessage() for r in caplog.records if r.name == LOGGER]
    assert len(messages) == 2, len(messages)
    assert all(len(m) < 400 for m in messages)  # the value is cut in the message
    assert all(len(k[1]) == 64 for k in snapshot._CARDS_LOGGED._seen)

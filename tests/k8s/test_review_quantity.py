"""Review fixes: quantities as kube's ParseQuantity reads them, and nodes without a resource."""

from __future__ import annotations

from decimal import Decimal

import pytest

from iro_fed.feasibility import feasible_nodes
from iro_fed.k8s.quantity import QuantityError, cpu_millicores, memory_mib, parse_quantity
from iro_fed.k8s.snapshot import ClusterConfig, build_snapshot, pod_demand
from iro_fed.k8s.testing import make_node, make_pod
from iro_fed.model import ClusterState
from iro_fed.problem_io import MIN_CAPACITY


@pytest.mark.parametrize("text", ["1\n", "1Gi\n", "500m\n"])
def test_a_trailing_newline_is_not_a_quantity(text):
    # ParseQuantity refuses any whitespace; a regex "$" alone let a final newline through.
    with pytest.raises(QuantityError) as err:
        parse_quantity(text, "spec.containers[0].resources.requests.cpu")
    assert "spec.containers[0].resources.requests.cpu" in str(err.value)


def test_a_long_fraction_is_not_rounded_away():
    # 0.1 plus a digit 1e-31 (then 1e-66): kube rounds it up to 0.100000001 (whole nanos), 101m.
    assert cpu_millicores("0.1000000000000000000000000000001") == 101
    long = "0." + "1" + "0" * 64 + "1"
    assert cpu_millicores(long) == 101
    pod = make_pod("p", cpu=long, memory="1" + "." + "0" * 70 + "1")
    assert pod_demand(pod, ("cpu", "memory")).requests == {"cpu": 101.0, "memory": 2 / 2**20}


@pytest.mark.parametrize(
    ("text", "expected"),
    [("1e-50", Decimal("1e-9")), ("1e-10", Decimal("1e-9")), ("0e50", Decimal(0)), ("0.0000000001m", Decimal("1e-9")),
     ("1.0000000001", Decimal("1.000000001")), ("100000000000000000000000000000000000000000000000000e-50", Decimal(1))],
)
def test_values_round_up_to_whole_nanos_as_kube_does(text, expected):
    # ParseQuantity rounds a non-zero value up to 1n ("if you want some, you get some"),
    # and any int32 exponent is a quantity.
    assert parse_quantity(text) == expected


def test_tiny_values_still_cost_a_millicore_and_a_byte():
    assert cpu_millicores("1e-50") == 1
    assert memory_mib("1e-50") == 1 / 2**20


@pytest.mark.parametrize("text", ["1e2147483648", "1e" + "9" * 5000, "1e-99999999999"])
def test_exponents_beyond_int32_are_refused_with_a_reason(text):
    with pytest.raises(QuantityError, match="out of range"):
        parse_quantity(text, "f")


def test_a_node_without_an_extended_resource_has_none_of_it():
    # kube reads a resource missing from status.allocatable as 0: an extended resource lives
    # only on the nodes that have the device, and the other nodes still take other pods.
    config = ClusterConfig.from_dict({"resources": ["cpu", "memory", "example.com/fpga"]})
    fpga = make_node("fpga")
    fpga["status"]["allocatable"]["example.com/fpga"] = "2"
    plain = make_node("plain")
    wants = make_pod("wants")
    wants["spec"]["containers"][0]["resources"]["requests"]["example.com/fpga"] = "1"
    snap = build_snapshot([fpga, plain], [], [wants, make_pod("other")], config)
    p = snap.problem
    col = p.resources.index("example.com/fpga")
    assert p.capacity[p.node_index["fpga"], col] == 2
    assert p.capacity[p.node_index["plain"], col] <= MIN_CAPACITY
    state = ClusterState(p)
    assert feasible_nodes(state, 0).tolist() == [True, False]
    assert feasible_nodes(state, 1).tolist() == [True, True]

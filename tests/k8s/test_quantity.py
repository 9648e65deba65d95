"""Kubernetes quantities parsed exactly (k8s.io/apimachinery resource.Quantity)."""

from __future__ import annotations

from decimal import Decimal

import pytest

from iro_fed.k8s.quantity import QuantityError, count, cpu_millicores, memory_mib, parse_quantity

VALID = [
    ("0", Decimal(0)),
    ("1", Decimal(1)),
    ("500m", Decimal("0.5")),
    ("1.5", Decimal("1.5")),
    ("0.1", Decimal("0.1")),
    (".5", Decimal("0.5")),
    ("5.", Decimal(5)),
    ("+2", Decimal(2)),
    ("-2", Decimal(-2)),
    ("1Ki", Decimal(1024)),
    ("512Mi", Decimal(512 * 2**20)),
    ("1Gi", Decimal(2**30)),
    ("1.5Gi", Decimal(3 * 2**29)),
    ("2Ti", Decimal(2 * 2**40)),
    ("1Pi", Decimal(2**50)),
    ("1Ei", Decimal(2**60)),
    ("9e18", Decimal(9 * 10**18)),
    ("100k", Decimal(100_000)),
    ("1M", Decimal(10**6)),
    ("2G", Decimal(2 * 10**9)),
    ("1T", Decimal(10**12)),
    ("1P", Decimal(10**15)),
    ("1E", Decimal(10**18)),
    ("1e3", Decimal(1000)),
    ("1E3", Decimal(1000)),
    ("1.5e3", Decimal(1500)),
    ("12e-3", Decimal("0.012")),
    ("1e+3", Decimal(1000)),
    ("1E-3", Decimal("0.001")),  # an upper-case exponent with a sign, not the "E" (exa) suffix
    ("250u", Decimal("0.00025")),
    ("100n", Decimal("1E-7")),
    (2, Decimal(2)),
    (0.25, Decimal("0.25")),
]


@pytest.mark.parametrize(("text", "expected"), VALID)
def test_valid_quantities_parse_exactly(text, expected):
    assert parse_quantity(text) == expected


@pytest.mark.parametrize(
    "text",
    ["", " ", "1 Gi", " 1", "1Gb", "1gi", "1ki", "1KiB", "Gi", "m", "1.2.3", "--1", "1e", "1e3.5", "0x10", "1,5",
     "abc", "1Z", "e3", ".", "1mi", "1e19", "10Ei", "5 m", "1Gib"],
)
def test_invalid_quantities_raise_an_error_naming_field_and_value(text):
    with pytest.raises(QuantityError) as err:
        parse_quantity(text, "spec.containers[0].resources.requests.cpu")
    msg = str(err.value)
    assert "spec.containers[0].resources.requests.cpu" in msg
    assert repr(text) in msg


@pytest.mark.parametrize("bad", [None, True, [1], {"a": 1}, float("nan"), float("inf")])
def test_non_string_non_number_is_rejected(bad):
    with pytest.raises(QuantityError):
        parse_quantity(bad, "x")


@pytest.mark.parametrize(
    ("text", "millicores"),
    [("500m", 500), ("1", 1000), ("1.5", 1500), ("0.1", 100), ("100m", 100), ("1e3", 1_000_000), ("250u", 1),
     ("1n", 1), ("0", 0), ("2.0001", 2001), ("100k", 100_000_000)],
)
def test_cpu_rounds_up_to_whole_millicores(text, millicores):
    assert cpu_millicores(text) == millicores


@pytest.mark.parametrize(
    ("text", "mib"),
    [("512Mi", 512.0), ("1Gi", 1024.0), ("1G", 10**9 / 2**20), ("1.5Gi", 1536.0), ("1024Ki", 1.0), ("1", 1 / 2**20),
     ("100k", 100_000 / 2**20), ("1e3", 1000 / 2**20), ("0.5", 1 / 2**20)],
)
def test_memory_in_mib_from_whole_bytes(text, mib):
    assert memory_mib(text) == pytest.approx(mib, rel=0, abs=1e-12)


def test_negative_requests_are_rejected():
    with pytest.raises(QuantityError, match="negative"):
        cpu_millicores("-1", "requests.cpu")
    with pytest.raises(QuantityError, match="negative"):
        memory_mib("-1Gi", "requests.memory")


def test_counts_must_be_whole():
    assert count("2") == 2
    assert count("1e1") == 10
    with pytest.raises(QuantityError, match="whole"):
        count("1500m", "nvidia.com/gpu")

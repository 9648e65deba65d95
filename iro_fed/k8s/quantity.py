"""Kubernetes resource quantities, parsed exactly (``k8s.io/apimachinery/pkg/api/resource``).

Grammar (``quantity.go``)::

    <quantity>        ::= <signedNumber><suffix>
    <number>          ::= <digits> | <digits>.<digits> | <digits>. | .<digits>
    <suffix>          ::= <binarySI> | <decimalExponent> | <decimalSI>
    <binarySI>        ::= Ki | Mi | Gi | Ti | Pi | Ei
    <decimalSI>       ::= n | u | m | "" | k | M | G | T | P | E
    <decimalExponent> ::= "e" <signedNumber> | "E" <signedNumber>

Values are :class:`decimal.Decimal` so ``0.1`` CPU is exactly 100 millicores. As in
Kubernetes, a parsed value is rounded up (away from zero) to a whole nano (``1e-50`` is 1n),
CPU up to whole millicores (``MilliValue``) and memory up to whole bytes (``Value``) before
the conversion to MiB.
"""

from __future__ import annotations

import functools
import re
from decimal import MAX_EMAX, MIN_EMIN, ROUND_CEILING, ROUND_UP, Decimal, InvalidOperation, localcontext

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {"n": Decimal("1e-9"), "u": Decimal("1e-6"), "m": Decimal("1e-3"), "": Decimal(1), "k": Decimal(10**3),
            "M": Decimal(10**6), "G": Decimal(10**9), "T": Decimal(10**12), "P": Decimal(10**15), "E": Decimal(10**18)}
# The exponent form comes before the plain "E" (exa) suffix: "1E3" is 1000, "1E" is 10**18.
_QUANTITY = re.compile(r"^([+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+))(Ki|Mi|Gi|Ti|Pi|Ei|[eE][+-]?[0-9]+|[numkMGTPE]?)$")
MIB = 2**20
_NANO = Decimal("1e-9")
#: The exponent of ``1e<n>`` is an int32 in Kubernetes (``suffix.go``); larger ones are refused.
_MAX_EXPONENT = 2**31 - 1
#: Kubernetes caps quantities at 2^63-1 in their canonical unit; anything beyond is rejected.
_MAX = Decimal(2**63 - 1)


class QuantityError(ValueError):
    """A value is not a valid Kubernetes quantity; the message names the field and the value."""

    def __init__(self, field: str, value: object, why: str) -> None:
        self.field = field
        self.value = value
        where = f"{field}: " if field else ""
        super().__init__(f"{where}invalid quantity {value!r}: {why}")


def parse_quantity(value: str | int | float, field: str = "") -> Decimal:
    """The exact value of a quantity (``"500m"`` -> 0.5, ``"1Gi"`` -> 1073741824, ``"1e3"`` -> 1000).

    JSON numbers are accepted as their decimal text. Negative quantities are valid in the
    grammar (and returned); callers that need a request check the sign.
    """
    if isinstance(value, bool):
        raise QuantityError(field, value, "expected a string like '500m' or '1Gi', got a boolean")
    if isinstance(value, int | float):
        text = repr(value) if isinstance(value, float) else str(value)
        if isinstance(value, float) and (value != value or value in (float("inf"), float("-inf"))):
            raise QuantityError(field, value, "must be finite")
    elif isinstance(value, str):
        text = value
    else:
        raise QuantityError(field, value, f"expected a string like '500m' or '1Gi', got {type(value).__name__}")
    if not text:
        raise QuantityError(field, value, "empty")
    try:
        return _parse_text(text)
    except ValueError as exc:
        if isinstance(value, float):  # repr() gave 1e-05: read the plain decimal form
            try:
                return _parse_text(format(Decimal(text), "f"))
            except ValueError:
                pass
        raise QuantityError(field, value, str(exc)) from None


@functools.lru_cache(maxsize=8192)
def _parse_text(text: str) -> Decimal:
    """The value of a quantity string (cached: clusters repeat a few dozen spellings);
    ValueError says why it is not one."""
    # fullmatch: "$" alone would also accept a trailing newline ("1\n"), which ParseQuantity refuses.
    m = _QUANTITY.fullmatch(text)
    if m is None:
        raise ValueError("expected <number><suffix> with suffix one of n u m k M G T P E Ki Mi Gi Ti Pi Ei or e<exponent>")
    number, suffix = m.group(1), m.group(2)
    with localcontext() as ctx:
        # Exact: enough digits for the number times 2**60 (19 digits), and any exponent, so a
        # long fraction is not rounded away before the nano rounding below (ParseQuantity uses
        # arbitrary precision for it).
        ctx.prec = max(60, len(number) + 30)
        ctx.Emax, ctx.Emin = MAX_EMAX, MIN_EMIN
        try:
            base = Decimal(number)
            if suffix in _BINARY:
                result = base * _BINARY[suffix]
            elif suffix and suffix[0] in "eE" and len(suffix) > 1:
                digits = suffix[1:].lstrip("+-").lstrip("0")
                if len(digits) > 10 or int(digits or 0) > _MAX_EXPONENT:  # int() of 5000 digits would fail
                    raise ValueError(f"exponent {suffix[1:]} out of range")
                exponent = int(suffix[1:])
                result = base.scaleb(exponent)
            else:
                result = base * _DECIMAL[suffix]
        except InvalidOperation as exc:
            raise ValueError("not a number") from exc
        if abs(result) > _MAX:
            raise ValueError("too large (Kubernetes quantities are at most 2^63-1)")
        if result == 0:
            return Decimal(0)  # not 0E+50, whose exponent later arithmetic would have to carry
        if result.as_tuple().exponent < -9:  # kube keeps nanos: "if you want some, you get some"
            result = result.quantize(_NANO, rounding=ROUND_UP)
    return result


def _non_negative(q: Decimal, field: str, value: object) -> Decimal:
    if q < 0:
        raise QuantityError(field, value, "must not be negative")
    return q


def cpu_millicores(value: str | int | float, field: str = "") -> int:
    """CPU in whole millicores, rounded up as Kubernetes' ``MilliValue`` does (``"0.1"`` -> 100)."""
    q = _non_negative(parse_quantity(value, field), field, value)
    return int((q * 1000).to_integral_value(rounding=ROUND_CEILING))


def memory_mib(value: str | int | float, field: str = "") -> float:
    """Memory in MiB (bytes rounded up to a whole byte first, as ``Value`` does)."""
    q = _non_negative(parse_quantity(value, field), field, value)
    return int(q.to_integral_value(rounding=ROUND_CEILING)) / MIB


def count(value: str | int | float, field: str = "") -> int:
    """A whole count such as ``nvidia.com/gpu`` (extended resources must be integers)."""
    q = _non_negative(parse_quantity(value, field), field, value)
    if q != q.to_integral_value():
        raise QuantityError(field, value, "must be a whole number")
    return int(q)


def plain(value: str | int | float, field: str = "") -> float:
    """Any other additive resource in its base unit (``ephemeral-storage`` in bytes -> use MiB helpers)."""
    return float(_non_negative(parse_quantity(value, field), field, value))

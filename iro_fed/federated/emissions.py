"""Where a site's training emissions are measured: the country whose grid mix codecarbon applies.

codecarbon's offline tracker around a site's local training (:func:`solvers.dqn.train.train`,
``emissions_country``) turns the energy it measures into CO2eq with one country's yearly grid mix,
given as an ISO 3166-1 alpha-3 code. Every site used to be measured on Germany's (``DEU``); a site
now says where it is with the node-config entry ``emissions-country`` (the edge agent's
``federated.emissions_country``, or ``iro fed node --node-config emissions-country=FRA``).

This module imports nothing heavy: codecarbon's table is read only when a code is checked.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from typing import Any

#: The country of a site that names none (what every site was measured with before).
DEFAULT_COUNTRY = "DEU"
#: The node-config key the ClientApp reads it from.
NODE_CONFIG_KEY = "emissions-country"
#: The train reply's ``ConfigRecord`` naming the country whose grid mix measured the site's emissions,
#: and its key: the ClientApp writes it, the strategies read it.
EMISSIONS_RECORD = "emissions"
COUNTRY_KEY = "country"

_ALPHA3 = re.compile(r"[A-Z]{3}")


@functools.lru_cache(maxsize=1)
def codecarbon_countries() -> frozenset[str] | None:
    """The ISO alpha-3 codes codecarbon has a grid mix for; ``None`` when codecarbon is not installed
    (a site without it measures nothing, so only the code's form can be checked). Read once per
    process (every round's train message checks its site's code)."""
    try:
        from codecarbon.input import DataSource
    except ImportError:
        return None
    return frozenset(DataSource().get_global_energy_mix_data())


def alpha3(value: object) -> str | None:
    """``value`` as an upper-case ISO alpha-3 code by its form (no table), or None when it is not one."""
    code = value.strip().upper() if isinstance(value, str) else None
    return code if code is not None and _ALPHA3.fullmatch(code) else None


def check_country(value: object) -> str:
    """``value`` as the upper-case code codecarbon takes; ValueError (without the key: the caller names
    it) for anything else. A code outside codecarbon's table is refused when codecarbon is installed:
    its tracker only logs an error for it and goes on with no country's mix."""
    if not isinstance(value, str):
        raise ValueError(f"expected an ISO 3166-1 alpha-3 country code such as DEU or FRA, got "
                         f"{type(value).__name__} {value!r}")
    code = alpha3(value)
    if code is None:
        raise ValueError(f"expected an ISO 3166-1 alpha-3 country code such as DEU or FRA, got {value!r}")
    known = codecarbon_countries()
    if known is not None and code not in known:
        import difflib

        near = difflib.get_close_matches(code, sorted(known), n=3)
        hint = f"; close: {', '.join(near)}" if near else ""
        raise ValueError(f"codecarbon has no grid mix for country {value!r} (ISO 3166-1 alpha-3 codes such as "
                         f"DEU, FRA, GBR{hint})")
    return code


def node_country(node_config: Mapping[str, Any]) -> str:
    """The ``emissions-country`` of a node config, checked; :data:`DEFAULT_COUNTRY` when unset."""
    value = node_config.get(NODE_CONFIG_KEY)
    if value is None:
        return DEFAULT_COUNTRY
    try:
        return check_country(value)
    except ValueError as exc:
        raise ValueError(f"node-config {NODE_CONFIG_KEY}: {exc}") from None

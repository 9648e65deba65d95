"""Scenarios selectable by name: ``bank``, ``edge-iot``, ``promo-surge``, ``openb``.

    from iro_fed.sim.scenarios import build_scenario
    scenario = build_scenario("bank", seed=1, hours=24, promo_day=0)

Each entry declares its parameters with defaults (``--set KEY=VALUE`` on the command line
overrides them, converted to the default's type) and its default length in hours.

``carbon.ZONE=FILE`` (``--set carbon.DE=de.csv``, repeatable) replaces the shipped carbon series
of a zone the scenario reads with a user's own CSV (any format ``load_carbon_csv`` reads), for
every domain on that zone. It is a ``--set`` key like the bank's ``carbon_de=DE``: a scenario
input, so the library (``simulate(settings=...)``), ``iro feedback-sim``, ``iro train`` and the gym
environment take it too. The file is read at its own timestamps and must cover the run and its
day of history (an error naming the setting otherwise, never a wrap or a held last value).

``carbon_basis`` (``lca``, the default, or ``direct``), a setting every scenario takes, is the
accounting basis of the run's carbon intensities: every zone is read on it (the shipped ES and NO
files and a user's Electricity Maps export have both columns; the shipped DE, GB and FR series
are life-cycle only, so ``direct`` is an error naming the setting unless ``carbon.ZONE=FILE``
replaces each of them). The report's ``scenario_params`` carry it.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from iro_fed.sim.model import Scenario


class UnknownScenarioError(KeyError):
    """A scenario name that is not registered."""

    def __str__(self) -> str:
        return str(self.args[0])


@dataclass(frozen=True)
class ScenarioEntry:
    name: str
    module: str
    summary: str

    def _mod(self) -> Any:
        import importlib

        return importlib.import_module(self.module)

    @property
    def params(self) -> dict[str, Any]:
        return dict(self._mod().PARAMS)

    @property
    def default_hours(self) -> float:
        return float(self._mod().DEFAULT_HOURS)

    @property
    def builder(self) -> Callable[..., Scenario]:
        return self._mod().build

    def carbon_zones(self, params: Mapping[str, Any]) -> list[str]:
        """The carbon zones the scenario's domains read with ``params`` (over its defaults)."""
        return self._mod().carbon_zones({**self.params, **params})


#: Settings ``carbon.ZONE`` name a user's carbon CSV for that zone.
CARBON_PREFIX = "carbon."
#: The setting every scenario takes for the accounting basis of its carbon intensities.
BASIS_KEY = "carbon_basis"


def carbon_files(entry: ScenarioEntry, params: Mapping[str, Any]) -> dict[str, tuple[str, str]]:
    """The ``carbon.ZONE`` settings of ``params`` as zone (as the scenario spells it) -> (setting,
    file); a ValueError names the setting when the scenario reads no such zone (listing those it
    reads), the zone is given twice, or the value is not a file path."""
    zones = entry.carbon_zones({k: v for k, v in params.items() if not k.startswith(CARBON_PREFIX) and k != BASIS_KEY})
    by_key = {z.upper(): z for z in zones}
    out: dict[str, tuple[str, str]] = {}
    for key, value in params.items():
        if not key.startswith(CARBON_PREFIX):
            continue
        given = key.removeprefix(CARBON_PREFIX)
        zone = by_key.get(given.strip().upper())
        if zone is None:
            raise ValueError(f"{key}: scenario {entry.name!r} reads no carbon zone {given!r} "
                             f"(its zones: {', '.join(zones) or 'none'})")
        if zone in out:
            raise ValueError(f"{key}: zone {zone!r} given twice (also as {out[zone][0]})")
        if not isinstance(value, str | os.PathLike) or not str(value).strip():
            raise ValueError(f"{key}: expected the path of a carbon-intensity CSV, got {value!r}")
        out[zone] = (key, str(value))
    return out


def as_given(text: str, files: Mapping[str, tuple[str, str]]) -> str:
    """A builder's error about ``carbon.ZONE`` (the zone as the scenario spells it) named by the
    key the user gave (``carbon.es``), so that the command line reports it as that ``--set``."""
    for zone, (key, _) in files.items():
        canonical = f"setting {CARBON_PREFIX + zone!r}: "
        if text.startswith(canonical):
            return f"setting {key!r}: " + text.removeprefix(canonical)
    return text


SCENARIOS: dict[str, ScenarioEntry] = {
    "bank": ScenarioEntry("bank", "iro_fed.sim.scenarios.bank",
                          "three zones: online txn (primary), nightly batch (secondary), cloud burst; 12x promo peak"),
    "edge-iot": ScenarioEntry("edge-iot", "iro_fed.sim.scenarios.edge_iot",
                              "four edge sites and two cloud regions; site-bound IoT pods, analytics anywhere"),
    "promo-surge": ScenarioEntry("promo-surge", "iro_fed.sim.scenarios.promo_surge",
                                 "e-commerce flash sale of heterogeneous GPU/CPU pods that fragments capacity"),
    "openb": ScenarioEntry("openb", "iro_fed.sim.scenarios.openb",
                           "replay of the Alibaba openb GPU trace with creation / deletion times over three domains"),
}


def build_scenario(name: str, seed: int = 0, hours: float | None = None, step_s: float = 60.0, **params: Any) -> Scenario:
    """Build a registered scenario; unknown names and parameters raise with the known ones."""
    from iro_fed.sim.engine import SimConfigError, convert_setting
    from iro_fed.sim.scenarios.common import CarbonInputs, check_basis, run_steps
    from iro_fed.sim.signals import DEFAULT_CARBON_BASIS, carbon_basis

    entry = SCENARIOS.get(name)
    if entry is None:
        raise UnknownScenarioError(f"unknown scenario {name!r} (known: {', '.join(SCENARIOS)})")
    defaults = entry.params
    converted = {}
    for key, value in params.items():
        if key.startswith(CARBON_PREFIX) or key == BASIS_KEY:
            continue  # read below, once the zones (the bank's carbon_de etc.) are known
        if key not in defaults:
            raise SimConfigError(f"scenario {name!r}: unknown parameter {key!r} (known: {', '.join(sorted(defaults))})")
        converted[key] = convert_setting(key, value, type(defaults[key]))
    if "start" in converted:  # every builder reads it; its parse error named the text, not the setting
        from iro_fed.sim.signals import parse_time

        try:
            parse_time(converted["start"])
        except ValueError as exc:
            raise SimConfigError(f"scenario {name!r}: setting 'start': {exc}") from None
    h = entry.default_hours if hours is None else float(hours)
    if h <= 0:
        raise SimConfigError(f"hours must be > 0, got {h}")
    if step_s <= 0:
        raise SimConfigError(f"step_s must be > 0, got {step_s}")
    if run_steps(h, step_s) < 1:  # the builders round hours to whole steps
        raise SimConfigError(f"hours must cover at least one step of {step_s:g} s, got {h:g}")
    try:  # before any file is read: a user's Electricity Maps export is read on it
        basis = carbon_basis(params.get(BASIS_KEY, DEFAULT_CARBON_BASIS))
    except ValueError as exc:
        raise SimConfigError(f"scenario {name!r}: setting {BASIS_KEY!r}: {exc}") from None
    user: dict[str, tuple[str, Any]] = {}
    files: dict[str, tuple[str, str]] = {}
    if any(key.startswith(CARBON_PREFIX) for key in params):
        from iro_fed.sim.scenarios.common import user_series

        try:
            files = carbon_files(entry, {**converted, **{k: v for k, v in params.items() if k.startswith(CARBON_PREFIX)}})
        except ValueError as exc:
            raise SimConfigError(f"scenario {name!r}: setting {exc}") from None
        for zone, (key, path) in files.items():
            try:
                user[zone] = (path, user_series(zone, path, basis))
            except ValueError as exc:  # SignalFormatError: the file, line and column
                raise SimConfigError(f"scenario {name!r}: setting {key!r}: {exc}") from exc
    try:
        check_basis(entry.carbon_zones(converted), basis, user)  # one run, one basis
        scenario = entry.builder(seed, h, step_s, carbon_series=CarbonInputs(user, basis), **converted)
    except (ValueError, KeyError) as exc:  # bad parameter values, signals or trace files
        raise SimConfigError(f"scenario {name!r}: {as_given(str(exc), files)}") from exc
    scenario.params[BASIS_KEY] = basis  # the report's scenario_params say which basis was read
    if user:  # for the report: which of the zones came from the user's own files
        scenario.notes["carbon_files"] = {zone: str(path) for zone, (path, _) in user.items()}
    return scenario


def split_settings(name: str, settings: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """``--set`` pairs split into scenario parameters and engine settings (unknown keys raise)."""
    from iro_fed.sim.engine import SimConfig, SimConfigError

    entry = SCENARIOS.get(name)
    if entry is None:
        raise UnknownScenarioError(f"unknown scenario {name!r} (known: {', '.join(SCENARIOS)})")
    scenario_keys = entry.params
    engine_keys = SimConfig.fields()
    scen, eng = {}, {}
    for key, value in settings.items():
        if key in scenario_keys or key.startswith(CARBON_PREFIX) or key == BASIS_KEY:
            scen[key] = value
        elif key in engine_keys:
            eng[key] = value
        else:
            known = ", ".join(sorted(set(scenario_keys) | set(engine_keys)))
            raise SimConfigError(f"--set {key}: unknown setting for scenario {name!r} (known: {known}, "
                                 f"{BASIS_KEY}, {CARBON_PREFIX}ZONE=FILE)")
    try:  # before any data is read: the zone must be one the scenario reads
        carbon_files(entry, scen)
    except ValueError as exc:
        raise SimConfigError(f"--set {exc}") from None
    return scen, eng


__all__ = ["BASIS_KEY", "CARBON_PREFIX", "SCENARIOS", "ScenarioEntry", "UnknownScenarioError", "build_scenario", "carbon_files",
           "split_settings"]

"""Scenarios selectable by name: ``bank``, ``edge-iot``, ``promo-surge``, ``openb``.

    from iro_fed.sim.scenarios import build_scenario
    scenario = build_scenario("bank", seed=1, hours=24, promo_day=0)

Each entry declares its parameters with defaults (``--set KEY=VALUE`` on the command line
overrides them, converted to the default's type) and its default length in hours.
"""

from __future__ import annotations

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
    from iro_fed.sim.scenarios.common import run_steps

    entry = SCENARIOS.get(name)
    if entry is None:
        raise UnknownScenarioError(f"unknown scenario {name!r} (known: {', '.join(SCENARIOS)})")
    defaults = entry.params
    converted = {}
    for key, value in params.items():
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
    try:
        return entry.builder(seed, h, step_s, **converted)
    except (ValueError, KeyError) as exc:  # bad parameter values, signals or trace files
        raise SimConfigError(f"scenario {name!r}: {exc}") from exc


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
        if key in scenario_keys:
            scen[key] = value
        elif key in engine_keys:
            eng[key] = value
        else:
            known = ", ".join(sorted(set(scenario_keys) | set(engine_keys)))
            raise SimConfigError(f"--set {key}: unknown setting for scenario {name!r} (known: {known})")
    return scen, eng


__all__ = ["SCENARIOS", "ScenarioEntry", "UnknownScenarioError", "build_scenario", "split_settings"]

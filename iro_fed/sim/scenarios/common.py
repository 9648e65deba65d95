"""Helpers shared by the scenario builders: carbon windows, latency, traffic profiles."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from iro_fed.sim.signals import CarbonSeries, _iso, carbon_zone, constant, load_latency_matrix, parse_time

#: Hourly shape of retail payment traffic (share of the daily peak), hour 0..23, UTC.
PAYMENT_PROFILE = (
    0.12, 0.08, 0.06, 0.05, 0.06, 0.10, 0.20, 0.35, 0.55, 0.65, 0.70, 0.75,
    0.80, 0.85, 1.00, 1.00, 0.85, 0.75, 0.70, 0.60, 0.50, 0.40, 0.30, 0.20,
)
#: Hourly shape of IoT telemetry (flatter, a daytime hump).
IOT_PROFILE = (
    0.45, 0.42, 0.40, 0.40, 0.42, 0.50, 0.65, 0.80, 0.90, 0.95, 1.00, 1.00,
    1.00, 1.00, 0.98, 0.95, 0.92, 0.90, 0.85, 0.75, 0.65, 0.58, 0.52, 0.48,
)

_series_cache: dict[str, CarbonSeries] = {}


def series_for(source: str) -> CarbonSeries:
    """``DE``/``GB``/``FR``/``ES``/``NO`` (shared/data/carbon), ``codecarbon:DEU`` or ``const:120``."""
    if source.startswith("const:"):
        return constant(float(source.split(":", 1)[1]), name=source)
    if source.startswith("codecarbon:"):
        from iro_fed.sim.signals import codecarbon_country

        return codecarbon_country(source.split(":", 1)[1])
    if source not in _series_cache:
        _series_cache[source] = carbon_zone(source)
    return _series_cache[source]


def run_steps(hours: float, step_s: float) -> int:
    """Steps of a run of ``hours`` (every builder rounds to whole steps this way)."""
    return int(round(hours * 3600 / step_s))


def carbon_window(source: str, start: str, history: int, steps: int, step_s: float) -> np.ndarray:
    """Realized intensity for steps ``-history .. steps-1`` of a run starting at ``start`` (UTC):
    value i is the mean intensity over step ``i - history`` (see :meth:`CarbonSeries.window`).

    The 2022 files (ES, NO) are read on the same month, day and time as ``start``, so that one
    scenario can mix them with the 2020 files. A run that needs data outside the series (the
    history included) is an error naming the series, its coverage and what the run needs: a
    series never wraps around and its last value is never extended.
    """
    series = series_for(source)
    t0 = parse_time(start)
    if source in ("ES", "NO"):
        text = start.strip()
        if text[4:10] == "-02-29":
            raise ValueError(f"start {start!r}: the 2022 carbon series {source} is read on the same month, day and "
                             "time as the start, and 2022 has no February 29")
        t0 = parse_time("2022" + text[4:])
    lo = t0 - history * step_s
    hi = lo + (history + steps) * step_s
    if lo < series.start or hi > series.end:
        raise ValueError(
            f"carbon series {series.name!r} covers {_iso(series.start)} .. {_iso(series.end)}; asked for a time "
            f"outside it: the run needs "
            f"{_iso(lo)} .. {_iso(hi)} ({history * step_s / 3600.0:g} h of history before the start for the "
            f"deferral forecast, then {steps * step_s / 3600.0:g} h)"
        )
    return series.window(lo, history + steps, step_s)


def latency_between(rows: Mapping[str, str], cols: Mapping[str, str], local_ms: Mapping[tuple[str, str], float] | None = None) -> np.ndarray:
    """[rows, cols] round-trip ms from the GCP matrix; ``rows``/``cols`` map our names to GCP
    region names; ``local_ms`` overrides pairs (edge sites next to their users)."""
    matrix = load_latency_matrix()
    out = matrix.submatrix(list(rows.values()), list(cols.values()))
    for (r, c), v in (local_ms or {}).items():
        out[list(rows).index(r), list(cols).index(c)] = v
    return out


def daily_curve(profile: Sequence[float], steps: int, step_s: float, start_hour: float = 0.0) -> np.ndarray:
    """The hourly profile interpolated to every step (periodic over the day)."""
    hours = start_hour + np.arange(steps) * step_s / 3600.0
    xp = np.arange(25, dtype=np.float64)
    fp = np.array(list(profile) + [profile[0]], dtype=np.float64)
    return np.interp(hours % 24.0, xp, fp)


def bump(steps: int, step_s: float, day: int, plateau: tuple[float, float], ramp_h: float, start_hour: float = 0.0) -> np.ndarray:
    """0..1: 1 inside ``plateau`` hours (UTC clock hours) of ``day`` (day 0 is the start's date,
    step 0 at ``start_hour``), linear ramps of ``ramp_h`` hours on both sides."""
    hours = start_hour + np.arange(steps) * step_s / 3600.0 - 24.0 * day
    lo, hi = plateau
    up = np.clip((hours - (lo - ramp_h)) / ramp_h, 0.0, 1.0)
    down = np.clip(((hi + ramp_h) - hours) / ramp_h, 0.0, 1.0)
    return np.minimum(up, down)


def hour_windows(steps: int, step_s: float, lo: float, hi: float, start_hour: float = 0.0) -> list[tuple[int, int]]:
    """Step windows of the UTC clock hours [lo, hi) on every day the run overlaps (step 0 at
    ``start_hour``), clipped to the run: a run starting at 18:00 has the next day's peak."""
    per_h = 3600.0 / step_s
    days = int(np.ceil((start_hour + steps * step_s / 3600.0) / 24.0))
    out = []
    for d in range(days + 1):
        a = int(round((24 * d + lo - start_hour) * per_h))
        b = int(round((24 * d + hi - start_hour) * per_h))
        a, b = max(a, 0), min(b, steps)
        if a < b:
            out.append((a, b))
    return out

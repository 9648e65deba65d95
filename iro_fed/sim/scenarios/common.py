"""Helpers shared by the scenario builders: carbon windows, latency, traffic profiles."""

from __future__ import annotations

import calendar
import math
import os
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

from iro_fed.problem_io import MAX_NUMBER
from iro_fed.sim.signals import (
    CARBON_FILES,
    DEFAULT_CARBON_BASIS,
    ZONE_BASES,
    CarbonSeries,
    _iso,
    carbon_basis,
    carbon_zone,
    constant,
    load_carbon_csv,
    load_latency_matrix,
    missing_basis,
    parse_time,
)

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

#: Bounds shared by the scenarios' parameters. Counts are built up front (nodes, jobs: a huge
#: count only exhausts memory); rates and factors multiply into traffic, which must stay finite
#: (and its replica count an int64) however far past any real system they go.
MAX_NODES = 10_000
MAX_JOBS = 10_000
MAX_RPS = 1e9
MAX_FACTOR = 1e6
#: The objective weights every scenario takes: >= 0, as in a problem file (a negative weight
#: would reward carbon or latency).
WEIGHT_RANGES: dict[str, tuple[float | None, float | None]] = {"w_carbon": (0.0, None), "w_latency": (0.0, None)}
#: ... and at most :data:`~iro_fed.problem_io.MAX_NUMBER` (1e10), a problem file's cap on its
#: weights (w_latency=1.7e308 made the score inf, and the report could not be written).
#: :func:`check_ranges` checks these caps on every scenario's parameters.
WEIGHT_CAPS: dict[str, float] = {"w_carbon": MAX_NUMBER, "w_latency": MAX_NUMBER}

_series_cache: dict[tuple[str, str], CarbonSeries] = {}
#: A user's own carbon series by zone: (the file as given, its series).
UserCarbon = Mapping[str, tuple[str, CarbonSeries]]
#: A user's carbon files by (path, mtime, size, basis): the gym environment rebuilds its scenario
#: on every reset, and a year of 15 min data is ~35,000 rows to parse each time.
_user_cache: dict[tuple[str, int, int, str], CarbonSeries] = {}
#: The scenario setting that picks the run's carbon accounting basis (``lca`` or ``direct``).
BASIS_SETTING = "carbon_basis"


class CarbonInputs(dict[str, tuple[str, CarbonSeries]]):
    """What a builder's ``carbon_series`` argument carries: the user's own series by zone (a
    :data:`UserCarbon`) and ``basis``, the accounting basis every zone of the run is read on
    (:func:`carbon_window` reads it; a plain mapping or None reads :data:`DEFAULT_CARBON_BASIS`).
    It rides on the mapping the builders already pass on, so that no builder has to know it."""

    def __init__(self, files: UserCarbon | None = None, basis: str = DEFAULT_CARBON_BASIS) -> None:
        super().__init__(files or {})
        self.basis = carbon_basis(basis)


def basis_of(user: UserCarbon | None) -> str:
    """The accounting basis a builder's ``carbon_series`` argument asks for."""
    return getattr(user, "basis", DEFAULT_CARBON_BASIS)


def check_basis(zones: Sequence[str], basis: str, user: UserCarbon | None = None) -> None:
    """A ValueError naming the ``carbon_basis`` setting when a zone the run reads from the shipped
    data (not replaced by a user's file) has no series on ``basis``: one run, one basis."""
    sources = list(dict.fromkeys(carbon_source(z) for z in zones))
    for source in sources:
        check_codecarbon_basis(source, basis)
    lacking = [z for z in sources if z in ZONE_BASES and basis not in ZONE_BASES[z] and not (user and z in user)]
    if lacking:
        raise ValueError(f"setting {BASIS_SETTING!r}: {missing_basis(lacking, basis)}; use {BASIS_SETTING}=lca, or "
                         f"give {', '.join(f'carbon.{z}=FILE' for z in lacking)} (an Electricity Maps export "
                         f"with a {basis} column)")


def check_codecarbon_basis(source: str, basis: str) -> None:
    """A ValueError naming the ``carbon_basis`` setting when ``source`` is codecarbon's country mean
    and ``basis`` is not ``lca``: codecarbon's table holds Ember / Our World in Data yearly means,
    life-cycle figures, so a direct run that read one mixed bases while its report said direct."""
    source = carbon_source(source)
    if not source.startswith("codecarbon:"):
        return
    basis = carbon_basis(basis)
    if basis != "lca":
        raise ValueError(f"setting {BASIS_SETTING!r}: {source} is codecarbon's yearly country mean, a life-cycle "
                         f"(lca) intensity, so it cannot be read on the {basis} basis; use {BASIS_SETTING}=lca, or "
                         f"a source with {basis} values (ES, NO, const:GRAMS_PER_KWH, or a zone read from your own "
                         f"export, carbon.ZONE=FILE)")


def check_ranges(p: Mapping[str, object], ranges: Mapping[str, tuple[float | None, float | None]]) -> None:
    """Each parameter ``key`` of ``p`` within its inclusive ``(low, high)`` (None: unbounded),
    and each objective weight ``p`` has at most its :data:`WEIGHT_CAPS`, else a ValueError naming
    it (``build_scenario`` reports it as a setting error)."""
    for key, cap in WEIGHT_CAPS.items():
        if key in p and float(p[key]) > cap:  # type: ignore[arg-type]
            raise ValueError(f"setting {key!r}: must be at most {cap:g} (as in a problem file), got {p[key]!r}")
    for key, (low, high) in ranges.items():
        value = p[key]
        number = float(value)  # type: ignore[arg-type]
        if math.isfinite(number) and (low is None or number >= low) and (high is None or number <= high):
            continue
        if low is not None and high is not None:
            want = f"must be between {low:g} and {high:g}"
        else:
            want = f"must be >= {low:g}" if low is not None else f"must be <= {high:g}"
        raise ValueError(f"setting {key!r}: {want}, got {value!r}")


def carbon_source(text: str) -> str:
    """A carbon source as :func:`series_for` reads it: a shipped zone in upper case (``es`` is
    ``ES``), ``const:120``, ``codecarbon:DEU``; the prefixes in any case, blanks dropped. Every
    reader normalises through here, so one spelling cannot take another path (``es`` skipped the
    2022 files' calendar-year reading)."""
    text = str(text).strip()
    kind, sep, rest = text.partition(":")
    if sep and kind.strip().lower() == "const":
        return f"const:{rest.strip()}"
    if sep and kind.strip().lower() == "codecarbon":
        return f"codecarbon:{rest.strip().upper()}"
    return text.upper()


def carbon_setting(key: str, value: object) -> str:
    """The setting ``key`` (the bank's ``carbon_de`` etc.) as a normalised source whose series
    can be read; a ValueError names the setting otherwise (``build_scenario`` reports it)."""
    source = carbon_source(str(value))
    try:
        series_for(source)
    except ValueError as exc:
        raise ValueError(f"setting {key!r}: {exc}") from None
    return source


def series_for(source: str, basis: str = DEFAULT_CARBON_BASIS) -> CarbonSeries:
    """``DE``/``GB``/``FR``/``ES``/``NO`` (shared/data/carbon) on ``basis``, ``codecarbon:DEU`` or
    ``const:120`` (any case: see :func:`carbon_source`). A constant is read as given on either
    basis; codecarbon's country mean only on ``lca`` (it is a life-cycle figure: see
    :func:`check_codecarbon_basis`)."""
    source = carbon_source(source)
    check_codecarbon_basis(source, basis)
    if source.startswith("const:"):
        text = source.split(":", 1)[1]
        try:
            value = float(text)
        except ValueError:
            raise ValueError(f"const: expected a carbon intensity in gCO2/kWh (e.g. const:120), got {text!r}") from None
        return constant(value, name=source)
    if source.startswith("codecarbon:"):
        from iro_fed.sim.signals import codecarbon_country

        if (source, "") not in _series_cache:  # a table lookup per build otherwise (the gym env rebuilds on reset)
            _series_cache[source, ""] = codecarbon_country(source.split(":", 1)[1])
        return _series_cache[source, ""]
    if source not in CARBON_FILES:
        known = ", ".join(CARBON_FILES)
        raise ValueError(f"no carbon series for zone {source!r} (known: {known}; or const:GRAMS_PER_KWH, codecarbon:ISO3)")
    basis = carbon_basis(basis)
    if basis not in ZONE_BASES[source]:  # before the cache: the message names the setting
        raise ValueError(f"setting {BASIS_SETTING!r}: {missing_basis([source], basis)}")
    if (source, basis) not in _series_cache:
        _series_cache[source, basis] = carbon_zone(source, basis=basis)
    return _series_cache[source, basis]


def user_series(zone: str, path: str | os.PathLike, basis: str = DEFAULT_CARBON_BASIS) -> CarbonSeries:
    """A user's carbon-intensity CSV for ``zone`` (any format :func:`load_carbon_csv` reads; its
    :class:`SignalFormatError` names the file, line and column), on the run's ``basis``: an
    Electricity Maps export's column of that basis; a one-column file is read as given."""
    p = Path(path).expanduser()  # ~/de.csv, as pods_file and nodes_file read it
    try:
        st = p.stat()
    except OSError:
        return load_carbon_csv(p, column=carbon_basis(basis), name=zone)  # raises its "cannot read file" error
    key = (str(p.resolve()), st.st_mtime_ns, st.st_size, carbon_basis(basis))
    if key not in _user_cache:
        _user_cache[key] = load_carbon_csv(p, column=key[3], name=zone)
    return _user_cache[key]


def stream(seed: int, key: int, index: int) -> np.random.Generator:
    """The seed's independent stream for one purpose (``key``) and ``index``: its draws do not
    depend on the run's length or on any other stream's."""
    return np.random.default_rng([seed, key, index])


def run_steps(hours: float, step_s: float) -> int:
    """Steps of a run of ``hours`` (every builder rounds to whole steps this way)."""
    return int(round(hours * 3600 / step_s))


def carbon_window(source: str, start: str, history: int, steps: int, step_s: float,
                  user: UserCarbon | None = None) -> np.ndarray:
    """Realized intensity for steps ``-history .. steps-1`` of a run starting at ``start`` (UTC):
    value i is the mean intensity over step ``i - history`` (see :meth:`CarbonSeries.window`).

    ``user`` maps a zone to a user's own (file, series) (``--set carbon.DE=FILE``), read in place
    of ``source`` when it names that zone: at its own timestamps (never moved to another year), so
    ``start`` must fall inside it; a series that does not cover the run is an error naming the
    setting and the file. A :class:`CarbonInputs` also names the run's accounting basis, on which
    the shipped series are read (``lca`` otherwise; ``direct`` only for ES and NO).

    The 2022 files (ES, NO) are read on the same month, day and UTC time as each step
    (:func:`on_calendar_year`), so that one scenario can mix them with the 2020 files and a given
    moment reads the same 2022 hour whatever the run's start; February 29 of a leap year reads
    February 28 (2022 has none). A run that needs data outside the series (the history
    included; for a 2022 series, beyond one calendar year) is an error naming the series, its
    coverage and what the run needs: a series never wraps around and its last value is never
    extended.
    """
    source = carbon_source(source)
    t0 = parse_time(start)
    lo = t0 - history * step_s
    hi = lo + (history + steps) * step_s
    need = (f"the run needs {_iso(lo)} .. {_iso(hi)} ({history * step_s / 3600.0:g} h of history before the start "
            f"for the deferral forecast, then {steps * step_s / 3600.0:g} h)")
    if user and source in user:
        path, own = user[source]
        if lo < own.start or hi > own.end:  # never wrapped, never held past its end
            raise ValueError(f"setting 'carbon.{source}': {path} covers {_iso(own.start)} .. {_iso(own.end)}; {need}: "
                             f"give a series that covers it or move 'start'")
        return own.window(lo, history + steps, step_s)
    series = series_for(source, basis_of(user))
    read = series
    if source in ("ES", "NO"):
        read = on_calendar_year(series, datetime.fromtimestamp(lo, tz=UTC).year)
    if lo < read.start or hi > read.end:
        raise ValueError(
            f"carbon series {series.name!r} covers {_iso(series.start)} .. {_iso(series.end)}; asked for a time "
            f"outside it: {need}"
            + ("" if read is series else f", read on the same month, day and UTC time within one calendar year "
               f"({_iso(read.start)} .. {_iso(read.end)} here)")
            + f"; setting 'carbon.{source}' reads your own series of that zone from a CSV file"
        )
    return read.window(lo, history + steps, step_s)


def on_calendar_year(series: CarbonSeries, year: int) -> CarbonSeries:
    """A series of one non-leap calendar year (the 2022 files) moved to ``year`` by month, day and
    UTC time: every moment of ``year`` reads the same moment of the data's year. In a leap year
    February 29 repeats February 28 and March 1 on reads March 1 (moving the series by a fixed
    offset instead read every day after February 29 one day late). A series that is not of one
    non-leap year is moved by the whole-year offset alone."""
    src = datetime.fromtimestamp(series.start, tz=UTC).year
    shift = _year_start(year) - _year_start(src)
    times, values = series.times, series.values
    feb28, mar1 = _year_start(src) + 58 * 86400.0, _year_start(src) + 59 * 86400.0
    if calendar.isleap(src) or not calendar.isleap(year) or not (series.start <= feb28 and mar1 < series.end):
        return CarbonSeries(series.name, times + shift, values)
    before, feb, after = times < feb28, (times > feb28) & (times < mar1), times > mar1
    # Breakpoints at both midnights so each copied day is exact whatever the sampling.
    day_t = np.concatenate([[feb28], times[feb]])
    day_v = np.concatenate([[float(series.at(feb28))], values[feb]])
    new_t = np.concatenate([times[before], day_t, day_t + 86400.0, [mar1 + 86400.0], times[after] + 86400.0]) + shift
    new_v = np.concatenate([values[before], day_v, day_v, [float(series.at(mar1))], values[after]])
    return CarbonSeries(series.name, new_t, new_v)


def _year_start(year: int) -> float:
    return datetime(year, 1, 1, tzinfo=UTC).timestamp()


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

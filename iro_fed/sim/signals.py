"""Signals the simulator reads: grid carbon intensity over time, its forecast, and latency.

Carbon intensity (gCO2/kWh) comes from one of:

* the "Let's Wait Awhile" CSVs in ``shared/data/carbon`` (``ger_ci.csv``, ``gb_ci.csv``,
  ``fr_ci.csv``): header ``Time,Carbon Intensity``, 15 or 30 min steps, 2019-12-20 .. 2021-01-09;
* the Electricity Maps hourly CSVs (``ES_2022_hourly.csv``, ``NO_2022_hourly.csv``): header
  ``Datetime (UTC),...,Carbon Intensity gCO₂eq/kWh (direct),...(LCA),...``; :func:`load_carbon_csv`
  reads the direct column unless ``column="lca"`` (:func:`carbon_zone` reads the run's basis,
  life-cycle by default). Electricity Maps' current exports name them ``Carbon intensity
  gCO₂eq/kWh (direct)`` and ``... (Life cycle)``: read the same (column names are matched
  without regard to case);
* codecarbon's per-country yearly mean (``codecarbon.input.DataSource``, ISO-3 country code),
  a constant series;
* a constant.

Accounting basis (:data:`CARBON_BASES`): the Let's Wait Awhile files were computed from ENTSO-E
generation per source with the IPCC SRREN *life-cycle* median factors (coal 1001, gas 469,
nuclear 16, wind 12 g/kWh; their ``compute_carbon_intensity.py``), so they have no direct
values; the Electricity Maps files have both. Mixing direct ES/NO values with life-cycle DE/GB/FR
ones made Oslo look ~3x and Madrid ~1.3x greener than like for like (2022 means: NO 12.8 direct
vs 38.1 LCA, ES 166.8 vs 219.3), so a run reads every zone on one basis, ``lca`` by default
(:data:`DEFAULT_CARBON_BASIS`; the scenarios' ``carbon_basis`` setting); ``direct`` exists only
for the zones of :data:`ZONE_BASES` that have it.

:func:`load_carbon_csv` detects the format from the header. Malformed input raises
:class:`SignalFormatError` naming the file, line and column. A :class:`CarbonSeries` is a step
function over UTC timestamps; :meth:`CarbonSeries.window` resamples it to the simulator's step
from a start time (the mean over each step), and :func:`persistence_forecast` is the day-ahead forecast the deferral uses
(each future hour takes the value observed at the same time of day on the last day already seen:
only the past is used).

Gaps are kept, not refused (users' own grid data often has them): the value before a gap holds
across it, as anywhere in a step function. So that this is not silent, two consecutive times more
than :data:`GAP_FACTOR` times the series' median step apart are a gap: :attr:`CarbonSeries.gaps`
lists them, and :func:`load_carbon_csv` logs one warning per file naming their count and the
longest. The shipped files have none.

Latency: ``shared/data/latency/gcp_latency_matrix.csv`` holds round-trip ms between 34 GCP
regions keyed by grid-zone code, and ``gcp_dc_zonecode_mapper.json`` maps region names to those
codes in the same order (two regions, us-east4 and us-east5, share the code US-MIDA-PJM, so the
matrix is keyed by region name). Rows and header columns may come in any order, each naming its
region by zone code or by region name; the rows (columns) of a shared code fill those of its
regions no other row (column) names, in mapper order. An empty cell, ``NaN``, ``NA`` or ``N/A``
(any case; what pandas and R write for a missing value) is an unknown latency, NaN, as in the
problem model's ``latency_ms``. :func:`load_latency_matrix` returns a :class:`LatencyMatrix`
addressable by region name or by grid-zone code.

Times are ISO 8601: ``2020-03-02 00:00:00`` or ``2020-03-02T00:00:00`` (UTC when there is no
offset), with ``Z`` or an offset such as ``+01:00`` (converted to UTC), with a fraction
(``.000Z``), or a date alone (``2020-03-02``, its midnight UTC). A bare number is refused: epoch
seconds and milliseconds cannot be told apart, and no provider header read here says which.
"""

from __future__ import annotations

import csv
import json
import logging
import os
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import cached_property
from pathlib import Path

import numpy as np

log = logging.getLogger(__name__)

#: Where the shared data sets live, relative to the repository root (``IRO_DATA_DIR`` overrides).
DEFAULT_DATA_DIR = Path(__file__).resolve().parents[2].parent / "shared" / "data"

WAIT_AWHILE_COLUMNS = ("Time", "Carbon Intensity")
EMAPS_TIME = "Datetime (UTC)"
EMAPS_DIRECT = "Carbon Intensity gCO₂eq/kWh (direct)"
EMAPS_LCA = "Carbon Intensity gCO₂eq/kWh (LCA)"
#: The life-cycle column as Electricity Maps' current exports name it (the direct one only
#: changed case there: "Carbon intensity").
EMAPS_LCA_NOW = "Carbon intensity gCO₂eq/kWh (Life cycle)"
#: Named series in ``shared/data/carbon`` (grid zone -> file).
CARBON_FILES = {
    "DE": "ger_ci.csv",
    "GB": "gb_ci.csv",
    "FR": "fr_ci.csv",
    "ES": "ES_2022_hourly.csv",
    "NO": "NO_2022_hourly.csv",
}
#: The accounting bases of a carbon intensity: ``lca``, life-cycle emissions per kWh (plant
#: construction, fuel chain and decommissioning included), and ``direct``, the stack emissions of
#: combustion alone. One run reads every zone on one basis.
CARBON_BASES = ("lca", "direct")
DEFAULT_CARBON_BASIS = "lca"
#: The bases each named series has. Let's Wait Awhile's DE/GB/FR are life-cycle values only
#: (IPCC SRREN medians per source); the Electricity Maps files have both columns.
ZONE_BASES = {
    "DE": ("lca",),
    "GB": ("lca",),
    "FR": ("lca",),
    "ES": ("lca", "direct"),
    "NO": ("lca", "direct"),
}

#: Consecutive times more than this many median steps apart are a gap (one value held across
#: it). 3 leaves room for mixed 15/30 min steps and a local-time DST jump in hourly data.
GAP_FACTOR = 3.0


class SignalFormatError(ValueError):
    """A signal file that cannot be read; the message names the file, line and column."""


def data_dir() -> Path:
    """The shared data folder: ``$IRO_DATA_DIR`` or ``../shared/data`` beside the repository."""
    env = os.environ.get("IRO_DATA_DIR")
    return Path(env) if env else DEFAULT_DATA_DIR


@dataclass(frozen=True)
class CarbonSeries:
    """Carbon intensity as a step function: ``values[i]`` holds from ``times[i]`` (UTC seconds)."""

    name: str
    times: np.ndarray  # float64 epoch seconds, strictly increasing
    values: np.ndarray  # float64 gCO2/kWh

    def __post_init__(self) -> None:
        if self.times.shape != self.values.shape or self.times.ndim != 1 or self.times.size == 0:
            raise ValueError(f"carbon series {self.name!r}: times and values must be equal-length, non-empty 1-D arrays")

    @property
    def start(self) -> float:
        return float(self.times[0])

    @cached_property
    def _step(self) -> float:
        """The median sampling interval (3600 s for a single sample; computed once)."""
        return float(np.median(np.diff(self.times))) if self.times.size > 1 else 3600.0

    @cached_property
    def end(self) -> float:
        """The last timestamp plus one sampling interval (the series' coverage; computed once)."""
        if self.times.size == 1 and not np.isfinite(self.times[0]):
            return float("inf")  # a constant
        return float(self.times[-1]) + self._step

    @cached_property
    def gaps(self) -> tuple[tuple[float, float], ...]:
        """Each gap as (time of the last sample before it, time of the first after it), in epoch
        seconds: consecutive times more than :data:`GAP_FACTOR` median steps apart. The value
        at the first time holds across the gap; ``()`` when there is none."""
        if self.times.size < 3:  # with one step there is nothing to compare it with
            return ()
        idx = np.flatnonzero(np.diff(self.times) > GAP_FACTOR * self._step)
        return tuple((float(self.times[i]), float(self.times[i + 1])) for i in idx)

    def at(self, t: np.ndarray | float) -> np.ndarray:
        """Intensity at epoch seconds ``t`` (the value of the last sample at or before t)."""
        t = np.asarray(t, dtype=np.float64)
        if np.any(t < self.times[0]) or np.any(t >= self.end):
            lo, hi = _iso(self.times[0]), _iso(self.end)
            raise ValueError(f"carbon series {self.name!r} covers {lo} .. {hi}; asked for a time outside it")
        idx = np.searchsorted(self.times, t, side="right") - 1
        return self.values[idx]

    def window(self, start: float, steps: int, step_s: float) -> np.ndarray:
        """``steps`` values from epoch ``start`` every ``step_s`` seconds: value i is the mean
        intensity over ``[start + i * step_s, start + (i + 1) * step_s)``.

        A step inside one sampling interval takes that sample exactly (the 60 s steps of the
        scenarios on 15 to 60 min data); a step spanning several (hourly steps on 15 min data)
        takes their time-weighted mean, not the sample at its start. The whole window must lie
        inside the series' coverage.
        """
        a = start + step_s * np.arange(steps, dtype=np.float64)
        b = a + step_s
        if steps == 0:
            return np.zeros(0)
        if self.times.size == 1 and not np.isfinite(self.times[0]):
            return np.full(steps, float(self.values[0]))
        first = self.at(a)  # raises outside the coverage
        if np.any(b > self.end):
            raise ValueError(f"carbon series {self.name!r} covers {_iso(self.times[0])} .. {_iso(self.end)}; "
                             f"asked for a time outside it (up to {_iso(float(b[-1]))})")
        ia = np.searchsorted(self.times, a, side="right") - 1
        ib = np.searchsorted(self.times, b, side="left") - 1  # the last sample starting before b
        out = np.array(first, dtype=np.float64)
        span = ib > ia
        if span.any():
            # Exact integral of the step function over each spanning step.
            edges = np.append(self.times, self.end)
            cum = np.concatenate([[0.0], np.cumsum(self.values * np.diff(edges))])
            ja, jb = ia[span], ib[span]
            integral = (cum[jb] - cum[ja] + self.values[jb] * (b[span] - self.times[jb])
                        - self.values[ja] * (a[span] - self.times[ja]))
            out[span] = integral / step_s
        return out

    def mean(self) -> float:
        return float(self.values.mean())


def constant(value: float, name: str = "constant") -> CarbonSeries:
    """A constant intensity for every time."""
    if not np.isfinite(value) or value < 0:
        raise ValueError(f"carbon intensity must be finite and >= 0, got {value!r}")
    return CarbonSeries(name, np.array([-np.inf]), np.array([float(value)]))


def codecarbon_country(iso3: str) -> CarbonSeries:
    """The yearly mean intensity of a country from codecarbon's energy-mix table (constant)."""
    try:
        from codecarbon.input import DataSource
    except ImportError as exc:  # pragma: no cover - codecarbon is in the sim extra
        raise ImportError("codecarbon_country needs codecarbon: pip install 'iro-fed[sim]'") from exc
    mix = DataSource().get_global_energy_mix_data()
    code = iso3.strip().upper()
    if code not in mix:
        raise ValueError(f"codecarbon has no energy mix for country {iso3!r} (ISO-3 codes such as DEU, FRA, GBR)")
    row = mix[code]
    return constant(float(row["carbon_intensity"]), name=f"codecarbon:{code}:{row.get('year', '')}")


#: The time forms besides ``2020-03-02 00:00:00`` (UTC) that the readers take, for error messages.
OTHER_TIME_FORMS = ("or ISO 8601 2020-03-02T00:00:00Z, 2020-03-02T00:00:00.000+01:00 (converted to UTC) "
                    "or 2020-03-02 (midnight UTC)")


def _is_number(text: str) -> bool:
    """A bare number could be epoch seconds or milliseconds (or a basic-form date such as
    20200302, which fromisoformat takes): no provider header we read says which."""
    return text.strip().lstrip("+-").replace(".", "", 1).isdigit()


def _parse_time(text: str) -> float:
    text = text.strip()
    if _is_number(text):
        raise ValueError(text)
    try:  # ISO 8601 with or without an offset or fraction, and date-only; ~10x faster than strptime
        parsed = datetime.fromisoformat(text)
    except ValueError:
        pass
    else:
        return (parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)).timestamp()
    # strptime also takes unpadded fields (2020-3-2 0:00), which fromisoformat refuses.
    for fmt in ("%Y-%m-%d %H:%M:%S", "%Y-%m-%dT%H:%M:%S", "%Y-%m-%d %H:%M", "%Y-%m-%dT%H:%M:%SZ"):
        try:
            return datetime.strptime(text, fmt).replace(tzinfo=UTC).timestamp()
        except ValueError:
            continue
    raise ValueError(text)


def _time_error(text: str, lead: str) -> str:
    """What a bad time is told: the accepted forms, and why a number is not one of them."""
    why = " (a bare number is not read: epoch seconds and milliseconds cannot be told apart)" if _is_number(text) else ""
    return f"{lead} 2020-03-02 00:00:00, {OTHER_TIME_FORMS}, got {text!r}{why}"


def parse_time(text: str) -> float:
    """An ISO 8601 time (see :data:`OTHER_TIME_FORMS`) to epoch seconds: an offset is converted to
    UTC, no offset means UTC, a date alone is its midnight; raises ValueError naming the text."""
    try:
        return _parse_time(text)
    except ValueError:
        raise ValueError(_time_error(text, "expected a UTC time like")) from None


def _iso(t: float) -> str:
    if not np.isfinite(t):
        return str(t)
    return datetime.fromtimestamp(float(t), tz=UTC).strftime("%Y-%m-%d %H:%M:%S")


def carbon_basis(value: object) -> str:
    """``value`` as one of :data:`CARBON_BASES` (any case, blanks dropped); a ValueError otherwise."""
    text = str(value).strip().lower()
    if text not in CARBON_BASES:
        raise ValueError(f"expected {' or '.join(repr(b) for b in CARBON_BASES)} (life-cycle or direct "
                         f"gCO2eq/kWh), got {value!r}")
    return text


def load_carbon_csv(path: str | os.PathLike, column: str = "direct", name: str | None = None) -> CarbonSeries:
    """Read a carbon-intensity CSV in either format of ``shared/data/carbon`` (see module doc).

    ``column`` picks an Electricity Maps file's ``direct`` or ``lca`` column (the simulator's
    readers, :func:`carbon_zone` and the scenarios' user files, always pass the run's basis; the
    ``direct`` default is this reader's own, kept for its callers); a ``Time,Carbon Intensity``
    file has one column, read whatever ``column`` says (its basis is its maker's: life-cycle for
    the shipped ones).

    Rows must have increasing times and finite, non-negative values; an empty value or a bad
    time raises :class:`SignalFormatError` with the file, line and column.
    """
    p = Path(path)
    if column not in CARBON_BASES:
        raise ValueError(f"column must be 'direct' or 'lca', got {column!r}")
    try:
        handle = p.open(newline="", encoding="utf-8-sig")
    except OSError as exc:
        raise SignalFormatError(f"{p}: cannot read file: {exc.strerror or exc}") from exc
    with handle:
        reader = csv.reader(handle, strict=True)  # a quote left open: an error, not the rest of the file as one cell
        try:
            header = [h.strip() for h in next(reader)]
        except StopIteration:
            raise SignalFormatError(f"{p}: empty file (expected a header)") from None
        except csv.Error as exc:
            raise SignalFormatError(f"{p}: not a valid CSV file: {exc}") from exc
        except UnicodeDecodeError as exc:
            raise SignalFormatError(_not_utf8(p, exc)) from None
        # Case-blind: the provider's exports have written "Carbon Intensity" and "Carbon intensity".
        folded = [h.casefold() for h in header]

        def find(*names: str) -> int | None:
            return next((folded.index(n.casefold()) for n in names if n.casefold() in folded), None)

        time_col, ci_col, emaps_time = find(WAIT_AWHILE_COLUMNS[0]), find(WAIT_AWHILE_COLUMNS[1]), find(EMAPS_TIME)
        direct, lca = find(EMAPS_DIRECT), find(EMAPS_LCA, EMAPS_LCA_NOW)
        if time_col is not None and ci_col is not None:
            tcol, vcol = time_col, ci_col
        elif emaps_time is not None and (direct is not None or lca is not None):
            chosen = direct if column == "direct" else lca
            if chosen is None:
                want = EMAPS_DIRECT if column == "direct" else f"{EMAPS_LCA}' or '{EMAPS_LCA_NOW}"
                raise SignalFormatError(f"{p}: missing column '{want}' (the {column} carbon intensity)")
            tcol, vcol = emaps_time, chosen
        else:
            raise SignalFormatError(
                f"{p}: unknown header {', '.join(header) or '(empty)'}; expected 'Time,Carbon Intensity' "
                f"or Electricity Maps columns '{EMAPS_TIME}', '{EMAPS_DIRECT}'"
            )
        times: list[float] = []
        values: list[float] = []
        # csv counts records, not lines: a quoted cell may span lines, so errors name the file
        # lines a record starts and ends on, from the reader's line count.
        end = reader.line_num
        try:
            for row in reader:
                first, end = end + 1, reader.line_num
                if not row or all(not c.strip() for c in row):
                    continue
                if len(row) <= max(tcol, vcol):
                    raise SignalFormatError(f"{p} {_lines(first, end)}: expected at least {max(tcol, vcol) + 1} columns, got {len(row)}")
                try:
                    t = _parse_time(row[tcol])
                except ValueError:
                    raise SignalFormatError(f"{p} {_lines(first, end)}: {header[tcol]}: {_time_error(row[tcol], 'expected a time like')}") from None
                try:  # the message is built only for a bad value: this loop reads every row
                    v = float(row[vcol])
                except ValueError:
                    v = -1.0
                if not 0.0 <= v < np.inf:
                    _non_negative(row[vcol].strip(), f"{p} {_lines(first, end)}: {header[vcol]}")  # raises
                if times and t <= times[-1]:
                    raise SignalFormatError(f"{p} {_lines(first, end)}: {header[tcol]}: times must increase, {row[tcol]!r} is not after the previous row")
                times.append(t)
                values.append(v)
        except csv.Error as exc:
            raise SignalFormatError(f"{p} line {reader.line_num}: not a valid CSV file: {exc}") from exc
        except UnicodeDecodeError as exc:
            raise SignalFormatError(_not_utf8(p, exc)) from None
    if not times:
        raise SignalFormatError(f"{p}: no data rows")
    series = CarbonSeries(name or p.stem, np.array(times), np.array(values))
    if series.gaps:
        start, end = max(series.gaps, key=lambda g: g[1] - g[0])
        log.warning(
            "%s: %d gap(s) longer than %g x the series' %s step; the longest starts %s and holds its "
            "value for %s (to %s); values are used as given, the last one before each gap held across it",
            p, len(series.gaps), GAP_FACTOR, _duration(series._step), _iso(start), _duration(end - start), _iso(end),
        )
    return series


def _lines(first: int, last: int) -> str:
    """``line 5``, or ``lines 5-7`` for a record whose quoted cell spans lines."""
    return f"line {first}" if first == last else f"lines {first}-{last}"


def _not_utf8(path: Path, exc: UnicodeDecodeError) -> str:
    """A file in another encoding (a spreadsheet's Windows-1252 export): decoded in buffered
    chunks, so the line is not known; the byte is."""
    return (f"{path}: not UTF-8 text: byte {exc.object[exc.start]:#04x} cannot be decoded "
            "(save the file as UTF-8 CSV)")


def _duration(seconds: float) -> str:
    """``4 h 00 min`` / ``15 min`` / ``90 s`` for a log message."""
    if seconds < 60:
        return f"{seconds:g} s"
    minutes = int(round(seconds / 60))
    return f"{minutes // 60} h {minutes % 60:02d} min" if minutes >= 60 else f"{minutes} min"


def carbon_zone(zone: str, directory: str | os.PathLike | None = None, basis: str = DEFAULT_CARBON_BASIS) -> CarbonSeries:
    """The named series of ``shared/data/carbon`` (``DE``, ``GB``, ``FR``, ``ES``, ``NO``) on
    ``basis`` (``lca`` or ``direct``; DE, GB and FR have no direct values: a ValueError says so)."""
    key = zone.strip().upper()
    if key not in CARBON_FILES:
        raise ValueError(f"no carbon series for zone {zone!r} (known: {', '.join(CARBON_FILES)})")
    basis = carbon_basis(basis)
    if basis not in ZONE_BASES[key]:
        raise ValueError(missing_basis([key], basis))
    folder = Path(directory) if directory is not None else data_dir() / "carbon"
    return load_carbon_csv(folder / CARBON_FILES[key], column=basis, name=key)


def missing_basis(zones: list[str], basis: str) -> str:
    """Why named zones cannot be read on ``basis`` (for an error message)."""
    files = ", ".join(f"{z} ({CARBON_FILES[z]})" for z in zones)
    have = sorted(z for z, bases in ZONE_BASES.items() if basis in bases)
    return (f"no {basis} carbon intensity for {files}: the Let's Wait Awhile series are life-cycle values "
            f"(IPCC SRREN medians per source); {basis} exists for {', '.join(have) or 'none'} only")


def persistence_forecast(actual: np.ndarray, now: int, horizon: int, steps_per_day: int) -> np.ndarray:
    """Day-ahead persistence: forecast for steps ``now .. now + horizon - 1`` from ``actual``.

    Step ``now`` is observed; a later step ``t`` takes the value at ``t - k * steps_per_day`` for the
    smallest k that lands at or before ``now``. Before a full day has been seen, the forecast is
    the value at ``now`` (persistence of the present). ``actual`` must cover ``now``.
    """
    t = now + np.arange(horizon)
    k = np.ceil(np.maximum(t - now, 0) / steps_per_day).astype(np.int64)
    src = t - k * steps_per_day
    src = np.where(src < 0, now, src)
    return actual[np.minimum(src, len(actual) - 1)]


@dataclass(frozen=True)
class LatencyMatrix:
    """Round-trip ms between cloud regions (symmetric in practice, read as given: row = origin).
    NaN is an unknown latency (an empty, NaN or NA cell): :meth:`rtt` and :meth:`submatrix` return it as
    NaN, never 0, for the problem model to treat as unknown."""

    regions: tuple[str, ...]  # GCP region names
    zones: tuple[str, ...]  # grid-zone code of each region
    rtt_ms: np.ndarray  # [regions, regions], NaN where unknown

    def index(self, key: str) -> int:
        """Row of a region name (``europe-west3``) or a grid-zone code (``DE``, first match)."""
        if key in self.regions:
            return self.regions.index(key)
        if key in self.zones:
            return self.zones.index(key)
        raise KeyError(f"unknown region or zone {key!r} in the latency matrix")

    def rtt(self, a: str, b: str) -> float:
        return float(self.rtt_ms[self.index(a), self.index(b)])

    def submatrix(self, rows: list[str], cols: list[str]) -> np.ndarray:
        return self.rtt_ms[np.ix_([self.index(r) for r in rows], [self.index(c) for c in cols])].copy()


def load_latency_matrix(
    matrix_path: str | os.PathLike | None = None, mapper_path: str | os.PathLike | None = None
) -> LatencyMatrix:
    """Read the GCP latency matrix and its region -> zone mapper (see the module docstring)."""
    folder = data_dir() / "latency"
    mpath = Path(matrix_path) if matrix_path is not None else folder / "gcp_latency_matrix.csv"
    jpath = Path(mapper_path) if mapper_path is not None else folder / "gcp_dc_zonecode_mapper.json"
    try:
        mapper = json.loads(jpath.read_text(encoding="utf-8"))
    except OSError as exc:
        raise SignalFormatError(f"{jpath}: cannot read file: {exc.strerror or exc}") from exc
    except json.JSONDecodeError as exc:
        raise SignalFormatError(f"{jpath}: invalid JSON at line {exc.lineno}: {exc.msg}") from exc
    if not isinstance(mapper, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in mapper.items()):
        raise SignalFormatError(f"{jpath}: expected an object of region name -> zone code strings")
    regions, zones = tuple(mapper), tuple(mapper.values())
    try:
        handle = mpath.open(newline="", encoding="utf-8-sig")
    except OSError as exc:
        raise SignalFormatError(f"{mpath}: cannot read file: {exc.strerror or exc}") from exc
    with handle:
        reader = csv.reader(handle, strict=True)  # a quote left open: an error, not the rest of the file as one cell
        try:  # each row with the file line it ends on (a quoted cell may span lines)
            rows = [(reader.line_num, row) for row in reader]
        except csv.Error as exc:
            raise SignalFormatError(f"{mpath} line {reader.line_num}: not a valid CSV file: {exc}") from exc
        except UnicodeDecodeError as exc:
            raise SignalFormatError(_not_utf8(mpath, exc)) from None
    if not rows or not rows[0][1] or rows[0][1][0].strip() != "origin":
        raise SignalFormatError(f"{mpath} line 1: expected a header starting with 'origin'")
    header = [h.strip() for h in rows[0][1][1:]]
    # Columns in any order too, named as rows are. Column numbers count 'origin' as column 1.
    cols = _match_regions(header, regions, zones)
    for j, (col, key) in enumerate(zip(cols, header, strict=True)):
        if col is None:
            raise SignalFormatError(f"{mpath} line 1: column {j + 2}: unknown {key!r} (not a zone code or region name of {jpath.name})")
        if isinstance(col, list):
            raise SignalFormatError(f"{mpath} line 1: column {j + 2}: duplicate column for {key!r} "
                                    f"(already in column {', '.join(str(k + 2) for k in col)})")
    col_of = [c for c in cols if isinstance(c, int)]  # all of them, after the checks above
    if len(col_of) != len(zones):
        names = ", ".join(f"{zones[i]!r} ({regions[i]})" for i in range(len(zones)) if i not in col_of)
        raise SignalFormatError(f"{mpath} line 1: no column for {names}")
    data = [(line, row) for line, row in rows[1:] if row and any(c.strip() for c in row)]
    origins = _match_regions([row[0].strip() for _, row in data], regions, zones)
    m = np.full((len(zones), len(zones)), np.nan)  # an empty cell stays NaN: unknown latency
    for (line, row), i in zip(data, origins, strict=True):
        if i is None:
            raise SignalFormatError(f"{mpath} line {line}: origin: unknown {row[0]!r} (not a zone code or region name of {jpath.name})")
        if isinstance(i, list):
            raise SignalFormatError(f"{mpath} line {line}: origin: duplicate row for {row[0].strip()!r} "
                                    f"(already on line {', '.join(str(data[k][0]) for k in i)})")
        if len(row) != len(zones) + 1:
            raise SignalFormatError(f"{mpath} line {line}: expected {len(zones) + 1} columns, got {len(row)}")
        for j, cell in enumerate(row[1:]):
            # pandas writes NaN as an empty cell, or as NaN/NA with na_rep: all unknown.
            if cell.strip().casefold() not in UNKNOWN_CELLS:
                m[i, col_of[j]] = _non_negative(cell, f"{mpath} line {line}: column {header[j]!r}")
    # every origin is a region index here: unknown and duplicate rows raised above
    missing = sorted(set(range(len(zones))) - set(origins))
    if missing:
        names = ", ".join(f"{zones[i]!r} ({regions[i]})" for i in missing)
        last = data[-1][0] if data else 1
        raise SignalFormatError(f"{mpath} line {last}: the rows end with no row for origin {names}")
    m.setflags(write=False)
    return LatencyMatrix(regions, zones, m)


#: Latency cells read as unknown (NaN), compared stripped and case-folded: empty, and what pandas
#: and R write for a missing value.
UNKNOWN_CELLS = frozenset({"", "nan", "na", "n/a"})


def _match_regions(keys: list[str], regions: tuple[str, ...], zones: tuple[str, ...]) -> list[int | list[int] | None]:
    """The region index each key (a region name or a zone code) stands for; ``None`` for an
    unknown key, and for a duplicate the positions of the keys already holding its region(s).

    Region names are matched first, so that a zone code that several regions share
    (US-MIDA-PJM) fills those of its regions not named elsewhere, in mapper order.
    """
    out: list[int | list[int] | None] = [None] * len(keys)
    owner: dict[int, int] = {}  # region index -> position of the key that took it
    for pos, key in enumerate(keys):
        if key in regions:
            i = regions.index(key)
            out[pos] = [owner[i]] if i in owner else i
            owner.setdefault(i, pos)
    for pos, key in enumerate(keys):
        if key in regions or key not in zones:
            continue
        mine = [i for i, z in enumerate(zones) if z == key]
        free = [i for i in mine if i not in owner]
        if free:
            owner[free[0]] = pos
            out[pos] = free[0]
        else:
            out[pos] = sorted(owner[i] for i in mine)
    return out


def _non_negative(text: str, where: str) -> float:
    """``text`` as a finite number >= 0; otherwise a :class:`SignalFormatError` starting with ``where``."""
    try:
        v = float(text)
    except ValueError:
        raise SignalFormatError(f"{where}: expected a number, got {text!r}") from None
    if not np.isfinite(v) or v < 0:
        raise SignalFormatError(f"{where}: must be finite and >= 0, got {text!r}")
    return v

"""Plots for reports (matplotlib is the ``plot`` extra, imported only here, lazily)."""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any


def _pyplot():
    try:
        import matplotlib
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise RuntimeError("plotting needs matplotlib: pip install 'iro-fed[plot]'") from exc
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_format(path: str | os.PathLike) -> str:
    """The image format of a plot file: its suffix (``.png``, ``.svg``, ``.pdf``, ...), PNG without one."""
    suffix = Path(path).suffix.lower().lstrip(".")
    return suffix or "png"


def check_plot_file(flag: str, path: str | os.PathLike, make: bool = True) -> Path:
    """A plot path checked before a run: writable as ``check_output_file`` says, matplotlib
    installed, and a suffix matplotlib can write (else the run would fail at its last step).
    ``make`` false: its folder only checked to be makeable (the command's other checks come first)."""
    from iro_fed.cli import UsageError, check_output_file

    out = check_output_file(flag, path, make=False)
    try:
        from matplotlib.backend_bases import FigureCanvasBase
    except ImportError:  # pragma: no cover - depends on the install
        raise UsageError(f"{flag}: plotting needs matplotlib: pip install 'iro-fed[plot]'") from None
    formats = FigureCanvasBase.get_supported_filetypes()
    if plot_format(out) not in formats:
        raise UsageError(f"{flag}: cannot write a {out.suffix!r} image (use one of: {', '.join('.' + f for f in sorted(formats))})")
    if plot_format(out) == "pgf":
        # Listed as supported, but savefig runs a TeX system for text metrics: without one the
        # run failed at its end with a RuntimeError traceback.
        import shutil

        import matplotlib

        tex = matplotlib.rcParams["pgf.texsystem"]
        if shutil.which(tex) is None:
            raise UsageError(f"{flag}: a .pgf image needs {tex} (matplotlib's pgf.texsystem), which is not on PATH")
    if make:  # only once the image can be written: a bad suffix made the folder, then failed
        check_output_file(flag, out)
    return out


def save_figure(fig, path: str | os.PathLike) -> None:
    """Save ``fig`` through a temporary file, so an error leaves no half-written image."""
    from iro_fed.problem_io import write_file_atomic

    write_file_atomic(path, lambda tmp: fig.savefig(tmp, format=plot_format(path)))


def _workload_x(label: str, x: str | float) -> float:
    """A curve's key as its x (arrived workload %): a number or a numeric string ("12.5", "40")."""
    try:
        value = float(x)
    except (TypeError, ValueError):
        value = math.nan
    if not math.isfinite(value):  # NaN would leave the sort (and the line) in no defined order
        raise ValueError(f"curves[{label!r}]: key {x!r} is not a finite number (the arrived workload %)")
    return value


def allocation_plot(
    curves: Mapping[str, Mapping[str, float | None]],
    path: str | os.PathLike,
    title: str = "GPU allocation vs arrived workload",
    reference: Sequence[tuple[str, float]] = (),
) -> None:
    """Allocated GPU % against arrived GPU workload % (the FGD paper's Fig. 9), one line per
    policy; ``reference`` adds horizontal markers (label, unallocated % at 100 %)."""
    # by the numeric x: keys that come sorted as text ("0", "1", "10", "100", ...) zigzag; read
    # before the figure is made, so a bad key leaves no figure open
    lines = {label: sorted(((_workload_x(label, x), v) for x, v in curve.items() if v is not None),
                           key=lambda p: p[0]) for label, curve in curves.items()}
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7.5, 4.8), dpi=120)
    for label, points in lines.items():
        xs = [x for x, _ in points]
        ys = [v for _, v in points]
        # A lone point makes a line of zero length, which draws nothing: mark it.
        ax.plot(xs, ys, label=label, linewidth=1.4, marker="o" if len(xs) == 1 else None)
    ax.plot([0, 100], [0, 100], color="grey", linestyle=":", linewidth=1, label="ideal")
    for label, unallocated in reference:
        ax.axhline(100 - unallocated, linestyle="--", linewidth=0.8, alpha=0.6, label=label)
    ax.set_xlim(0, 130)
    ax.set_ylim(0, 105)
    ax.set_xlabel("arrived GPU workload (% of cluster GPU capacity)")
    ax.set_ylabel("allocated GPU (% of capacity)")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    try:
        save_figure(fig, path)
    finally:
        plt.close(fig)


#: Top of the success % axis: 100 and a margin that keeps a line at 100 % in sight (autoscale
#: put it at 105, past what a success rate can be).
SUCCESS_PCT_TOP = 102.0


def timeline_figure(series: Mapping[str, Sequence[float | None]], title: str) -> Any:
    """``iro simulate --plot``'s figure (open; :func:`timeline_plot` saves and closes it): traffic
    and success, pods and nodes, carbon intensity and emissions over time."""
    import numpy as np

    plt = _pyplot()
    t = np.array(series["t_min"]) / 60.0
    fig, axes = plt.subplots(3, 1, figsize=(9, 8), dpi=110, sharex=True)
    try:
        _draw_timeline(axes, series, t, title)
        fig.tight_layout()
    except BaseException:
        # A series missing or unreadable: no caller gets the figure to close, and pyplot would
        # keep it for the life of the process.
        plt.close(fig)
        raise
    return fig


def _series_array(series: Mapping[str, Sequence[float | None]], name: str) -> Any:
    """``series[name]`` as floats, None as NaN (a gap in the line)."""
    import numpy as np

    return np.array([np.nan if v is None else v for v in series[name]], dtype=float)


def _timeline_line(ax: Any, t: Any, y: Any, **kw: Any) -> None:
    """``ax.plot(t, y)``, marking each point with no drawn neighbour (a run of one step, or one
    value between gaps): a line of zero length draws nothing."""
    import numpy as np

    drawn = np.isfinite(t) & np.isfinite(y)
    alone = drawn & ~np.r_[False, drawn[:-1]] & ~np.r_[drawn[1:], False]
    if alone.any():
        kw.update(marker="o", markevery=alone.tolist())
    ax.plot(t, y, **kw)


def _legend_of_both(ax: Any, twin: Any, least: int = 1, **kw: Any) -> None:
    """One legend for a panel's axis and its twin (right axis), on the twin (drawn over both axes'
    lines), of the lines with data (one of no value at all, such as the success % of a run
    without requests, draws nothing); none if fewer than ``least`` have some."""
    import numpy as np

    lines = [line for a in (ax, twin) for line in a.get_lines()
             if not line.get_label().startswith("_") and np.isfinite(np.asarray(line.get_ydata(), float)).any()]
    if len(lines) >= least:
        twin.legend(lines, [line.get_label() for line in lines], **kw)


def _draw_timeline(axes: Any, series: Mapping[str, Sequence[float | None]], t: Any, title: str) -> None:
    """The three panels of :func:`timeline_figure` onto its ``axes``."""
    import numpy as np

    def line(ax: Any, name: str, **kw: Any) -> None:
        _timeline_line(ax, t, _series_array(series, name), **kw)

    ax = axes[0]
    ax.set_ylabel("requests/s")
    if (np.nan_to_num(_series_array(series, "requests_per_s")) > 0).any():
        line(ax, "requests_per_s", color="tab:blue", lw=1, label="requests/s")
        ax2 = ax.twinx()
        line(ax2, "success_rate_pct", color="tab:green", lw=1, label="success % (right axis)")
        ax2.set_ylabel("success %")
        low, high = ax2.get_ylim()  # autoscaled: the bottom follows the data, the top stops near 100
        ax2.set_ylim(max(low, -2.0), min(high, SUCCESS_PCT_TOP))
        # Two series on two axes had no legend. Above the panel, right of the title (now on the left):
        # inside it, any corner hid some hours of traffic or the success line near 100.
        _legend_of_both(ax, ax2, least=2, loc="lower right", bbox_to_anchor=(1.0, 1.0), ncols=2, fontsize=8,
                        frameon=False, borderaxespad=0.2)
    else:
        # No step had a request (openb, promo-surge: no online services): a flat zero line and an
        # empty "success %" twin axis (-0.04..0.04) read as data; say so instead.
        ax.set_yticks([])
        ax.text(0.5, 0.5, "no online services", transform=ax.transAxes, ha="center", va="center", color="tab:gray")
    ax.set_title(title, loc="left")
    ax = axes[1]
    line(ax, "running", lw=1, label="running pods")
    line(ax, "pending", lw=1, label="pending pods", color="tab:red")
    line(ax, "powered_nodes", lw=1, label="powered nodes", color="tab:gray")
    ax.set_ylabel("count")
    ax.legend(loc="upper left", fontsize=8)
    ax = axes[2]
    for key in series:
        if key.startswith("carbon_intensity."):
            line(ax, key, lw=1, label=key.split(".", 1)[1])
    ax.set_ylabel("gCO2/kWh")
    ax.set_xlabel("hours")
    ax2 = ax.twinx()
    emissions = _series_array(series, "carbon_g_per_hour") / 1000.0
    _timeline_line(ax2, t, emissions, color="black", lw=1, ls="--", label="emissions kg CO2/h (right axis)")
    ax2.set_ylabel("kg CO2 / h")
    # One legend for both axes: the twin's dashed emissions line had none.
    _legend_of_both(ax, ax2, loc="upper left", fontsize=8)


def timeline_plot(series: Mapping[str, Sequence[float | None]], path: str | os.PathLike, title: str) -> None:
    """Write :func:`timeline_figure` to ``path`` (the suffix picks the format), atomically."""
    plt = _pyplot()
    fig = timeline_figure(series, title)
    try:
        save_figure(fig, path)
    finally:
        plt.close(fig)

"""Plots for reports (matplotlib is the ``plot`` extra, imported only here, lazily)."""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path


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


def check_plot_file(flag: str, path: str | os.PathLike) -> Path:
    """A plot path checked before a run: writable as ``check_output_file`` says, matplotlib
    installed, and a suffix matplotlib can write (else the run would fail at its last step)."""
    from iro_fed.cli import UsageError, check_output_file

    out = check_output_file(flag, path)
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

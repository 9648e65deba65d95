"""The ``iro`` command (shared/spec/interfaces.md).

Every subcommand exits 0 on success and 2 on bad input, with a message on stderr that names
what is wrong. Tables go to stdout; progress goes to stderr. Ctrl-C exits 130. A reader that
closes stdout early (``iro solve p.json --solver best-fit --out - | head -1``) ends the command
quietly with 141, as SIGPIPE ends other Unix tools.

Stopping the long-running commands (``iro extender``, ``webhook``, ``scheduler``, ``iro fed
server``, ``node``, ``rounds`` and ``edge-agent run``), one convention (:func:`stop_status`):

- SIGTERM (how Kubernetes and systemd stop a service) is a stop that was asked for: once the
  command has stopped cleanly (its servers closed, its children stopped and reaped) it exits 0,
  whatever status a child answers the SIGTERM with (flower-superlink dies of it: 143, or exits 3);
- SIGINT (Ctrl-C) stops the same way and exits 130, by shell convention;
- a stop that did not complete cleanly (a child still running after the grace period had to be
  killed, a federated run could not be stopped on the SuperLink) exits 1, with a message;
- a child that exits on its own, not asked to, passes on its status (128+N for a death by
  signal N), so that a supervisor sees the failure;
- a second signal during the stop cuts it short and the status is not 0: Ctrl-C again exits
  130; SIGTERM again ends the process (143), or in ``iro fed server`` / ``node`` kills Flower's
  processes (1).

``iro fed local`` and the other commands are jobs: Ctrl-C exits 130, SIGTERM ends them (143).

A SIGTERM that comes while a service starts (Python's imports, the parser build, the command's
own checks: about a second before its handlers are in place) is a stop too: :func:`main` catches
SIGTERM first thing (:class:`EarlyStop`) and the service exits 0, having started nothing if it
came before the command ran, else once what it started is stopped (its handlers take the signal
over: :func:`take_over_sigterm`). A job started that way ends as before (143).

Output files (``--out``, ``--json``, ``--plot``) are written atomically (a temporary file beside
them, renamed over them) after every input was read whole: ``--out`` may name an input file, which
is then replaced by the complete result, or left as it was when the command fails. ``iro solve``,
``compare``, ``replay`` and ``simulate`` make their folders (like ``mkdir -p``) once the inputs are
known to be good, before the work. ``--out -`` prints the result to stdout in ``iro solve`` and
``iro compare``; ``-`` is refused elsewhere, and so are an empty path and one that ends in a folder
(``newres/``).
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import importlib
import json
import math
import os
import signal
import sys
import threading
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from iro_fed import limits
from iro_fed.signal_event import SignalEvent

if TYPE_CHECKING:
    from iro_fed.model import Problem

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_BAD_INPUT = 2
#: Ctrl-C (SIGINT), by shell convention 128 + SIGINT.
EXIT_INTERRUPTED = 130
#: Standard output closed by its reader (``iro solve ... --out - | head -1``): 128 + SIGPIPE, the
#: status of a Unix tool that the signal ends.
EXIT_BROKEN_PIPE = 128 + 13

# Subcommands that live beside their integration. Each module exposes ``register(sub)``, which
# adds its parsers with ``set_defaults(func=...)``; it imports optional dependencies only when a
# command runs, so ``iro --help`` stays fast and works without the extras.
COMMAND_MODULES: tuple[str, ...] = ("iro_fed.sim.cli", "iro_fed.learning", "iro_fed.k8s.cli", "iro_fed.federated.cli")


class UsageError(Exception):
    """Bad input from the command line: exit status 2."""


def stop_status(signum: int) -> int:
    """Exit status of a long-running command stopped cleanly by ``signum`` (the module's
    convention): 130 after Ctrl-C (SIGINT), 0 after SIGTERM or any other stop that was asked for."""
    return EXIT_INTERRUPTED if signum == signal.SIGINT else EXIT_OK


class EarlyStop:
    """The SIGTERM handler of :func:`main` (and ``edge-agent``'s) from its first line until the
    command takes SIGTERM over: it notes the signal instead of letting it end the process (143)
    halfway through the imports and the parser build. Once the command line is parsed,
    :meth:`started` decides: a service stops cleanly, a job ends as it always did."""

    def __init__(self, previous: Any, got: list[int] | None = None) -> None:
        # the handler before main's (None: set outside Python, not restorable): the command's own
        # handlers put it back when they are done, so a second SIGTERM during a stop ends the process
        self.previous = signal.SIG_DFL if previous is None else previous
        self.got: list[int] = [] if got is None else got

    def __call__(self, signum: int, _frame: Any) -> None:
        self.got.append(signum)

    @classmethod
    def catch(cls) -> EarlyStop | None:
        """Install one; None outside the main thread, where Python can set no handler (main()
        called from a thread), so nothing changes there."""
        if threading.current_thread() is not threading.main_thread():
            return None
        early = cls(signal.SIG_DFL)
        previous = signal.signal(signal.SIGTERM, early)
        early.previous = signal.SIG_DFL if previous is None else previous
        return early

    def started(self, service: bool) -> int | None:
        """Called once the command line is parsed. A service (``service=True``): the clean-stop
        status if a SIGTERM came already (it starts nothing), else None and the command goes on,
        its stop handlers taking SIGTERM over. A job: SIGTERM is put back as it was, and one that
        came already is delivered now (by default it ends the process, 143, as it always did)."""
        if service:
            return stop_status(self.got[0]) if self.got else None
        self.release()
        if self.got:
            signal.raise_signal(signal.SIGTERM)
        return None

    def release(self) -> None:
        """Put the previous SIGTERM handler back, unless a command has taken SIGTERM over."""
        if signal.getsignal(signal.SIGTERM) is self:
            signal.signal(signal.SIGTERM, self.previous)


def take_over_sigterm(previous: Any) -> tuple[int | None, Any]:
    """For a service command that has just set its own SIGTERM handler, ``previous`` being what
    ``signal.signal`` returned: the SIGTERM that came before (noted by :class:`EarlyStop`; None if
    none, or if ``previous`` is not one) and the handler to put back when the command is done (the
    one before main's: a second SIGTERM during a stop ends the process, as the convention says).
    Set first, then asked: a SIGTERM in between goes to the new handler, none is lost."""
    if isinstance(previous, EarlyStop):
        return (previous.got[0] if previous.got else None), previous.previous
    return None, previous


@contextmanager
def stop_signals() -> Iterator[Callable[[], int]]:
    """Catch SIGTERM and SIGINT from here on, before anything serves or is announced (a signal
    right after ``--ready-file`` appears must not find the default handler, which ends the
    process with 143 and no clean stop). Yields ``wait()``: it blocks until one arrives, puts the
    previous handlers back (a second signal then cuts a stop that hangs short) and returns it.
    Leaving the block without a signal puts them back too. A SIGTERM that :class:`EarlyStop` caught
    during start-up counts as arrived: ``wait()`` returns it at once."""
    stop = SignalEvent()  # threading.Event's set() can deadlock in a handler (iro_fed.signal_event)
    got: list[int] = []

    def on_signal(signum: int, _frame: Any) -> None:
        got.append(signum)
        stop.set()

    old = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    early, old[signal.SIGTERM] = take_over_sigterm(old[signal.SIGTERM])
    if early is not None:  # it came during start-up: wait() returns at once, the stop is the usual one
        on_signal(early, None)

    def restore() -> None:
        for sig, handler in old.items():
            signal.signal(sig, handler)

    def wait() -> int:
        stop.wait()
        restore()
        return got[0]

    try:
        yield wait
    finally:
        restore()
        stop.close()


class _PipeConsole(Console):
    """A Console whose reader going away raises BrokenPipeError, which :func:`main` turns into
    the usual quiet exit 141; rich's own handler exits 1, the status of a failed command."""

    def on_broken_pipe(self) -> None:
        self.quiet = True  # nothing more to this stream
        if threading.current_thread() is threading.main_thread():  # not a progress bar's refresh thread
            raise BrokenPipeError(errno.EPIPE, os.strerror(errno.EPIPE))


def _console(stderr: bool = False, markup: bool = False) -> Console:
    """The commands' console. Markup is off (``markup=False``, the default): every string is
    printed as it is, table cells and titles too. Names, paths, reasons and messages are user data,
    and rich reads ``[...]`` in them as markup (a workload ``batch[/gpu]`` raised MarkupError,
    ``'iro-fed[cpsat]'`` lost ``[cpsat]``); style with ``style=`` or :class:`rich.text.Text` instead."""
    return _PipeConsole(stderr=stderr, markup=markup, highlight=False, soft_wrap=False,
                        width=None if (sys.stderr if stderr else sys.stdout).isatty() else 160)


def check_seed(flag: str, seed: int) -> int:
    """``seed`` if it is in the solvers' seed range (solvers.MAX_SEED), else a UsageError naming ``flag``."""
    from solvers import MAX_SEED

    return check_int(flag, seed, 0, MAX_SEED)


def check_int(flag: str, value: int, low: int, high: int) -> int:
    """``value`` if ``low <= value <= high``, else a UsageError naming ``flag``. Counts that size
    work or memory (environments, steps, episodes) need an upper bound too: a typo such as
    ``--envs 100000000`` must fail at once, not after building a list of that many."""
    if not low <= value <= high:
        raise UsageError(f"{flag}: must be between {low} and {high}, got {value}")
    return value


def check_number(flag: str, value: float, low: float | None = None, high: float | None = None,
                 low_open: bool = False) -> float:
    """``value`` if finite and in ``[low, high]`` (``low_open``: ``low`` itself excluded; ``None``:
    no bound on that side), else a UsageError naming ``flag``. float() reads 'nan' and 'inf', which
    pass every ``<`` test, so finiteness is checked first; the one message says the whole rule."""
    if not (math.isfinite(value) and (low is None or value > low or (value == low and not low_open))
            and (high is None or value <= high)):
        rule = "finite" if low is None else f"{'>' if low_open else '>='} {low:g} and finite"
        if high is not None:
            rule += f", at most {high:g}"
        raise UsageError(f"{flag}: must be {rule}, got {value:g}")
    return value


def refuse_empty(*paths: tuple[str, str | None], what: str = "path") -> None:
    """Refuse a path flag (``(flag, path)``; None: not given) given as "" or blank: the commands
    test a path's truthiness, so ``--out ""`` ran, exited 0 and wrote nothing. ``what`` the flag
    names ("expected a <what>")."""
    for flag, path in paths:
        if path is not None and not path.strip():
            raise UsageError(f"{flag}: expected a {what}, got {path!r}")


def check_output_file(flag: str, path: str | Path, make: bool = True) -> Path:
    """A file path a command will write: not a folder, and its folder there or made now (like
    ``mkdir -p``). Checked before any work so that a long run does not fail at its last step.
    ``make`` false: the folder only checked to be makeable (a dry run changes nothing). A command
    that prints to stdout for ``-`` handles it before this check; here ``-`` is refused."""
    text = os.fspath(path)
    refuse_empty((flag, text))
    if text == "-":  # it would be a file named '-' in the current folder, not stdout
        raise UsageError(f"{flag}: '-' (standard output) is not supported here; give a file name (./- for a file named '-')")
    out = Path(path)
    _resolve(flag, out)  # a symlink loop fails here, not when the result is written after the work
    if out.is_dir():
        raise UsageError(f"{flag}: {str(out)!r} is a folder; give a file name")
    name = text
    for sep in os.sep + (os.altsep or ""):
        name = name.rsplit(sep, 1)[-1]
    if name in ("", ".", ".."):  # Path() drops a trailing '/' or '/.': --out newres/ wrote a file 'newres'
        raise UsageError(f"{flag}: {text!r} ends with {name or text[-1]!r}, a folder; give a file name")
    _make_folder(flag, out.parent if str(out.parent) else Path("."), make)
    return out


def check_distinct_outputs(*outputs: tuple[str, str | None], inputs: Iterable[tuple[str, str | None]] = ()) -> None:
    """``(flag, path)`` of a command's outputs (files or folders), none given twice: the later write
    would replace the earlier result (``--out r.png --plot r.png`` kept only the plot); and none
    of them one of the command's ``inputs`` (``(flag, path)``): the result would replace what it
    was made from (``iro solve p.json --out p.json`` overwrote the problem, exit 0)."""
    seen: dict[Any, str] = {}  # a file's keys -> what to say of an output that is it too
    for flag, path in inputs:
        if path and path != "-":
            for key in _file_keys(flag, path):
                seen.setdefault(key, f"the {flag} input; the result would replace it: give another file")
    for flag, path in outputs:
        if not path or path == "-":
            continue
        keys = _file_keys(flag, path)  # the same file by another name (./r.json, a symlink, a hard link) too
        other = next((seen[k] for k in keys if k in seen), None)
        if other is not None:
            raise UsageError(f"{flag}: {path!r} is also {other}")
        for key in keys:
            seen[key] = f"the {flag} file; give each output its own file"


def _file_keys(flag: str, path: str) -> list[Any]:
    """What identifies ``path``: its resolved path and, where it exists, its device and inode."""
    keys: list[Any] = [_resolve(flag, path)]
    try:
        st = os.stat(path)
        keys.append((st.st_dev, st.st_ino))
    except OSError:
        pass
    return keys


def write_outputs(*writes: tuple[str, str | None, Callable[[], None]]) -> None:
    """Write a command's outputs, ``(flag, path, write)`` each (``write`` writes ``path``
    atomically; a None path is skipped), in order: all of them or none. One that fails removes
    those written before it (``--out r.json --plot /dev/full`` left r.json and exited 2), and an
    OSError names its flag and file, not the temporary file (``'/proc/.x.json.3qyap88j'``)."""
    written: list[str] = []
    try:
        for flag, path, write in writes:
            if not path:
                continue
            try:
                write()
            except OSError as exc:
                raise UsageError(f"{flag}: cannot write {path!r}: {exc.strerror or exc}") from None
            written.append(path)
    except BaseException:
        for path in written:
            with contextlib.suppress(OSError):
                os.remove(path)
        raise


def _resolve(flag: str, path: str | Path) -> Path:
    """``path`` resolved, or a UsageError naming ``flag`` (a symlink loop: RuntimeError before Python 3.13)."""
    try:
        return Path(path).resolve()
    except (RuntimeError, OSError) as exc:
        raise UsageError(f"{flag}: {str(path)!r} cannot be resolved: {exc}") from None


def check_output_folder(flag: str, path: str | Path) -> Path:
    """A folder a command will fill: there, or made now with its missing parents."""
    out = Path(path)
    if out.exists() and not out.is_dir():
        raise UsageError(f"{flag}: {str(out)!r} exists and is not a folder")
    _make_folder(flag, out)
    return out


def _make_folder(flag: str, folder: Path, make: bool = True) -> None:
    """Make ``folder`` and its missing parents (``make`` false: only check that nothing is in the
    way), or say which part of the path is in the way."""
    if folder.is_dir():
        return
    in_the_way = folder if folder.exists() else next((p for p in folder.parents if p.exists() and not p.is_dir()), None)
    if in_the_way is not None:
        raise UsageError(f"{flag}: cannot make folder {str(folder)!r}: {str(in_the_way)!r} is a file")
    if not make:
        return
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"{flag}: cannot make folder {str(folder)!r}: {exc.strerror or exc}") from None


def check_input_file(flag: str, path: str | Path) -> Path:
    """A file a command will read: it must exist and be a file, checked before any work."""
    src = Path(path)
    if src.is_dir():
        raise UsageError(f"{flag}: {str(src)!r} is a folder; give a file")
    if not src.is_file():
        # a FIFO, socket or device is there but is no file to read: "no such file" would mislead
        raise UsageError(f"{flag}: {str(src)!r} is not a regular file" if src.exists()
                         else f"{flag}: no such file {str(src)!r}")
    return src


def check_listen_host(flag: str, host: str) -> str:
    """An address this machine can listen on, checked before a server starts (a bind error would
    name the port, and Flower would fail only after it started)."""
    import socket

    if not host or any(c.isspace() for c in host):
        raise UsageError(f"{flag}: expected an IP address or host name, got {host!r}")
    try:
        socket.getaddrinfo(host, None, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except (OSError, UnicodeError) as exc:  # socket.gaierror; UnicodeError for a label IDNA rejects
        raise UsageError(f"{flag}: cannot resolve {host!r}: {getattr(exc, 'strerror', None) or exc}") from None
    return host


#: Most simulated hours a run may have (a leap year; the carbon data covers about one year). Every
#: step is recorded, so ``--hours 1e9`` would try to allocate hundreds of GiB before failing. The
#: federated sites' ``hours`` share it (iro_fed.limits).
MAX_HOURS = limits.MAX_HOURS


def check_hours(flag: str, hours: float) -> float:
    """Simulated hours: a finite number > 0, at most :data:`MAX_HOURS`."""
    return check_number(flag, hours, 0.0, MAX_HOURS, low_open=True)


def check_names(flag: str, text: str, known: Sequence[str], what: str = "solver") -> list[str]:
    """A comma list of registered names: at least one, none empty, each known, none twice."""
    parts = [s.strip() for s in text.split(",")]
    names = [s for s in parts if s]
    if not names:
        raise UsageError(f"{flag}: give at least one {what} name, got {text!r}")
    # "best-fit," or "a,,b" (a stray comma, often a name lost in an edit) was read as fewer names
    empty = next((i for i, s in enumerate(parts, start=1) if not s), None)
    if empty is not None:
        raise UsageError(f"{flag}: empty {what} name at position {empty} of {len(parts)} in {text!r}")
    for name in names:
        if name not in known:
            raise UsageError(f"{flag}: unknown {what} {name!r} (registered: {', '.join(known)})")
    dup = next((n for i, n in enumerate(names) if n in names[:i]), None)
    if dup is not None:
        raise UsageError(f"{flag}: {what} {dup!r} given twice")
    return names


def split_pairs(pairs: Sequence[str] | None, flag: str, kebab: bool = False) -> list[tuple[str, str]]:
    """``KEY=VALUE`` strings of a repeated ``flag`` as ``(key, value)``; keys stripped, with
    dashes as underscores (or underscores as dashes with ``kebab``); values as given. A key given
    again overrides the earlier one, as a repeated option does (a script appends its override to
    a base command line)."""
    out = []
    for pair in pairs or []:
        key, sep, value = pair.partition("=")
        key = key.strip()
        key = key.replace("_", "-") if kebab else key.replace("-", "_")
        if not sep or not key:
            raise UsageError(f"{flag}: expected KEY=VALUE, got {pair!r}")
        out.append((key, value))
    return out


def _parse_settings(pairs: Sequence[str] | None, solver_name: str, flag: str = "--set",
                    flag_value_errors: bool = False) -> dict[str, Any]:
    """``KEY=VALUE`` strings of ``flag`` to typed settings, converted by the solver's declared
    parameters. A bad value raises the solver's InvalidSettingError, or with ``flag_value_errors``
    a UsageError that names ``flag`` and the key first (``simulate --solver-set``)."""
    import solvers
    from solvers import InvalidSettingError

    cls = solvers.registered().get(solver_name)
    if cls is None:
        raise UsageError(f"--solver: unknown solver {solver_name!r} (registered: {', '.join(solvers.registered())})")
    settings: dict[str, Any] = {}
    for key, value in split_pairs(pairs, flag):
        param = cls.parameters.get(key)
        if param is None:
            known = ", ".join(sorted(cls.parameters))
            raise UsageError(f"{flag} {key}: unknown setting for solver {solver_name!r} (known: {known})")
        if value.strip().lower() in ("none", "null") and param.nullable:
            settings[key] = None
            continue
        try:
            settings[key] = param.convert(solver_name, key, value)
        except InvalidSettingError as exc:
            if not flag_value_errors:
                raise
            raise UsageError(f"{flag} {key}: {exc}") from None
    return settings


def _load(path: str):
    """Load a problem file; its unknown fields are noted on stderr, as ``iro validate`` notes them
    (``iro solve`` and ``iro compare`` dropped ``weights.carbonn`` without a word)."""
    from iro_fed.problem_io import load_document, problem_from_dict

    doc = load_document(path)
    problem = problem_from_dict(doc, source=str(path))
    note_unknown_fields(path, doc)
    return problem


def note_unknown_fields(path: str, doc: Any) -> None:
    """``note: PATH: FIELD: unknown field, ignored`` on stderr for each field the loader ignores:
    not errors (the format may gain fields), but often a typo. Never on stdout (``--out -``)."""
    from iro_fed.problem_io import unknown_fields

    for field in unknown_fields(doc):
        _console(stderr=True, markup=False).print(f"note: {path}: {field}: unknown field, ignored")


def can_warm_up(problem: Problem) -> bool:
    """Whether :func:`warm_up` on ``problem`` loads what a solver needs: it needs a pod and a node
    (with no node a solver answers "unplaced" without importing anything, and the next problem's
    timed solve then counted dqn's imports: 11-36 ms, not 3-4)."""
    return bool(problem.num_workloads and problem.num_nodes)


#: The problem solvers warm up on when no given one has a node and a pod: one pod that fits one node.
_WARM_UP_DOC: dict[str, Any] = {
    "name": "warm-up",
    "domains": [{"name": "warm-up", "kind": "edge"}],
    "nodes": [{"name": "warm-up-node", "domain": "warm-up", "capacity": {"cpu": 4000, "memory": 8192}}],
    "workloads": [{"name": "warm-up-pod", "demand": {"cpu": 500, "memory": 512}}],
}


def warm_up_problem(problems: Sequence[Problem]) -> Problem:
    """The problem :func:`warm_up` runs on: the first of ``problems`` that :func:`can_warm_up`, else a
    built-in one-node one-pod problem (``iro compare`` of problems without both skipped the warm-up,
    and the first timed dqn solve counted torch's import: 3.5-6 s, not 0.1 ms)."""
    for problem in problems:
        if can_warm_up(problem):
            return problem
    from iro_fed.problem_io import problem_from_dict

    return problem_from_dict(_WARM_UP_DOC, "<built-in warm-up problem>")


def warm_up(name: str, settings: dict[str, Any], problem: Problem) -> None:
    """Solve a one-pod copy of ``problem`` (one :func:`can_warm_up`) with a fresh ``name`` solver,
    untimed, so that a timed solve after it measures the solve: a solver's first solve in a
    process imports its libraries and loads its model (dqn: torch and the policy, about 5 s; qubo:
    dimod and dwave-samplers; cpsat: OR-Tools), a one-off cost that made the first ``time ms``
    cell of ``iro compare`` read as a slow solver. A cheap solver takes about 1 ms."""
    import solvers

    tiny = problem.with_workloads([0])
    try:
        solvers.make(name, **settings).solve(tiny)
    except Exception:  # noqa: BLE001 - the timed solve that follows raises it again and reports it
        pass


def _fmt(x: float | None, digits: int = 3) -> str:
    return "-" if x is None else f"{x:,.{digits}f}"


def _objective_columns(table: Table) -> None:
    for name, justify in (
        ("score R", "right"),
        ("util %", "right"),
        ("latency ms", "right"),
        ("cost/h", "right"),
        ("gCO2/h", "right"),
        ("placed", "right"),
        ("unplaced", "right"),
        ("nodes on", "right"),
        ("time ms", "right"),
    ):
        table.add_column(name, justify=justify)


def _latency_cell(b: Any) -> str:  # an iro_fed.objective.Breakdown
    """The mean latency, with the placed pods it leaves out (their latency is unknown): without the
    count a mean over 2 of 10 pods reads as covering all 10."""
    if not b.latency_unknown:
        return _fmt(b.mean_latency_ms, 1)
    return f"{_fmt(b.mean_latency_ms, 1)} ({b.latency_unknown} unknown)"


def _objective_cells(placement) -> list[str]:
    b = placement.objective
    return [
        f"{b.score:.4f}",
        _fmt(b.utilization_pct, 1),
        _latency_cell(b),
        _fmt(b.cost_per_hour, 2),
        _fmt(b.carbon_g_per_hour, 0),
        str(b.placed),
        str(b.unplaced),
        str(b.powered_on_nodes),
        f"{1000 * placement.timing.get('solve_s', 0.0):.1f}",
    ]


# --- subcommands ---------------------------------------------------------------------------


def cmd_solvers(args: argparse.Namespace) -> int:
    import solvers

    rows = []
    for name, cls in solvers.registered().items():
        rows.append(
            {
                "name": name,
                "installed": cls.properties.installed(),
                "properties": cls.properties.to_dict(),
                "parameters": {k: {"default": p.default, "type": p.kind.__name__, "doc": p.doc} for k, p in cls.parameters.items()},
            }
        )
    if args.json:
        print(json.dumps(rows, indent=2))
        return EXIT_OK
    table = Table(title="IRO-Fed solvers")
    for col in ("name", "installed", "mode", "exact", "settings", "description"):
        table.add_column(col)
    for row in rows:
        props = row["properties"]
        mode = props["mode"] + (" (composite)" if props["composite"] else "")
        installed = "yes" if row["installed"] else f"no: pip install 'iro-fed[{props['extra']}]'"
        table.add_row(row["name"], installed, mode, "yes" if props["exact"] else "no", ", ".join(row["parameters"]), props["description"])
    _console(markup=False).print(table)
    return EXIT_OK


def cmd_solve(args: argparse.Namespace) -> int:
    import solvers
    from iro_fed.placement import write_placement

    settings = _parse_settings(args.set or [], args.solver)
    if args.show_unplaced < 0:
        raise UsageError(f"--show-unplaced: must be >= 0, got {args.show_unplaced}")
    refuse_empty(("--out", args.out))
    if args.out and args.out != "-":
        check_output_file("--out", args.out, make=False)
        check_distinct_outputs(("--out", args.out), inputs=[("PROBLEM", args.problem)])
    problem = _load(args.problem)
    solver = solvers.make(args.solver, **settings)
    if args.out and args.out != "-":  # its folder made only now that the input is good, before the solve
        check_output_file("--out", args.out)
    # a str status is read as markup (rich.spinner), whatever the console says: Text is literal
    with _console(stderr=True, markup=False).status(Text(f"solving {problem!r} with {args.solver}"), spinner="dots"):
        # The table's time column: the solve, not the library loading (dqn loads torch even for a
        # pod that no node fits: 5 s on a problem without nodes).
        warm_up(args.solver, settings, warm_up_problem([problem]))
        placement = solver.solve(problem)
    if args.out == "-":
        print(json.dumps(placement.to_dict(problem), indent=2))
        return EXIT_OK
    console = _console(markup=False)
    table = Table(title=f"{args.problem}: {problem.num_workloads} workloads on {problem.num_nodes} nodes")
    table.add_column("solver")
    table.add_column("status")
    _objective_columns(table)
    table.add_row(args.solver, placement.status, *_objective_cells(placement))
    console.print(table)
    terms = placement.objective.terms
    weighted = placement.objective.weighted
    console.print(
        "terms (normalized / weighted): "
        + ", ".join(f"{k} {terms[k]:.4f} / {weighted[k]:+.4f}" for k in terms)
    )
    note = solver.describe(placement)
    if note:
        console.print(note, soft_wrap=True)
    if placement.reasons:
        shown = sorted(placement.reasons.items())[: args.show_unplaced]
        console.print(Text(f"{len(placement.reasons)} unplaced", style="bold"), ":", sep="")
        for w, reason in shown:
            console.print(f"  {problem.workloads[w].name}: {reason}")
        if len(placement.reasons) > len(shown):
            console.print(f"  ... and {len(placement.reasons) - len(shown)} more (see the placement file)")
    if args.out:
        write_outputs(("--out", args.out, lambda: write_placement(placement, problem, args.out)))
        console.print(f"placement written to {args.out}")
    return EXIT_OK


def cmd_compare(args: argparse.Namespace) -> int:
    import solvers
    from iro_fed.problem_io import write_json_atomic

    check_seed("--seed", args.seed)
    if args.solvers is not None:  # an explicit empty list is an error, not "every solver"
        names = check_names("--solvers", args.solvers, list(solvers.registered()))
    else:
        names = [n for n in solvers.available() if not solvers.registered()[n].properties.composite]
    refuse_empty(("--out", args.out))
    to_file = bool(args.out) and args.out != "-"  # '-': the results as JSON on stdout, as iro solve
    if to_file:
        check_output_file("--out", args.out, make=False)
        check_distinct_outputs(("--out", args.out), inputs=[("PROBLEM", path) for path in args.problems])
    problems = [(path, _load(path)) for path in args.problems]
    if to_file:  # its folder made only once every problem is read and good
        check_output_file("--out", args.out)
    results: list[dict[str, Any]] = []
    console = _console(markup=False)
    from rich.progress import BarColumn, Progress, TaskProgressColumn, TextColumn, TimeRemainingColumn

    # Progress's default columns read the description as markup: a path is printed as it is
    columns = (TextColumn("{task.description}", style="progress.description", markup=False), BarColumn(),
               TaskProgressColumn(), TimeRemainingColumn())
    with Progress(*columns, console=_console(stderr=True, markup=False), transient=True) as progress:
        task = progress.add_task("solving", total=len(problems) * len(names))
        per_problem = []
        warmed: set[str] = set()
        warm_on = warm_up_problem([problem for _, problem in problems])
        for path, problem in problems:
            rows = []
            for name in names:
                progress.update(task, description=f"{path}: {name}")
                if name not in warmed:
                    # once per solver, untimed, before its first timed solve (which would time the imports too)
                    warm_up(name, {"seed": args.seed}, warm_on)
                    warmed.add(name)
                try:
                    solver = solvers.make(name, seed=args.seed)
                    placement = solver.solve(problem)
                    # cpsat's and qubo's line on how the solve went, as iro solve prints it
                    rows.append((name, placement, None, solver.describe(placement)))
                except solvers.SolverError as exc:
                    rows.append((name, None, str(exc), None))
                progress.advance(task)
            per_problem.append((path, problem, rows))
    tables: list[tuple[Table, list[str]]] = []
    for path, problem, rows in per_problem:
        table = Table(title=f"{path}: {problem.num_workloads} workloads on {problem.num_nodes} nodes in {len(problem.domains)} domains")
        table.add_column("solver")
        table.add_column("status")
        _objective_columns(table)
        best = max((p.objective.score for _, p, _, _ in rows if p is not None), default=None)
        notes = []
        for name, placement, error, note in sorted(rows, key=lambda r: -(r[1].objective.score if r[1] else float("-inf"))):
            if placement is None:
                table.add_row(name, "error", error or "", *[""] * 8)
                results.append({"problem": path, "solver": name, "status": "error", "error": error})
                continue
            cells = _objective_cells(placement)
            if placement.objective.score == best:
                table.add_row(name, placement.status, Text(cells[0], style="bold green"), *cells[1:])
            else:
                table.add_row(name, placement.status, *cells)
            results.append({"problem": path, "solver": name, **placement.to_dict(problem)["objective"], "status": placement.status,
                            "solve_s": placement.timing.get("solve_s"), "note": note})
            if note:
                notes.append(note)
        tables.append((table, notes))
    document = {"seed": args.seed, "results": results}
    if args.out == "-":  # the JSON alone on stdout, for a pipe
        print(json.dumps(document, indent=2))
        return EXIT_OK
    for table, notes in tables:
        console.print(table)
        for note in notes:
            console.print(note, soft_wrap=True)
    if args.out:
        write_outputs(("--out", args.out, lambda: write_json_atomic(args.out, document)))
        console.print(f"results written to {args.out}")
    return EXIT_OK


#: Most seeds one ``--seeds`` may name: each is a whole replay, and a typo such as ``0-9999999``
#: should fail at once, not after building a list of millions (or running out of memory).
MAX_SEEDS = 1000


def parse_seeds(text: str, flag: str = "--seeds") -> list[int]:
    """``42``, ``42-51`` or ``42,45,50`` to a list of seeds, each in ``check_seed``'s range,
    none twice, at most :data:`MAX_SEEDS`."""
    seeds: list[int] = []
    try:
        for part in text.split(","):
            part = part.strip()
            if "-" in part[1:]:
                lo, hi = part.split("-", 1)
                first, last = int(lo), int(hi)
                if last < first:
                    raise UsageError(f"{flag}: range {part!r} ends before it starts")
                check_seed(flag, first)
                check_seed(flag, last)
                if last - first + 1 > MAX_SEEDS:
                    raise UsageError(f"{flag}: at most {MAX_SEEDS} seeds, {part!r} has {last - first + 1}")
                seeds.extend(range(first, last + 1))
            else:
                seeds.append(check_seed(flag, int(part)))
    except ValueError:
        raise UsageError(f"{flag}: expected N, N-M or a comma list of seeds, got {text!r}") from None
    if len(seeds) > MAX_SEEDS:
        raise UsageError(f"{flag}: at most {MAX_SEEDS} seeds, got {len(seeds)}")
    dup = next((x for x, n in Counter(seeds).items() if n > 1), None)
    if dup is not None:
        raise UsageError(f"{flag}: seed {dup} given twice (the median would count it twice)")
    return seeds


#: ``iro replay``'s arrival-sequence seed when neither ``--seed`` nor ``--seeds`` is given.
REPLAY_SEED = 42


def replay_columns(seeds: int) -> tuple[str, ...]:
    """``iro replay``'s value columns; over several seeds each says how the seeds combine (the
    paper's figure is the median unallocated share, the counts and the fragmentation are means,
    the time a total), as the JSON document does."""
    if seeds == 1:
        return ("arrived", "failed", "unallocated GPU % @100", "frag GPU % @100", "time s")
    return ("mean arrived", "mean failed", "median unallocated GPU % @100", "mean frag GPU % @100", "total time s")


#: ``iro replay --out`` suffixes of formats other than the JSON it writes (``--out x.csv`` wrote
#: JSON into a .csv file); the images are ``--plot``'s.
REPLAY_OUT_OTHER_FORMATS = (".csv", ".tsv", ".yaml", ".yml")
REPLAY_OUT_IMAGES = (".png", ".svg", ".pdf", ".jpg", ".jpeg")


def check_replay_out(path: str) -> None:
    """Refuse an ``iro replay --out`` file whose suffix names another format than JSON."""
    suffix = Path(path).suffix.lower()
    if suffix in REPLAY_OUT_OTHER_FORMATS or suffix in REPLAY_OUT_IMAGES:
        hint = "; --plot writes the allocation curve as an image" if suffix in REPLAY_OUT_IMAGES else ""
        raise UsageError(f"--out: {path!r} has suffix {suffix!r}, but the replay result is JSON; give a .json file{hint}")


def cmd_replay(args: argparse.Namespace) -> int:
    import solvers
    from iro_fed.problem_io import write_json_atomic
    from iro_fed.replay import batch_window_error, median_unallocated, replay_trace, summary
    from iro_fed.traces.openb import TraceFormatError, gpu_capacity, load_nodes, load_pods

    error = batch_window_error(args.batch_window)  # the library's rule (at most MAX_ARRIVALS)
    if error is not None:
        raise UsageError(f"--batch-window: {error}")
    policies = check_names("--policy", args.policy, list(solvers.registered()))
    for name in policies:
        if args.batch_window == 1 and not issubclass(solvers.registered()[name], solvers.OnlineSolver):
            raise UsageError(f"--policy: {name!r} is not an online solver; replay places pods one at a time (or give --batch-window)")
    if args.seeds is not None and args.seed is not None:  # one of them would be silently ignored
        raise UsageError("--seed and --seeds: give one")
    if args.seeds is not None:
        seeds = parse_seeds(args.seeds)
    else:
        seeds = [check_seed("--seed", REPLAY_SEED if args.seed is None else args.seed)]
    settings = {name: _parse_settings(args.set or [], name) for name in policies} if args.set else {}
    refuse_empty(("--out", args.out), ("--plot", args.plot))
    if args.out:
        check_replay_out(args.out)
        check_output_file("--out", args.out, make=False)
    if args.plot:
        from iro_fed.plots import check_plot_file

        check_plot_file("--plot", args.plot, make=False)
    for flag, path in (("--nodes", args.nodes), ("--pods", args.pods)):
        check_input_file(flag, path)
    check_distinct_outputs(("--out", args.out), ("--plot", args.plot),
                           inputs=[("--nodes", args.nodes), ("--pods", args.pods)])
    try:
        nodes = load_nodes(args.nodes)
    except TraceFormatError as exc:
        raise UsageError(f"--nodes: {exc}") from exc
    if gpu_capacity(nodes) == 0:
        raise UsageError(f"--nodes: {args.nodes!r} lists no GPUs; the replay measures GPU allocation and needs at least one")
    try:
        pods = load_pods(args.pods)
    except TraceFormatError as exc:
        raise UsageError(f"--pods: {exc}") from exc
    for flag, path in (("--out", args.out), ("--plot", args.plot)):
        if path:  # their folders made only now that the traces are read and good, before the replay
            check_output_file(flag, path)
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    documents = {}
    all_results = {}
    progress = Progress(
        TextColumn("{task.description}", markup=False), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
        console=_console(stderr=True, markup=False), transient=True
    )
    with progress:
        for name in policies:
            results = []
            for seed in seeds:
                task = progress.add_task(f"{name} seed {seed}", total=None)

                def tick(done: int, task=task) -> None:
                    if done % 200 == 0:
                        progress.update(task, completed=done)

                try:
                    result = replay_trace(nodes, pods, name, seed, settings.get(name), on_progress=tick,
                                          batch_window=args.batch_window)
                except TraceFormatError as exc:  # a pod the cluster's model cannot hold
                    raise UsageError(f"--pods: {exc}") from exc
                progress.remove_task(task)
                results.append(result)
            all_results[name] = results
            documents[name] = summary(results, args.pods, args.nodes)
    table = Table(title=f"replay of {args.pods} on {len(nodes)} nodes ({sum(n.gpus for n in nodes)} GPUs)")
    for col in ("policy", "seeds", *replay_columns(len(seeds))):
        table.add_column(col, justify="left" if col == "policy" else "right")
    for name, results in all_results.items():
        doc = documents[name]
        frag = doc["frag_gpu_pct"].get("100")
        table.add_row(
            name,
            ",".join(str(r.seed) for r in results) if len(results) <= 3 else f"{results[0].seed}..{results[-1].seed}",
            str(round(float(sum(r.arrived_pods for r in results)) / len(results))),
            str(round(float(sum(r.failed_pods for r in results)) / len(results))),
            _fmt(median_unallocated(results), 2),
            _fmt(frag, 2),
            f"{sum(r.timing['replay_s'] for r in results):.1f}",
        )
    console = _console(markup=False)
    console.print(table)
    from iro_fed.plots import allocation_plot

    curves = {name: doc["alloc_gpu_pct"] for name, doc in documents.items()}
    result = documents[policies[0]] if len(policies) == 1 else {"results": list(documents.values())}
    # The image first: it has more ways to fail, and then nothing is written.
    write_outputs(
        ("--plot", args.plot, lambda: allocation_plot(curves, args.plot, title=f"GPU allocation, {Path(args.pods).name}")),
        ("--out", args.out, lambda: write_json_atomic(args.out, result)),
    )
    if args.out:
        console.print(f"results written to {args.out}")
    if args.plot:
        console.print(f"plot written to {args.plot}")
    return EXIT_OK


def cmd_validate(args: argparse.Namespace) -> int:
    from iro_fed.problem_io import load_document, problem_from_dict

    doc = load_document(args.problem)
    problem = problem_from_dict(doc, source=str(args.problem))
    _console(markup=False).print(f"{args.problem}: valid, {problem!r}")
    note_unknown_fields(args.problem, doc)
    return EXIT_OK


# --- entry point ---------------------------------------------------------------------------


def package_version() -> str:
    """The installed iro-fed's version; ``iro_fed.__version__`` when run from a source tree
    that is not installed."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("iro-fed")
    except PackageNotFoundError:
        import iro_fed

        return iro_fed.__version__


class _VersionAction(argparse.Action):
    """argparse's ``version`` action, with the version looked up only when asked for: importing
    importlib.metadata on every start would cost ``iro`` ~20 ms."""

    def __init__(self, option_strings: Sequence[str], dest: str = argparse.SUPPRESS,
                 default: Any = argparse.SUPPRESS, help: str | None = None) -> None:
        super().__init__(option_strings, dest=dest, default=default, nargs=0, help=help)

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        print(f"{parser.prog} {package_version()}")
        parser.exit()


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="iro", description="IRO-Fed: multi-objective placement across edge, zones and cloud.")
    parser.add_argument("--version", action=_VersionAction, help="print the version and exit")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("solvers", help="list the registered solvers")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.set_defaults(func=cmd_solvers)

    p = sub.add_parser("solve", help="solve one problem file and write the placement file")
    p.add_argument("problem", metavar="PROBLEM", help="problem file (JSON or YAML)")
    p.add_argument("--solver", required=True, metavar="NAME", help="registered solver name (see `iro solvers`)")
    p.add_argument("--set", action="append", metavar="KEY=VALUE", help="solver setting; repeat for several")
    p.add_argument("--out", metavar="FILE", help="write the placement file here ('-' prints it to stdout)")
    p.add_argument("--show-unplaced", type=int, default=10, metavar="N", help="unplaced pods to list (default 10)")
    p.set_defaults(func=cmd_solve)

    p = sub.add_parser("compare", help="solve problem files with several solvers and print one table per problem")
    p.add_argument("problems", nargs="+", metavar="PROBLEM")
    p.add_argument("--solvers", metavar="A,B,...", help="solver names (default: every available non-composite solver)")
    p.add_argument("--seed", type=int, default=0, help="seed given to every solver (default 0)")
    p.add_argument("--out", metavar="FILE", help="write the results as JSON here ('-' prints them to stdout, without the tables)")
    p.set_defaults(func=cmd_compare)

    p = sub.add_parser("replay", help="replay an Alibaba openb trace online, pod by pod (shared/spec/fgd-replay.md)")
    p.add_argument("--nodes", required=True, metavar="CSV", help="node list, e.g. openb_node_list_gpu_node.csv")
    p.add_argument("--pods", required=True, metavar="CSV", help="pod list, e.g. openb_pod_list_default.csv")
    p.add_argument("--policy", required=True, metavar="NAME[,NAME]", help="online solver(s), e.g. fgd, fgd-bestfit, iro-frag")
    # default None, not 42: giving --seed with --seeds is an error, the default alone is not
    p.add_argument("--seed", type=int, default=None, help=f"arrival-sequence seed (default {REPLAY_SEED})")
    p.add_argument("--seeds", metavar="N-M", help="several seeds, e.g. 42-51 or 1,5,9 (at most 1000, none twice); "
                                                  "the result holds the median unallocated GPU %% at 100 %% and the mean curves")
    p.add_argument("--set", action="append", metavar="KEY=VALUE", help="policy setting; repeat for several")
    p.add_argument("--out", metavar="FILE", help="write the result JSON here (a .json file: a .csv, .yaml or image "
                                                 "suffix is refused)")
    p.add_argument("--plot", metavar="PNG", help="write GPU allocation vs arrived workload as a PNG")
    p.add_argument("--batch-window", type=int, default=1, metavar="N",
                   help="queue arriving pods and place N at a time with the policy's solve (e.g. cpsat); default 1 = "
                        "online; an online policy's curve is the same with any N; at most 1,000,000 (a window "
                        "past the arrivals is one offline solve); cpsat maximizes R, which does not weigh stranded "
                        "GPU: --set gpu_guard=true ranks last the nodes where a pod would strand GPUs for later "
                        "pods (lower unallocated GPU on every openb list)")
    p.set_defaults(func=cmd_replay)

    p = sub.add_parser("validate", help="check a problem file and report every error with its field path")
    p.add_argument("problem", metavar="PROBLEM")
    p.set_defaults(func=cmd_validate)

    for module_name in COMMAND_MODULES:
        importlib.import_module(module_name).register(sub)
    return parser


def broken_pipe() -> int:
    """The reader of stdout went away (``iro solve ... --out - | head -1``): no message, exit 141
    as a Unix tool ended by SIGPIPE does. stdout is pointed at the null device, so Python's flush
    at exit does not report the same broken pipe again (the recipe of the signal module's docs)."""
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, ValueError, OSError):  # not a real file (main() called with stdout captured)
        return EXIT_BROKEN_PIPE
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, fd)
    os.close(devnull)
    return EXIT_BROKEN_PIPE


def main(argv: Sequence[str] | None = None) -> int:
    # First of all: a SIGTERM during the imports and the parser build (~0.4 s) is a stop asked for
    # (EarlyStop), not a death by signal (143) of a service Kubernetes or systemd just started.
    early = EarlyStop.catch()
    try:
        return _main(argv, early)
    finally:
        if early is not None:
            early.release()


def _main(argv: Sequence[str] | None, early: EarlyStop | None) -> int:
    try:
        from iro_fed.problem_io import ProblemValidationError
        from solvers import InvalidSettingError, SolverError

        parser = build_parser()
        args = parser.parse_args(argv)
    except KeyboardInterrupt:
        # Ctrl-C during the imports and the parser build (~0.4 s), before any command: the
        # same exit as during one, not a traceback (no command name is known yet)
        print("iro: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    if early is not None:
        # the long-running commands mark themselves (set_defaults(service=True)); the jobs end on SIGTERM as before
        stopped = early.started(getattr(args, "service", False))
        if stopped is not None:
            return stopped
    try:
        status = args.func(args)
        if sys.stdout is not None:  # a reader gone shows here, not as a flush error at exit
            sys.stdout.flush()
        return status
    except BrokenPipeError:
        return broken_pipe()
    except (UsageError, ProblemValidationError, InvalidSettingError) as exc:
        print(f"iro {args.command}: error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except SolverError as exc:
        print(f"iro {args.command}: solver error: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:
        print(f"iro {args.command}: error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        print(f"iro {args.command}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED


if __name__ == "__main__":
    # `python -m iro_fed.cli` runs this file as a second module, __main__: the subcommands raise
    # iro_fed.cli.UsageError, which __main__'s own class would not catch (a traceback, not exit 2).
    from iro_fed.cli import main as _main

    sys.exit(_main())

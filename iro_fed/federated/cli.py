"""``iro fed``: federated training of the placement policy with Flower.

    iro fed local --nodes 3 --rounds 5 [--registry DIR]     # SuperLink + N SuperNodes on 127.0.0.1
    iro fed server --ssl-ca-certfile ca.crt --ssl-certfile server.crt --ssl-keyfile server.key
    iro fed node --superlink HOST:PORT --site 0 --root-certificates ca.crt [--auth-key KEY]
    iro fed certs --out DIR --host superlink.example.org [--node-keys 3]

flwr is imported only when a command runs.

Stopping (the project's convention, :mod:`iro_fed.cli`): ``iro fed server`` and ``iro fed node``
pass a SIGTERM or Ctrl-C on to Flower's processes (each in its own session) and wait up to
:data:`STOP_WAIT_S` for them; once they are gone the command exits 0 after SIGTERM and 130 after
Ctrl-C, whatever status Flower answers the SIGTERM with (flower-superlink dies of it, or exits 3),
and 1 when one had to be killed. A SuperLink or SuperNode that exits unasked passes on its
status (128+N for a death by signal N). ``iro fed rounds`` stops the run in progress (on the
SuperLink too), puts its requests back to wait and exits 0 after SIGTERM, 130 after Ctrl-C, 1 when
a run could not be stopped on the SuperLink. A second signal cuts the stop short. A SIGTERM
while they start (imports, argument checks) is a stop too: exit 0 before Flower or a run is
started (:class:`iro_fed.cli.EarlyStop`). ``iro fed local`` is a job, not a service: stopped
before it finished (every process it started stopped too), it exits 143 after SIGTERM, 130 after
Ctrl-C.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import signal
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from iro_fed.cli import (
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_OK,
    UsageError,
    _console,
    check_input_file,
    check_int,
    check_listen_host,
    check_number,
    check_output_file,
    check_output_folder,
    refuse_empty,
    split_pairs,
    stop_status,
    take_over_sigterm,
)
from iro_fed.federated.emissions import NODE_CONFIG_KEY as EMISSIONS_KEY
from iro_fed.federated.emissions import check_country
from iro_fed.federated.procs import parse_host_port
from iro_fed.signal_event import SignalEvent

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable

    from iro_fed.federated.round_requests import RoundRequest, RoundRequestQueue

#: Federated rounds of `iro fed local` / `iro fed rounds` without --rounds (or --set num-server-rounds).
DEFAULT_ROUNDS = 3

#: How long `iro fed server` / `node` wait for Flower's processes after passing on a SIGTERM or
#: Ctrl-C before they kill them: within Kubernetes' default grace period (30 s) and systemd's (90 s).
STOP_WAIT_S = 20.0
# How long a stop waits for `flwr run` to name its run (`iro fed rounds`), so that it can stop that
# run on the SuperLink too; within systemd's TimeoutStopSec (90 s in deploy/federated).
STOP_GRACE_S = 30.0
#: `iro fed local` starts a SuperNode and a ClientApp executor per site on this machine.
LOCAL_MAX_NODES = 64
#: `iro fed certs --node-keys` at most (one key pair per site).
MAX_NODE_KEYS = 1000
#: `iro fed node --site` at most. An index past the scenario's sites wraps onto their slices with
#: its own seeds (edge-iot's site 5 is site 0's slice), so larger federations have one per node;
#: more sites than `iro fed certs` makes node keys for is a typo (--site 100000 was taken).
MAX_SITE = MAX_NODE_KEYS - 1
#: `iro fed rounds --poll-s` and `--min-interval-s` at most (a day, a week): a longer wait is a
#: typo (beyond ~9e9 s the threading.Event it once waited on raised OverflowError).
MAX_POLL_S = 86400.0
MAX_INTERVAL_S = 7 * 86400.0


def register(sub: Any) -> None:
    # Each subcommand's defaults set ``command`` ("fed node"): argparse copies a subparser's
    # defaults over its parents', so iro_fed.cli.main's "iro {command}: error:" names the subcommand.
    fed = sub.add_parser("fed", help="federated training of the placement policy (Flower)",
                         description="Federated DQN training: edge sites train locally, a Flower server aggregates.")
    fsub = fed.add_subparsers(dest="fed_command", metavar="{local,server,node,certs,rounds}")
    fsub.required = True

    p = fsub.add_parser("local", help="run a real SuperLink and N SuperNodes on 127.0.0.1 and train",
                        description="Start flower-superlink and N flower-supernode processes on loopback (one "
                                    "edge-iot site each), run the app with `flwr run`, stop them all, print a table.")
    p.add_argument("--nodes", type=int, default=3, help="SuperNodes (sites) to start (default 3)")
    p.add_argument("--rounds", type=int, default=None, help=f"federated rounds (default {DEFAULT_ROUNDS})")
    p.add_argument("--registry", default="policies", help="policy-registry folder (default ./policies)")
    p.add_argument("--strategy", default=None, help="fedavg (default), fedprox, fedmedian, fedtrimmedavg, krum, bulyan")
    p.add_argument("--local-steps", type=int, default=None, help="local training steps per site and round")
    p.add_argument("--carbon-aware", action="store_true",
                   help="each round trains the sites at or below the median grid carbon, at least carbon-min-fraction "
                        "of them (min-nodes follows it, and --set fraction-train=F, unless --set min-nodes=N)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="any [tool.flwr.app.config] setting, kebab-case (repeatable), but registry (use --registry) "
                        "and one that an option given sets too (--rounds, --strategy, --local-steps, --carbon-aware)")
    p.add_argument("--tls", action="store_true", help="serve the SuperLink with TLS (certificates made on the fly)")
    p.add_argument("--supernode-auth", action="store_true",
                   help="with --tls: SuperNode authentication (keys made and registered with `flwr supernode register`)")
    p.add_argument("--workdir", default=None, help="keep FLWR_HOME and the process logs here (default: a temp dir)")
    p.add_argument("--timeout", type=float, default=3600.0, help="seconds before the run is abandoned (default 3600)")
    p.add_argument("--json", dest="json_out", default=None, metavar="FILE", help="write the per-round summary as JSON")
    p.add_argument("--verbose", action="store_true", help="show Flower's whole log stream")
    p.set_defaults(func=cmd_local, command="fed local")

    s = fsub.add_parser("server", help="run the SuperLink of a multi-machine federation (TLS)",
                        description="Run flower-superlink for a real deployment. TLS is required unless --insecure.")
    s.add_argument("--host", default="0.0.0.0", help="address to listen on (default 0.0.0.0)")
    s.add_argument("--port", type=int, default=8000, help="Fleet/Control/Runtime HTTP API port (default 8000)")
    s.add_argument("--ssl-ca-certfile", default=None, help="CA certificate (PEM)")
    s.add_argument("--ssl-certfile", default=None, help="server certificate (PEM)")
    s.add_argument("--ssl-keyfile", default=None, help="server private key (PEM)")
    s.add_argument("--enable-supernode-auth", action="store_true",
                   help="only SuperNodes whose public key was registered (`flwr supernode register`) may join")
    s.add_argument("--database", default=None, help="SuperLink state database file (default: in memory)")
    s.add_argument("--insecure", action="store_true", help="plain HTTP (only for a lab network)")
    s.add_argument("--dry-run", action="store_true", help="print the command instead of running it")
    s.set_defaults(func=cmd_server, service=True, command="fed server")

    n = fsub.add_parser("node", help="run one site's SuperNode of a multi-machine federation (TLS)",
                        description="Run flower-supernode for one edge site. TLS is required unless --insecure.")
    n.add_argument("--superlink", required=True, help="SuperLink address HOST:PORT")
    n.add_argument("--site", type=int, required=True,
                   help=f"this node's site: edge-iot has sites 0..4; 5..{MAX_SITE} wrap onto their slices with their "
                        "own seeds (site 5 trains on site 0's). The run's eval-site (4 by default; also 9, 14, ...) "
                        "is held out: a node on it is refused every round")
    n.add_argument("--root-certificates", default=None, help="CA certificate that signed the SuperLink's (PEM)")
    n.add_argument("--auth-key", default=None, help="this node's private key (OpenSSH) for SuperNode authentication")
    n.add_argument("--port", type=int, default=9094, help="local ClientApp runtime port (default 9094)")
    n.add_argument("--node-config", default="",
                   help="extra node settings 'key=value ...', e.g. 'emissions-country=\"FRA\"' (ISO alpha-3: the country "
                        "whose grid mix codecarbon measures this site's training with; default DEU)")
    n.add_argument("--executor", choices=("warm", "flower"), default="warm",
                   help="ClientApp executor: warm (default; ours, heavy modules imported once, a forked process per "
                        "message) or flower (Flower's SuperExec, a new flwr-clientapp process per message: several "
                        "seconds more per round)")
    n.add_argument("--insecure", action="store_true", help="plain HTTP (only for a lab network)")
    n.add_argument("--dry-run", action="store_true", help="print the command instead of running it")
    n.set_defaults(func=cmd_node, service=True, command="fed node")

    r = fsub.add_parser("rounds", help="run the federated rounds that the feedback loop asks for (--round-request)",
                        description="Watch the folder that `iro scheduler --round-request DIR` / `iro feedback-sim "
                                    "--round-request DIR` write into; for the requests waiting there, start one "
                                    "`flwr run APP FEDERATION` that fine-tunes the registry's latest global policy, "
                                    "then file them under DIR/rounds/done or DIR/rounds/failed with a record of the run.")
    r.add_argument("--requests", required=True, metavar="DIR", help="the writers' --round-request folder")
    r.add_argument("--federation", required=True,
                   help="SuperLink connection of the operator's FLWR_HOME config.toml (e.g. production); checked at "
                        "start and before each run: once it is gone or unusable, the command exits 2 and the "
                        "requests wait in DIR/requests")
    r.add_argument("--rounds", type=int, default=None, help=f"federated rounds per run (default {DEFAULT_ROUNDS})")
    r.add_argument("--registry", default=None,
                   help="policy registry on the ServerApp's machine (default: the app's `registry` setting)")
    r.add_argument("--fresh", action="store_true", help="train from a fresh policy, not the registry's latest")
    r.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="any [tool.flwr.app.config] setting, kebab-case (repeatable), but one that an option given "
                        "sets too (--registry, --rounds, --fresh)")
    r.add_argument("--once", action="store_true", help="handle the waiting requests, then exit (for cron)")
    r.add_argument("--poll-s", type=float, default=10.0,
                   help=f"seconds between looks at the folder (default 10, at most {MAX_POLL_S:g})")
    r.add_argument("--min-interval-s", type=float, default=0.0,
                   help=f"least seconds from the start of one run to the next (default 0, at most {MAX_INTERVAL_S:g})")
    r.add_argument("--timeout", type=float, default=3600.0, help="seconds before a run is abandoned (default 3600)")
    r.add_argument("--app", default=None, help="Flower app folder (default: this checkout)")
    r.set_defaults(func=cmd_rounds, service=True, command="fed rounds")

    c = fsub.add_parser("certs", help="make a CA, a SuperLink certificate and SuperNode auth keys",
                        description="Write ca.crt/ca.key, server.crt/server.key and nodeN/nodeN.pub into --out.")
    c.add_argument("--out", required=True, help="folder to write into")
    c.add_argument("--host", action="append", default=[], help="SuperLink DNS name or IP (repeatable; localhost "
                                                                 "and 127.0.0.1 are always added: the SuperLink's "
                                                                 "SuperExec dials 127.0.0.1)")
    c.add_argument("--node-keys", type=int, default=0, help=f"SuperNode authentication key pairs to make (0..{MAX_NODE_KEYS})")
    c.add_argument("--days", type=int, default=365, help="validity in days, 1..3650 (default 365)")
    c.add_argument("--force", action="store_true",
                   help="replace the CA, certificate and keys already in --out (every certificate and node key "
                        "made before stops working)")
    c.set_defaults(func=cmd_certs, command="fed certs")


# --- helpers ---------------------------------------------------------------------------------


def _needs_fed_extra(exc: ImportError) -> UsageError:
    """The error of ``iro fed`` subcommands without Flower: main prints it after
    "iro fed rounds: error:", so it does not name the command again."""
    return UsageError(f"the 'fed' extra is needed (pip install 'iro-fed[fed]'): {exc}")


def _pyproject_config() -> dict[str, Any]:
    import tomllib

    try:  # iro fed local reads it first: without Flower this import is the one that fails
        from iro_fed.federated.local import app_dir
    except ImportError as exc:
        raise _needs_fed_extra(exc) from exc

    with open(app_dir() / "pyproject.toml", "rb") as fh:
        return dict(tomllib.load(fh)["tool"]["flwr"]["app"].get("config", {}))


def parse_sets(pairs: list[str]) -> dict[str, Any]:
    """``--set KEY=VALUE`` run-config overrides: keys in kebab-case (``keep_replay`` -> ``keep-replay``),
    values read as TOML (``false``, ``3``, ``0.5``, ``"text"``), a bare word as a string. Raises
    :class:`UsageError` on a pair without ``=``. Shared by ``iro fed`` and ``benchmarks/federated.py``."""
    import tomllib

    out: dict[str, Any] = {}
    for key, value in split_pairs(pairs, "--set", kebab=True):
        try:
            out[key] = tomllib.loads(f"v = {value.strip()}")["v"]
        except tomllib.TOMLDecodeError:
            out[key] = value.strip()  # a bare word is a string
    return out


def local_min_nodes(cfg: Any, nodes: int) -> int:
    """``min-nodes`` for ``iro fed local`` with ``nodes`` sites (unless ``--set min-nodes=N``): the
    sites Flower samples per round at ``fraction-train`` (``int(nodes x fraction-train)``, as
    Flower counts it), with ``--carbon-aware`` the ``carbon-min-fraction`` of those; at least one
    site and what Krum/Bulyan need, at most ``nodes``.

    ``min-nodes`` is also the least Flower samples and carbon-aware participation trains: at
    ``--nodes`` (as it was) every site trained every round whatever fraction-train said, and
    carbon-aware participation could only down-weight, never skip a high-carbon site. ``cmd_local``
    waits for all ``nodes`` to join before the run when this is below ``nodes``.
    """
    from iro_fed.federated.task import required_nodes

    share = int(nodes * cfg.fraction_train)  # flwr's FedAvg.configure_train
    if cfg.carbon_aware:
        share = math.ceil(cfg.carbon_min_fraction * share)  # as the strategy counts it per round
    return min(nodes, max(1, share, required_nodes(cfg.strategy, cfg.num_malicious)))


def _setting_error(exc: Exception, sets: dict[str, Any], flags: dict[str, str]) -> UsageError:
    """A :class:`FedConfigError` ("key: why") as a UsageError naming what set the key: ``--set KEY``,
    or the option in ``flags`` (setting key -> option) that sets it; else the message as it is
    (a key of pyproject.toml's own config)."""
    text = str(exc)
    key, sep, why = text.partition(": ")
    if sep and key in sets:
        return UsageError(f"--set {key}: {why}")
    if sep and key in flags:
        return UsageError(f"{flags[key]}: {why}")
    return UsageError(text)


#: Settings that ``iro fed local`` / ``iro fed rounds`` also set from their own options (setting -> option).
#: A ``--set`` of one silently beat the option given with it, and ``iro fed local --set registry=X``
#: trained into X while the command read --registry's folder (exit 2 after a good run; a relative X
#: landed in the run's temporary workdir).
OPTION_SETTINGS = {"registry": "--registry", "num-server-rounds": "--rounds", "strategy": "--strategy",
                   "local-steps": "--local-steps", "carbon-aware": "--carbon-aware", "resume": "--fresh"}


def options_given(args: argparse.Namespace, keys: Iterable[str]) -> list[str]:
    """The settings of ``keys`` whose option (:data:`OPTION_SETTINGS`: ``--local-steps`` is ``args.local_steps``)
    the command line gave: a value, or a flag that is set."""
    values = {key: getattr(args, OPTION_SETTINGS[key].removeprefix("--").replace("-", "_")) for key in keys}
    return [key for key, value in values.items() if value is not None and value is not False]


def rounds_option(args: argparse.Namespace) -> int:
    """``--rounds`` (checked: 1 to MAX_SERVER_ROUNDS), or :data:`DEFAULT_ROUNDS` when not given."""
    from iro_fed.federated.task import MAX_SERVER_ROUNDS

    if args.rounds is None:
        return DEFAULT_ROUNDS
    check_int("--rounds", args.rounds, 1, MAX_SERVER_ROUNDS)
    return args.rounds


def refuse_option_settings(sets: dict[str, Any], given: Iterable[str], always: Iterable[str] = ()) -> None:
    """Raise :class:`UsageError` for a ``--set KEY`` whose option (:data:`OPTION_SETTINGS`) was ``given`` too,
    or that is in ``always`` (a setting the command itself reads from its option, e.g. ``registry``)."""
    given, always = set(given), set(always)
    for key in sets:
        if key in always:
            raise UsageError(f"--set {key}: this command reads {key} from {OPTION_SETTINGS[key]}; use "
                             f"{OPTION_SETTINGS[key]}")
        if key in given:
            raise UsageError(f"--set {key}: {OPTION_SETTINGS[key]} sets it too; give one of them")


def check_resume(cfg: Any, warn: Callable[[str], None]) -> int | None:
    """What the ServerApp's :func:`initial_weights` checks, before a local run starts any process: with
    ``resume``, the registry's latest version must fit the run's network (:class:`UsageError` naming the
    setting, was a ServerApp traceback after every process had started); ``warn`` gets a note when the
    registry has no version (a mistyped path started a fresh policy without a word). Returns the version."""
    if not cfg.resume:
        return None
    from iro_fed.federated.registry import PolicyRegistry
    from iro_fed.federated.server_app import initial_weights, no_version_note

    try:
        registry = PolicyRegistry(cfg.registry)
        if registry.latest_version() is None:
            warn(no_version_note(registry))
            return None
        return initial_weights(cfg, registry)[1]
    except ValueError as exc:  # RegistryError too
        text = str(exc)
        raise UsageError(f"--set {text}" if text.startswith("resume: ") else f"--set resume: {text}") from None


def _port(flag: str, port: int) -> int:
    return check_int(flag, port, 1, 65535)


def _check_listen(host_flag: str, host: str, port: int | None, port_flag: str = "--port") -> None:
    """Bind ``host`` as the SuperLink's HTTP server (uvicorn on asyncio: every address
    getaddrinfo gives, SO_REUSEADDR) and close at once: first on a free port, so that an address
    not of this machine names ``host_flag``, then on ``port`` (unless None), naming ``port_flag``.
    Resolving alone (:func:`iro_fed.cli.check_listen_host`) let ``--host 10.99.99.99`` start
    flower-superlink, which failed inside its log (exit 1). ``host`` has passed that check."""
    import socket

    for flag, at in ((host_flag, 0), *(((port_flag, port),) if port is not None else ())):
        try:
            infos = socket.getaddrinfo(host, at, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
        except (OSError, UnicodeError) as exc:
            raise UsageError(f"{host_flag}: cannot resolve {host!r}: {getattr(exc, 'strerror', None) or exc}") from None
        for family, kind, proto, _name, address in infos:
            try:
                with socket.socket(family, kind, proto) as sock:
                    if os.name == "posix":  # as asyncio's create_server: a port in TIME_WAIT is free
                        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                    if family == socket.AF_INET6:
                        sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
                    sock.bind(address)
            except OSError as exc:
                why = exc.strerror or exc
                if flag == host_flag:
                    raise UsageError(f"{host_flag}: cannot listen on {host!r} (is it an address of this machine?): "
                                     f"{why}") from None
                raise UsageError(f"{port_flag}: cannot listen on {host}:{port}: {why}") from None


# Flower's own reading of --node-config (flwr.common.config.parse_config_args): key=value pairs, a
# value quoted or up to the next space. Text it does not match is dropped without a word.
_NODE_CONFIG_PAIR = re.compile(r"(\S+?)=(\'[^\']*\'|\"[^\"]*\"|\S+)")


def parse_node_config(text: str) -> dict[str, Any]:
    """``--node-config 'key=value ...'`` as Flower reads it, refusing what it would drop or fail on."""
    import tomllib

    pairs, last = [], 0
    for match in _NODE_CONFIG_PAIR.finditer(text):
        if text[last:match.start()].strip():
            break
        pairs.append(match.groups())
        last = match.end()
    rest = text[last:].strip()
    if rest:
        raise UsageError(f"--node-config: expected space-separated key=value pairs, cannot read {rest[:60]!r}")
    for key, value in pairs:
        try:
            tomllib.loads(f"{key} = {value}")
        except tomllib.TOMLDecodeError:
            raise UsageError(f"--node-config: cannot read {key}={value} (a key, then a TOML value: 3, 0.5, true, "
                             "\"text\")") from None
    try:
        values = tomllib.loads("\n".join(f"{k} = {v}" for k, v in pairs))
    except tomllib.TOMLDecodeError as exc:  # the pairs together: a key given twice
        raise UsageError(f"--node-config: a key is given twice ({exc})") from None
    if "site" in values:
        raise UsageError("--node-config: site is set by --site")
    if EMISSIONS_KEY in values:  # the ClientApp would refuse every round; say so before it starts
        try:
            check_country(values[EMISSIONS_KEY])
        except ValueError as exc:
            raise UsageError(f"--node-config: {EMISSIONS_KEY}: {exc}") from None
    return values


def refuse_empty_paths(folders: Iterable[tuple[str, str | None]] = (),
                       files: Iterable[tuple[str, str | None]] = ()) -> None:
    """Refuse a path option (``(flag, value)``; None: not given) given as "" or blank, first thing in
    a command: each tested its value's truthiness or resolved it, so ``--out ""`` wrote into the
    working folder, ``--json ""`` or ``--database ""`` was dropped without a word and ``--app ""``
    meant the default. A folder in the words of the ``registry`` setting (:class:`FedConfig`), a file
    in :func:`iro_fed.cli.refuse_empty`'s (as :func:`iro_fed.cli.check_output_file` says it)."""
    refuse_empty(*folders, what="folder path")
    refuse_empty(*files)


def _need_file(flag: str, path: str) -> str:
    # a folder or a FIFO is named as such, not "no such file"
    return str(check_input_file(flag, path).resolve())


def _ssl_why(exc: Exception) -> str:
    """OpenSSL's words, without its source line ("(_ssl.c:4020)") and its "PEM lib", which say nothing."""
    why = re.sub(r"\s*\(_ssl\.c:\d+\)$", "", str(exc)).strip()
    said = ("no start line", "[X509: NO_CERTIFICATE_OR_CRL_FOUND]", "[SSL] PEM lib", "[X509] PEM lib")
    return "" if not why or why.startswith(said) else f": {why}"


def _certificates_problem(path: str | Path, what: str, as_text: bool) -> str | None:
    """Why ``path`` holds no PEM certificate, None when it does. ``as_text``: loaded as ASCII text
    (flower-supernode's way: ``cadata``), else from the file (the SuperLink's: ``cafile``)."""
    import ssl

    src = Path(path)
    try:
        data = src.read_bytes()
    except OSError as exc:
        return f"cannot read {str(src)!r}: {exc.strerror or exc}"
    try:
        context = ssl.create_default_context()
        if as_text:
            context.load_verify_locations(cadata=data.decode("ascii"))
        else:
            context.load_verify_locations(cafile=str(src))
    except UnicodeDecodeError:
        return f"{str(src)!r} is no PEM {what}: not ASCII text (a DER file? `openssl x509 -inform der` converts it)"
    except (ssl.SSLError, ValueError) as exc:  # ValueError: an empty file
        return f"{str(src)!r} holds no loadable PEM {what} ('-----BEGIN CERTIFICATE-----'){_ssl_why(exc)}"
    return None


def ca_file_problem(path: str | Path) -> str | None:
    """Why ``path`` is no PEM CA certificate (or bundle) to verify the SuperLink with, in words; None
    when it loads. Loaded as flower-supernode loads ``--root-certificates`` (ASCII text into
    ``load_verify_locations``): one it could not load killed its connecting thread while its HTTP
    API thread kept it alive, a SuperNode that never connected and never exited."""
    return _certificates_problem(path, "CA certificate", as_text=True)


_ENCRYPTED_KEY = (b"-----BEGIN ENCRYPTED PRIVATE KEY-----", b"Proc-Type: 4,ENCRYPTED")


def server_tls_problem(ca: str | Path, cert: str | Path, key: str | Path) -> tuple[str, str] | None:
    """``(which, why)`` for the first of a SuperLink's TLS files that cannot serve (``which`` is
    "ca", "cert" or "key"), None when they load. The pair is loaded as uvicorn loads it (with no
    pass phrase: OpenSSL would ask for one on the terminal), so a key that is not the certificate's
    is found too; flower-superlink ended in a 35-line traceback on any of these."""
    import ssl

    for which, path, what in (("ca", ca, "CA certificate"), ("cert", cert, "certificate")):
        problem = _certificates_problem(path, what, as_text=False)
        if problem is not None:
            return which, problem
    try:
        head = Path(key).read_bytes()[:1 << 20]
    except OSError as exc:
        return "key", f"cannot read {str(key)!r}: {exc.strerror or exc}"
    if any(mark in head for mark in _ENCRYPTED_KEY):
        return "key", (f"{str(key)!r} is an encrypted private key; flower-superlink cannot ask for its pass "
                       "phrase: give it unencrypted")
    try:
        ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER).load_cert_chain(str(cert), str(key), password=lambda: b"")
    except (ssl.SSLError, ValueError) as exc:
        if "KEY_VALUES_MISMATCH" in str(exc):
            return "key", f"{str(key)!r} is not the private key of the certificate {str(cert)!r}"
        return "key", f"{str(key)!r} holds no loadable PEM private key ('-----BEGIN PRIVATE KEY-----'){_ssl_why(exc)}"
    return None


def supernode_command(exe: str, superlink: str, port: int, node_config: str, root_certificates: str | None = None,
                      auth_key: str | None = None) -> list[str]:
    """The ``flower-supernode`` command of ``iro fed node`` (the edge agent's supervisor runs the same one).

    TLS with ``root_certificates`` (a PEM path), else ``--insecure``; ``auth_key`` adds SuperNode authentication.
    """
    argv = [exe, "--superlink", superlink, "--port", str(port), "--node-config", node_config]
    argv += ["--root-certificates", root_certificates] if root_certificates is not None else ["--insecure"]
    if auth_key is not None:
        argv += ["--auth-supernode-private-key", auth_key]
    return argv


def _signal_groups(procs: list[subprocess.Popen], sig: int) -> None:
    from iro_fed.federated.procs import signal_process

    for proc in procs:
        signal_process(proc.pid, sig, group=True)


def _supervise(argv: list[str], env: dict[str, str] | None, executor_port: int | None = None,
               start_timeout_s: float = 120.0, command: str = "fed") -> int:
    """Run ``argv`` (its own process group) in the foreground until it exits; SIGTERM / Ctrl-C stop
    it and everything it started. With ``executor_port`` (a SuperNode in ``--isolation process``)
    the warm ClientApp executor runs beside it: started once the Runtime API on that port listens,
    restarted (with a growing pause) if it dies while the SuperNode runs.

    Returns the exit status, by the stop convention of :mod:`iro_fed.cli`: 0 once a SIGTERM has
    stopped everything, 130 after Ctrl-C (whatever the child answers the SIGTERM we pass on with:
    flower-superlink dies of it or exits 3), 1 when something had to be killed after
    :data:`STOP_WAIT_S` or the Runtime API never listened, and the child's own status (128+N for a
    death by signal N) when it exits unasked. A second signal kills what is still running.
    ``command`` ("fed server", "fed node") names the subcommand in its messages, as
    :func:`iro_fed.cli.main` names it in an error's."""
    import socket
    import time

    from iro_fed.federated.local import LocalFederation

    procs: list[subprocess.Popen] = []
    asked: list[int] = []  # the signals that asked for the stop, in order

    def on_term(signum: int, _frame: Any) -> None:
        # The first is passed on below (every wait there is short); a second one is not waited for.
        asked.append(signum)
        if len(asked) > 1:
            _signal_groups(procs, signal.SIGKILL)

    # Caught before the child starts: a SIGTERM as soon as it serves must find this handler.
    old = signal.signal(signal.SIGTERM, on_term)
    early, old = take_over_sigterm(old)
    # Ctrl-C is noted the same way rather than raised as KeyboardInterrupt: one raised inside
    # Popen.wait(timeout) between its lock's acquire and the try that releases it (CPython checks
    # for signals as the acquire call returns) left the lock held, and the stop's wait() then hung
    # for ever (tests/test_stop_fed.py under load: no exit within 120 s). Ignored stays ignored.
    old_int = signal.getsignal(signal.SIGINT)
    if old_int is not signal.SIG_IGN:
        signal.signal(signal.SIGINT, on_term)
    try:
        if early is not None:  # a SIGTERM while the command started: nothing is started now
            return stop_status(early)
        node = subprocess.Popen(argv, env=env, start_new_session=True)
        procs.append(node)
        try:
            if executor_port is not None:
                exec_env = {**(env or os.environ), **LocalFederation._app_path()}
                deadline = time.monotonic() + start_timeout_s
                while node.poll() is None and not asked:
                    try:
                        with socket.create_connection(("127.0.0.1", executor_port), timeout=0.5):
                            break
                    except OSError:
                        if time.monotonic() > deadline:
                            print(f"iro {command}: the SuperNode's Runtime API did not listen on "
                                  f"127.0.0.1:{executor_port} within {start_timeout_s:.0f} s", file=sys.stderr)
                            _stop_procs(procs)
                            return EXIT_FAILED
                        time.sleep(0.2)
                pause = 1.0
                while node.poll() is None and not asked:
                    executor = subprocess.Popen(executor_command(executor_port, node.pid), env=exec_env,
                                                start_new_session=True)
                    procs[1:] = [executor]
                    started = time.monotonic()
                    while node.poll() is None and executor.poll() is None and not asked:
                        time.sleep(0.5)
                    if node.poll() is None and not asked:
                        pause = 1.0 if time.monotonic() - started > 60 else min(pause * 2, 30.0)
                        print(f"iro {command}: the ClientApp executor exited ({executor.returncode}); restarting in "
                              f"{pause:.0f} s", file=sys.stderr)
                        until = time.monotonic() + pause
                        while not asked and time.monotonic() < until:
                            time.sleep(0.2)
            while not asked:  # a bounded wait, so that a stop asked for meanwhile is bounded too
                try:
                    node.wait(timeout=0.5)
                    break
                except subprocess.TimeoutExpired:
                    pass
        except KeyboardInterrupt:  # Ctrl-C (the children, in their own sessions, did not see it)
            asked.append(signal.SIGINT)
        if not asked:  # it exited on its own: its status is ours
            return _exit_status(node.returncode)
        try:
            clean = _stop_procs(procs)
        except KeyboardInterrupt:  # Ctrl-C again: not waited for
            _signal_groups(procs, signal.SIGKILL)
            return EXIT_INTERRUPTED
        if len(asked) > 1:  # on_term killed them
            if asked[1] == signal.SIGINT:  # Ctrl-C again: not waited for, as always
                return EXIT_INTERRUPTED
            print(f"iro {command}: a second signal: Flower's processes were killed", file=sys.stderr)
            return EXIT_FAILED
        if not clean:
            print(f"iro {command}: {Path(argv[0]).name} did not stop within {STOP_WAIT_S:.0f} s and was killed",
                  file=sys.stderr)
            return EXIT_FAILED
        return stop_status(asked[0])
    finally:
        signal.signal(signal.SIGTERM, old)
        if old_int is not signal.SIG_IGN:
            signal.signal(signal.SIGINT, signal.default_int_handler if old_int is None else old_int)
        # Whatever the way out, nothing we started outlives us: the executor when the SuperNode
        # exited on its own, what is left in the group of one that exited.
        running = [proc for proc in procs if proc.poll() is None]
        _signal_groups([proc for proc in procs if proc not in running], signal.SIGTERM)
        if running:
            _stop_procs(running)


def _stop_procs(procs: list[subprocess.Popen]) -> bool:
    """SIGTERM the process groups of ``procs`` and wait up to :data:`STOP_WAIT_S` for them all;
    SIGKILL the ones still running then. Returns whether none had to be killed."""
    import time

    _signal_groups(procs, signal.SIGTERM)
    deadline = time.monotonic() + STOP_WAIT_S
    clean = True
    for proc in procs:
        try:
            proc.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            clean = False
            _signal_groups([proc], signal.SIGKILL)
            proc.wait()
    return clean


def _exit_status(returncode: int) -> int:
    """A child's exit status as ours: Popen reports a death by signal N as -N, which sys.exit(-N)
    would turn into 256-N; the shell's convention is 128+N."""
    return 128 - returncode if returncode < 0 else returncode


def _daemon_env() -> dict[str, str]:
    from iro_fed.federated.local import flower_bin, shared_data_dir

    env = dict(os.environ)
    env.setdefault("FLWR_TELEMETRY_ENABLED", "0")
    env.setdefault("IRO_DATA_DIR", str(shared_data_dir()))
    env["PATH"] = os.pathsep.join([str(Path(flower_bin("flwr")).parent), env.get("PATH", "")])
    return env


# --- commands --------------------------------------------------------------------------------


def cmd_local(args: argparse.Namespace) -> int:
    refuse_empty_paths(folders=[("--registry", args.registry), ("--workdir", args.workdir)],
                       files=[("--json", args.json_out)])
    from rich.table import Table
    from rich.text import Text

    from iro_fed.federated.task import FedConfig, FedConfigError, training_sites

    check_int("--nodes", args.nodes, 1, LOCAL_MAX_NODES)
    asked_rounds = rounds_option(args)
    check_number("--timeout", args.timeout, 0.0, low_open=True)
    try:
        registry = Path(args.registry).expanduser().resolve()
    except RuntimeError:  # ~user of an unknown user
        raise UsageError(f"--registry: cannot expand the home folder of {args.registry!r}") from None
    overrides: dict[str, Any] = {"num-server-rounds": asked_rounds, "registry": str(registry), "min-nodes": args.nodes}
    if args.strategy is not None:
        overrides["strategy"] = args.strategy
    if args.local_steps is not None:
        overrides["local-steps"] = args.local_steps
    if args.carbon_aware:
        overrides["carbon-aware"] = True
    sets = parse_sets(args.set)
    overrides.update(sets)
    app_config = _pyproject_config()
    try:
        cfg = FedConfig.from_run_config({**app_config, **overrides})
        if "min-nodes" not in sets:
            # min-nodes is Flower's least sample and carbon-aware participation's floor: at --nodes
            # every site trains every round (fraction-train and carbon-aware skipping do nothing)
            overrides["min-nodes"] = local_min_nodes(cfg, args.nodes)
            cfg = FedConfig.from_run_config({**app_config, **overrides})
    except FedConfigError as exc:
        # min-nodes starts at --nodes: Krum's "needs at least 5 sites, got 3" asks for more --nodes
        given = {"strategy": "--strategy", "local-steps": "--local-steps", "min-nodes": "--nodes"}
        raise _setting_error(exc, sets, {k: v for k, v in given.items() if k in overrides}) from exc
    # after the values' own checks (a bad value says why)
    refuse_option_settings(sets, options_given(args, ("num-server-rounds", "strategy", "local-steps", "carbon-aware")),
                           always=["registry"])
    if cfg.min_nodes > args.nodes:
        # Flower starts no round before min-nodes sites have joined: the run would only wait for --timeout.
        raise UsageError(f"--set min-nodes: {cfg.min_nodes} sites must join before a round starts, but --nodes "
                         f"starts {args.nodes}: no round could start; lower min-nodes or raise --nodes")
    if args.supernode_auth and not args.tls:
        raise UsageError("--supernode-auth needs --tls")
    # Folders are made (like mkdir -p) only once every argument and setting is known to be good.
    if args.json_out:  # written after the run: a bad path must fail before it, not after
        check_output_file("--json", args.json_out)
    if args.workdir:
        check_output_folder("--workdir", args.workdir)
    check_output_folder("--registry", registry)
    try:
        from iro_fed.federated.local import FederationError, LocalFederation, TLSFiles
    except ImportError as exc:
        raise _needs_fed_extra(exc) from exc
    if registry.exists() and not registry.is_dir():
        raise UsageError(f"--registry: {str(registry)!r} exists and is not a folder")
    # markup=False: Flower's log lines, paths and messages are printed as they are; styles by style=
    err = _console(stderr=True, markup=False)
    # what the ServerApp would find only once every process has started
    check_resume(cfg, lambda note: err.print(f"warning: {note}", style="yellow"))
    try:
        registry.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"--registry: cannot create {str(registry)!r}: {exc.strerror or exc}") from exc

    out = _console(markup=False)
    workdir = Path(args.workdir).resolve() if args.workdir else None
    fed = LocalFederation(args.nodes, workdir=workdir, supernode_auth=False,
                          log=lambda m: err.print(m, style="dim"),
                          sites=training_sites(cfg.scenario, cfg.eval_site, args.nodes))  # never the held-out one
    if args.tls:
        from iro_fed.federated.certs import make_tls

        paths = make_tls(fed.workdir / "certs")
        fed.tls = TLSFiles(paths["ca"], paths["cert"], paths["key"])
        fed.supernode_auth = args.supernode_auth
    rounds: list[dict[str, Any]] = []

    def on_line(line: str) -> None:
        from iro_fed.federated.server_app import ROUND_TAG

        if args.verbose:
            err.print(line, markup=False, highlight=False)
        if ROUND_TAG in line:
            try:
                row = json.loads(line.split(ROUND_TAG, 1)[1].strip())
            except json.JSONDecodeError:
                return
            err.print(f"round {row['round']}/{cfg.num_server_rounds}: {row['nodes']} site(s), "
                      f"{row['dropped']} dropped, held-out R {row['eval-reward']:.2f}, saved v{row['version']:04d}")
        elif "ERROR" in line or "Traceback" in line:
            err.print(line, markup=False, highlight=False)

    terminated: list[int] = []

    def on_term(signum: int, _frame: Any) -> None:
        terminated.append(signum)
        raise KeyboardInterrupt  # unwinds through `with fed`, which stops every process it started

    old_term = signal.signal(signal.SIGTERM, on_term)
    try:
        with err.status(Text(f"federated training: {args.nodes} SuperNode(s), {cfg.num_server_rounds} round(s), "
                             f"strategy {cfg.strategy}")) as status:
            with fed:
                if cfg.min_nodes < args.nodes:  # Flower would start round 1 with the first min-nodes to join
                    status.update(f"waiting for {args.nodes} SuperNodes to join")
                    fed.wait_for_nodes()
                status.update(f"running `flwr run` ({cfg.num_server_rounds} rounds, {args.nodes} sites)")
                result = fed.run(overrides, on_line=on_line, timeout=args.timeout)
                rounds = result["rounds"]
    except KeyboardInterrupt:
        err.print("interrupted: every Flower process was stopped", style="yellow")
        # A job stopped before it finished: 143 after SIGTERM as for every other job, 130 after Ctrl-C.
        return 128 + signal.SIGTERM if terminated else EXIT_INTERRUPTED
    except FederationError as exc:
        err.print(Text("federated run failed", style="red"), f" (logs in {fed.workdir}):", sep="")
        err.print(str(exc), markup=False, highlight=False)
        return 1
    finally:
        signal.signal(signal.SIGTERM, old_term)

    table = Table(title=f"iro fed local: {args.nodes} sites, strategy {cfg.strategy}, held-out site {cfg.eval_site}")
    for col in ("round", "version", "sites", "dropped", "held-out R", "sim score", "carbon kg", "train gCO2"):
        table.add_column(col, justify="right")
    for r in rounds:
        table.add_row(str(r["round"]), f"v{r['version']:04d}", str(r["nodes"]), str(r["dropped"]),
                      f"{r['eval-reward']:.2f}", f"{r['eval-score']:.4f}", f"{r['eval-carbon-kg']:.3f}",
                      format_grams(r.get("emissions_g")))
    out.print(table)
    out.print(f"registry: {registry} (latest -> {(registry / 'latest').read_text().strip() if rounds else '-'}); "
              f"wall {result['wall_s']:.1f} s")
    if args.json_out:
        from iro_fed.problem_io import write_json_atomic

        write_json_atomic(args.json_out, {"nodes": args.nodes, "strategy": cfg.strategy, "registry": str(registry),
                                          "rounds": rounds, "wall_s": result["wall_s"]})
    if len(rounds) != cfg.num_server_rounds:
        err.print(f"expected {cfg.num_server_rounds} rounds, the server reported {len(rounds)}; logs in "
                  f"{fed.workdir}", style="red")
        return 1
    if workdir is None:  # a temporary FLWR_HOME and logs: kept only when something failed
        import shutil

        shutil.rmtree(fed.workdir, ignore_errors=True)
    return EXIT_OK


def cmd_server(args: argparse.Namespace) -> int:
    refuse_empty_paths(files=[("--ssl-ca-certfile", args.ssl_ca_certfile), ("--ssl-certfile", args.ssl_certfile),
                              ("--ssl-keyfile", args.ssl_keyfile), ("--database", args.database)])
    try:
        from iro_fed.federated.local import flower_bin
    except ImportError as exc:
        raise _needs_fed_extra(exc) from exc

    files = [args.ssl_ca_certfile, args.ssl_certfile, args.ssl_keyfile]
    if any(files) and not all(files):
        raise UsageError("--ssl-ca-certfile, --ssl-certfile and --ssl-keyfile go together")
    if not all(files) and not args.insecure:
        raise UsageError("TLS needs --ssl-ca-certfile, --ssl-certfile and --ssl-keyfile (make them with "
                         "`iro fed certs`); pass --insecure to run without TLS on a lab network")
    if args.enable_supernode_auth and not all(files):
        raise UsageError("--enable-supernode-auth needs TLS (--ssl-* files)")
    if args.insecure and all(files):
        raise UsageError("--insecure and --ssl-* files contradict each other")
    check_listen_host("--host", args.host)
    _port("--port", args.port)
    if args.database:
        check_output_file("--database", args.database, make=False)  # a dry run makes nothing
    argv = [flower_bin("flower-superlink"), "--host", args.host, "--port", str(args.port),
            "--disable-runtime-dependency-installation"]
    if all(files):
        ca, cert, key = (_need_file(flag, path) for flag, path in (("--ssl-ca-certfile", args.ssl_ca_certfile),
                                                                   ("--ssl-certfile", args.ssl_certfile),
                                                                   ("--ssl-keyfile", args.ssl_keyfile)))
        problem = server_tls_problem(ca, cert, key)  # a dry run too: its command is for later
        if problem is not None:
            which, why = problem
            raise UsageError(f"--ssl-{'ca-certfile' if which == 'ca' else which + 'file'}: {why}")
        argv += ["--ssl-ca-certfile", ca, "--ssl-certfile", cert, "--ssl-keyfile", key]
    else:
        argv += ["--insecure"]
    if args.enable_supernode_auth:
        argv += ["--enable-supernode-auth"]
    if args.database:
        argv += ["--database", str(Path(args.database).resolve())]
    # A dry run prints a command for later: the port may be busy now (the SuperLink it replaces).
    _check_listen("--host", args.host, None if args.dry_run else args.port)
    if args.dry_run:
        print(" ".join(argv))
        return EXIT_OK
    if args.database:  # every argument is good: make its folder now, like mkdir -p
        check_output_file("--database", args.database)
    return _supervise(argv, _daemon_env(), command=args.command)


def cmd_node(args: argparse.Namespace) -> int:
    refuse_empty_paths(files=[("--root-certificates", args.root_certificates), ("--auth-key", args.auth_key)])
    try:
        from iro_fed.federated.local import flower_bin, run_config_arg
    except ImportError as exc:
        raise _needs_fed_extra(exc) from exc
    try:
        parse_host_port(args.superlink)
    except ValueError as exc:
        raise UsageError(f"--superlink: {exc}") from None
    _port("--port", args.port)
    parse_node_config(args.node_config)
    _check_node_site(args.site)
    if not args.root_certificates and not args.insecure:
        raise UsageError("TLS needs --root-certificates (the CA that signed the SuperLink's certificate); "
                         "pass --insecure to connect without TLS on a lab network")
    if args.insecure and (args.root_certificates or args.auth_key):
        raise UsageError("--insecure cannot be combined with --root-certificates or --auth-key")
    extra = args.node_config.strip()
    config = run_config_arg({"site": args.site}) + (f" {extra}" if extra else "")
    root = _need_file("--root-certificates", args.root_certificates) if args.root_certificates else None
    if root is not None:
        problem = ca_file_problem(root)
        if problem is not None:
            raise UsageError(f"--root-certificates: {problem}")
    argv = supernode_command(flower_bin("flower-supernode"), args.superlink, args.port, config, root,
                             _need_file("--auth-key", args.auth_key) if args.auth_key else None)
    if args.executor == "flower":
        if args.dry_run:
            print(" ".join(argv))
            return EXIT_OK
        return _supervise(argv, _daemon_env(), command=args.command)
    argv += ["--isolation", "process"]
    if args.dry_run:
        print(" ".join(argv))
        print(" ".join(executor_command(args.port, "<supernode pid>")))
        return EXIT_OK
    return _supervise(argv, _daemon_env(), executor_port=args.port, command=args.command)


def _check_node_site(site: int) -> None:
    """``iro fed node --site``: an index of the app's scenario, at most :data:`MAX_SITE`; a note when
    it is on the slice of the app's eval-site (the run's settings, which may set another, decide:
    the ClientApp refuses to train there, :func:`iro_fed.federated.client_app.check_training_site`)."""
    from iro_fed.federated.task import FedConfig, FedConfigError, site_profile, sites

    try:
        cfg = FedConfig.from_run_config(_pyproject_config())
    except FedConfigError:  # the app's own settings: the run reports them; the CLI checks the site alone
        cfg = FedConfig()
    try:
        site_profile(cfg.scenario, site)
    except FedConfigError as exc:
        raise UsageError(f"--site: {str(exc).removeprefix('site: ')}") from exc
    count = len(sites(cfg.scenario))
    if site > MAX_SITE:
        raise UsageError(f"--site: expected 0..{MAX_SITE}, got {site} ({cfg.scenario} has sites 0..{count - 1}; a "
                         "larger index wraps onto their slices with its own seeds)")
    if site % count == cfg.eval_site % count:
        _console(stderr=True).print(
            f"note: --site {site} is the app's held-out eval-site {cfg.eval_site}"
            f"{'' if site == cfg.eval_site else f' (its slice of {cfg.scenario})'}: unless the run sets another "
            "eval-site, this node's ClientApp refuses to train and every round counts it as failed",
            markup=False, highlight=False)


def executor_command(runtime_port: int, parent_pid: int | str) -> list[str]:
    """The warm ClientApp executor of a SuperNode whose Runtime API listens on ``runtime_port``
    (:mod:`iro_fed.federated.executor`; loopback, plain HTTP like Flower's own SuperExec)."""
    return [sys.executable, "-m", "iro_fed.federated.executor", "--runtime-api-address", f"127.0.0.1:{runtime_port}",
            "--insecure", "--parent-pid", str(parent_pid)]


def cmd_rounds(args: argparse.Namespace) -> int:
    refuse_empty_paths(folders=[("--requests", args.requests), ("--registry", args.registry), ("--app", args.app)])
    from iro_fed.federated.round_requests import ConsumerBusyError, RoundRequestQueue
    from iro_fed.federated.task import FedConfig, FedConfigError

    asked_rounds = rounds_option(args)
    check_number("--poll-s", args.poll_s, 0.0, MAX_POLL_S, low_open=True)
    check_number("--min-interval-s", args.min_interval_s, 0.0, MAX_INTERVAL_S)
    check_number("--timeout", args.timeout, 0.0, low_open=True)
    if not args.federation.strip():
        raise UsageError("--federation: expected a connection name of FLWR_HOME's config.toml")
    overrides: dict[str, Any] = {"num-server-rounds": asked_rounds, "resume": not args.fresh}
    if args.registry is not None:
        overrides["registry"] = args.registry
    sets = parse_sets(args.set)
    overrides.update(sets)
    try:
        from iro_fed.federated.local import FederationError, app_dir, check_superlink_connection
    except ImportError as exc:
        raise _needs_fed_extra(exc) from exc
    try:
        rounds = FedConfig.from_run_config({**_pyproject_config(), **overrides}).num_server_rounds  # --set may change it
    except FedConfigError as exc:
        raise _setting_error(exc, sets, {"registry": "--registry"}) from exc
    refuse_option_settings(sets, options_given(args, ("num-server-rounds", "registry", "resume")))
    app = Path(args.app).resolve() if args.app else app_dir()
    if not (app / "pyproject.toml").is_file():
        raise UsageError(f"--app: no pyproject.toml in {str(app)!r}")
    try:
        root = RoundRequestQueue.check_root(args.requests)
    except ValueError as exc:
        raise UsageError(f"--requests: {str(exc).removeprefix('root: ')}") from exc
    try:
        # Before any request is claimed: a typo here failed every run (its requests filed under
        # rounds/failed), or with none waiting polled forever without a word.
        check_superlink_connection(app, args.federation)
    except FederationError as exc:
        raise UsageError(f"--federation: {exc}") from None
    made = not root.exists()
    try:
        queue = RoundRequestQueue(root)
    except (ValueError, OSError) as exc:
        raise UsageError(f"--requests: {str(exc).removeprefix('root: ')}") from exc
    if made:  # the writers' spool folder, which they may make later; a typo shows here
        _console(stderr=True).print(f"note: --requests: {str(root)!r} did not exist, made it (the writers' "
                                    "--round-request folder: check the path if no request ever comes)",
                                    markup=False, highlight=False)
    try:
        # One consumer per folder, from here to the end: start-up recovery (below) then never takes
        # a live consumer's running claims, which would run twice.
        queue.lock()
    except ConsumerBusyError as exc:
        raise UsageError(f"--requests: {exc}") from None
    except OSError as exc:
        raise UsageError(f"--requests: cannot take {str(queue.lock_path)!r}: {exc}") from exc
    try:
        return _consume(args, queue, app, overrides, rounds)
    finally:
        queue.unlock()


def _consume(args: argparse.Namespace, queue: RoundRequestQueue, app: Path, overrides: dict[str, Any],
             rounds: int) -> int:
    """The loop of ``iro fed rounds`` once it is the folder's consumer."""
    import threading
    import time

    from rich.text import Text

    from iro_fed.federated.local import FederationError, check_superlink_connection, flwr_run, flwr_stop
    from iro_fed.federated.round_requests import ClaimLostError

    err = _console(stderr=True, markup=False)  # request files, sites and errors printed as they are
    stop = SignalEvent()  # set in on_signal: threading.Event's set() can deadlock there (iro_fed.signal_event)
    asked: list[int] = []  # the signals that asked for the stop, in order
    left_running: list[str] = []  # why a run could not be stopped on the SuperLink
    running: list[subprocess.Popen] = []
    run_ids: list[int] = []  # the SuperLink's id of the run in progress, once flwr run names it
    grace: threading.Timer | None = None

    def stop_running() -> None:
        _signal_groups(running, signal.SIGTERM)  # the run's own session: flwr run and what it started

    def on_signal(signum: int, _frame: Any) -> None:
        nonlocal grace
        asked.append(signum)
        again = stop.is_set()
        stop.set()
        if run_ids or not running or again:
            stop_running()
        else:
            # flwr run has not named its run yet: stopped now, it could leave a run going on the
            # SuperLink with no id to stop it by. on_run_id stops it once named, or this timer does.
            grace = threading.Timer(STOP_GRACE_S, stop_running)
            grace.daemon = True
            grace.start()

    old = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
    early, old[signal.SIGTERM] = take_over_sigterm(old[signal.SIGTERM])
    if early is not None:  # a SIGTERM while the command started: stop before any run starts
        on_signal(early, None)
    recovered = queue.recover()
    if recovered:
        err.print(f"{len(recovered)} request(s) of an interrupted run put back to wait")
    failed = 0
    last_start = -math.inf

    def on_run_id(run_id: int) -> None:
        run_ids.append(run_id)
        err.print(f"run {run_id} started on the SuperLink", highlight=False)
        if stop.is_set():  # a stop arrived before the id: now it can be stopped on the SuperLink
            stop_running()

    try:
        while not stop.is_set():
            claimed, rejected = queue.claim()
            for path, why in rejected:
                err.print(f"rejected {path.name}: {why}", style="yellow", highlight=False)
            try:
                if claimed:
                    wait = last_start + args.min_interval_s - time.monotonic()
                    if (wait > 0 and stop.wait(wait)) or stop.is_set():
                        queue.release(claimed)
                        break
                    try:
                        # Checked at start, but the operator's config.toml (or the app's
                        # federations) may have changed since: flwr run would fail on it, and
                        # file these requests, and every later one, under rounds/failed.
                        check_superlink_connection(app, args.federation)
                    except FederationError as exc:
                        # Bad input, as at start (exit 2), not a failed run: the requests wait for
                        # a consumer with a usable connection, none is filed under rounds/failed.
                        back = sum(req.path.exists() for req in claimed)  # still in running/
                        try:
                            queue.release(claimed)
                        except ClaimLostError as lost:  # moved away meanwhile; the others are back
                            err.print(str(lost), style="red", highlight=False)
                        raise UsageError(f"--federation: the Flower configuration changed since this consumer "
                                         f"started: {exc}; {back} request(s) put back to wait in "
                                         f"{str(queue.folder('requests'))!r}") from None
                    last_start = time.monotonic()
                    sites = sorted({req.site for req in claimed})
                    err.print(f"run: {len(claimed)} request(s) from {', '.join(sites)}; {rounds} round(s) on "
                              f"{args.federation!r}", highlight=False)
                    run_ids.clear()
                    env = _daemon_env()
                    try:
                        result = flwr_run(app, args.federation, overrides, env, Path.cwd(), timeout=args.timeout,
                                          started=running.append, on_run_id=on_run_id)
                    except FederationError as exc:
                        if stop.is_set():  # stopped mid-run: stop the run itself too; the requests wait again
                            for run_id in run_ids:
                                why = flwr_stop(run_id, args.federation, env, Path.cwd())
                                err.print(f"run {run_id}: " + ("stopped on the SuperLink" if why is None else why),
                                          highlight=False)
                                if why is not None:
                                    left_running.append(f"run {run_id}: {why}")
                            queue.release(claimed)
                            break
                        failed += 1
                        record = queue.finish(claimed, False,
                                              {"federation": args.federation, "error": str(exc)[-4000:]})
                        err.print(Text(f"run failed; requests filed under {record.parent}", style="red"),
                                  f"\n{exc}", sep="", highlight=False)
                    else:
                        failed += not _file_run(queue, claimed, result, rounds, args.federation)
                    finally:
                        running.clear()
                        if grace is not None:
                            grace.cancel()
            except ClaimLostError as exc:  # someone moved a claim away meanwhile: said, the loop goes on
                failed += 1
                err.print(str(exc), style="red", highlight=False)
            if args.once:
                break
            stop.wait(args.poll_s)
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)
        stop.close()  # is_set() still answers
    if stop.is_set():
        # A stop asked for: its status says how the stop went (runs that failed before it are
        # filed under rounds/failed and were reported then); see the convention in iro_fed.cli.
        err.print("stopped; unfinished requests wait in the requests folder", style="yellow")
        if left_running:
            err.print(f"not stopped on the SuperLink, it may still run: {'; '.join(left_running)}", style="red",
                      highlight=False)
            return EXIT_FAILED
        return stop_status(asked[0])  # stop is set only by on_signal, after it noted the signal
    return 1 if failed else EXIT_OK


def format_grams(value: float | None) -> str:
    """Training emissions (gCO2eq) for a table: "-" when not measured (track-emissions off, a site
    without codecarbon). ``iro fed local``'s table and benchmarks/federated.py's report use it."""
    return "-" if value is None else f"{value:.3f}"


def _file_run(queue: RoundRequestQueue, claimed: list[RoundRequest], result: dict[str, Any], rounds: int,
              federation: str) -> bool:
    """File the requests of a finished ``flwr run`` under done/ (every round reported) or failed/
    with the run's record, print one line; returns whether every round was reported."""
    rows = [{k: row.get(k) for k in ("round", "version", "path", "nodes", "eval-reward", "eval-score")}
            for row in result["rounds"]]
    ok = len(rows) == rounds
    record = queue.finish(claimed, ok, {"federation": federation, "run_id": result["run_id"], "rounds": rows,
                                        "wall_s": round(result["wall_s"], 3),
                                        **({} if ok else {"error": f"expected {rounds} rounds, "
                                                                   f"the server reported {len(rows)}"})})
    versions = [f"v{r['version']:04d}" for r in rows if r.get("version") is not None]
    print(f"{'done' if ok else 'failed'}: {len(claimed)} request(s), {len(rows)} round(s), "
          f"versions {', '.join(versions) or '-'}, {result['wall_s']:.0f} s -> {record}", flush=True)
    return ok


def cmd_certs(args: argparse.Namespace) -> int:
    refuse_empty_paths(folders=[("--out", args.out)])
    from iro_fed.federated import certs

    check_int("--node-keys", args.node_keys, 0, MAX_NODE_KEYS)
    check_int("--days", args.days, certs.MIN_DAYS, certs.MAX_DAYS)
    # The SuperLink's own SuperExec dials 127.0.0.1 and verifies the certificate, so the loopback
    # names are always in it; the first --host stays the subject's common name.
    hosts = [*args.host, *(h for h in ("localhost", "127.0.0.1") if h not in args.host)]
    for host in hosts:
        try:
            certs.check_host(host)
        except ValueError as exc:
            raise UsageError(f"--host: {exc}") from None
    out = check_output_folder("--out", args.out)
    names = [*certs.TLS_FILES, *(f for i in range(args.node_keys) for f in certs.node_key_files(f"node{i}"))]
    folders = [name for name in names if (out / name).is_dir()]
    if folders:
        raise UsageError(f"--out: {', '.join(folders)} in {str(out)!r} is a folder, not a file")
    existing = [name for name in names if (out / name).exists()]
    if existing and not args.force:
        # A new CA silently invalidates the server certificate and every node's trust in it; new
        # node keys no longer match the public keys registered with `flwr supernode register`.
        raise UsageError(f"--out: {str(out)!r} already holds {', '.join(existing)}; a new CA invalidates every "
                         "certificate the old one signed (and new node keys must be registered again): keep "
                         "them, choose another --out, or pass --force to replace them")
    paths = certs.make_tls(out, hosts, days=args.days)
    for i in range(args.node_keys):
        paths.update({f"node{i}_{k}": v for k, v in certs.make_node_key(out, f"node{i}").items()})
    for name, path in paths.items():
        print(f"{name:>14}  {path}")
    print(f"server certificate valid for: {', '.join(hosts)}", file=sys.stderr)
    return EXIT_OK

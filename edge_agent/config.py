"""Agent settings: defaults, then the YAML file, then environment variables, then ``--port``.

Every error names the key (``listen.port``) and, for an environment variable, the variable
(``IRO_AGENT_PORT``); :class:`ConfigError` holds them all and the command exits with status 2.
Relative paths in the file are relative to the file's folder.
"""

from __future__ import annotations

import math
import os
import re
import socket
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from iro_fed.federated.emissions import NODE_CONFIG_KEY as EMISSIONS_KEY
from iro_fed.federated.emissions import check_country
from iro_fed.federated.procs import parse_host_port
from iro_fed.limits import MAX_TOP_K
from iro_fed.metrics.prometheus import PrometheusClient
from iro_fed.metrics.snapshot import SCORING_MODES, SnapshotQueries
from iro_fed.problem_io import DuplicateKeyError, load_yaml, utf8_error

LOG_LEVELS = ("debug", "info", "warning", "error")


class ConfigError(ValueError):
    """Invalid agent settings; ``errors`` holds (key, message) pairs."""

    def __init__(self, errors: list[tuple[str, str]], source: str = "") -> None:
        self.errors = errors
        head = f"{source}: " if source else ""
        lines = [f"{k}: {m}" if k else m for k, m in errors]
        super().__init__(head + f"{len(errors)} error(s) in agent settings\n  " + "\n  ".join(lines))


@dataclass
class ListenConfig:
    host: str = "127.0.0.1"
    port: int = 9464
    max_body_bytes: int = 1 << 20
    request_timeout_s: float = 10.0
    max_connections: int = 64


@dataclass
class RecommendConfig:
    k: int = 5
    solver: str = ""  # empty: only a registry policy (or the fallback) ranks
    solver_params: dict[str, Any] = field(default_factory=dict)
    fallback: str = "greedy-objective"
    record: bool = True  # write each decision to the experience store


@dataclass
class PolicyConfig:
    registry: Path | None = None
    poll_interval_s: float = 30.0


@dataclass
class PrometheusConfig:
    url: str = ""
    timeout_s: float = 2.0
    refresh_interval_s: float = 15.0
    scoring: str = "requests"
    discover_nodes: bool = False  # add nodes that Prometheus reports and the problem file lacks
    # A bearer token sent with every query, read from this file each time (a projected service
    # account token is rotated in place); a user:password in the url is sent as Basic auth instead.
    bearer_token_file: Path | None = None
    queries: SnapshotQueries = field(default_factory=SnapshotQueries)

    def client(self) -> PrometheusClient:
        """The agent's client of these settings; ValueError for what the client refuses."""
        token = self.bearer_token_file
        return PrometheusClient(self.url, self.timeout_s, bearer_token_file=None if token is None else str(token))


@dataclass
class CollectConfig:
    interval_s: float = 10.0
    # Interfaces summed in iro_node_network_bytes: a regular expression matched against whole names,
    # or a list of names / expressions (YAML list, or comma-separated as in IRO_AGENT_NETWORK_INTERFACES);
    # empty: the physical NICs (edge_agent.metrics.NetworkCounter).
    network_interfaces: str = ""


@dataclass
class StoreConfig:
    path: Path | None = None  # None: no experience store
    max_rows: int = 100_000
    max_pending: int = 10_000  # records held in memory while the file fails (locked, full, read-only)
    busy_timeout_s: float = 10.0  # how long a write waits for another process's lock


@dataclass
class BackoffConfig:
    initial_s: float = 1.0
    max_s: float = 60.0


FEDERATED_MODES = ("start", "connect")
#: ClientApp executors of a started SuperNode: ours (modules preloaded) or Flower's own.
FEDERATED_EXECUTORS = ("warm", "flower")


@dataclass
class FederatedConfig:
    """Federated participation: the site's Flower SuperNode (see docs/edge_agent.md, "Federated participation").

    ``mode`` ``start``: the agent runs ``flower-supernode`` as its child (restarted with backoff,
    stopped with the agent); ``connect``: a SuperNode run by someone else, the agent only checks
    that its ClientAppIo (runtime API) port answers and reports it.
    """

    enabled: bool = False
    mode: str = "start"
    superlink: str = ""  # HOST:PORT of the SuperLink's Fleet API
    site: int = 0  # the site index of the federation's scenario (node-config ``site``)
    # ISO 3166-1 alpha-3 code of the country whose grid mix codecarbon measures this site's training
    # with (node-config ``emissions-country``); empty: not passed, the ClientApp's default (DEU).
    emissions_country: str = ""
    root_certificates: Path | None = None  # CA that signed the SuperLink's certificate (TLS)
    auth_key: Path | None = None  # this node's private key for SuperNode authentication
    insecure: bool = False  # plain HTTP to the SuperLink: only when set explicitly
    clientappio_port: int = 9094  # the SuperNode's ClientAppIo / runtime API port (0: a free one per start)
    executor: str = "warm"  # mode start: warm (ours, heavy modules imported once) or flower (a process per message)
    node_config: dict[str, Any] = field(default_factory=dict)  # extra node-config entries
    experience: bool = True  # pass the experience store to the ClientApp (node-config experience-db)
    flwr_home: Path | None = None  # private FLWR_HOME (default: beside the store, else a temp folder)
    restart_initial_s: float = 1.0
    restart_max_s: float = 60.0
    restart_stable_s: float = 30.0  # a SuperNode up this long resets the restart backoff
    check_interval_s: float = 2.0
    stop_timeout_s: float = 10.0  # SIGTERM, this long, then SIGKILL
    observation_k: int = 8  # top-k of the policy observations recorded with each decision (the federation's top-k)


@dataclass
class AgentConfig:
    """Everything ``edge-agent run`` needs; see ``examples/agent.yaml`` for a commented file."""

    problem: Path | None = None
    site: str = ""  # the domain whose nodes the agent ranks; empty: every node of the problem
    node_name: str = ""
    listen: ListenConfig = field(default_factory=ListenConfig)
    recommend: RecommendConfig = field(default_factory=RecommendConfig)
    policy: PolicyConfig = field(default_factory=PolicyConfig)
    prometheus: PrometheusConfig = field(default_factory=PrometheusConfig)
    collect: CollectConfig = field(default_factory=CollectConfig)
    store: StoreConfig = field(default_factory=StoreConfig)
    backoff: BackoffConfig = field(default_factory=BackoffConfig)
    federated: FederatedConfig = field(default_factory=FederatedConfig)
    log_level: str = "info"
    shutdown_timeout_s: float = 10.0
    #: The keys set outside the file, as errors name them: ``listen.host (from IRO_AGENT_HOST)``.
    origins: dict[str, str] = field(default_factory=dict)

    def label(self, key: str) -> str:
        """``key`` as an error about it names it (with the variable or flag that set it)."""
        return self.origins.get(key, key)


#: Environment variables and the keys they set (they win over the file).
ENV_VARS: dict[str, str] = {
    "IRO_AGENT_PROBLEM": "problem",
    "IRO_AGENT_SITE": "site",
    "IRO_AGENT_NODE_NAME": "node_name",
    "IRO_AGENT_HOST": "listen.host",
    "IRO_AGENT_PORT": "listen.port",
    "IRO_AGENT_MAX_BODY_BYTES": "listen.max_body_bytes",
    "IRO_AGENT_K": "recommend.k",
    "IRO_AGENT_SOLVER": "recommend.solver",
    "IRO_AGENT_POLICY_REGISTRY": "policy.registry",
    "IRO_AGENT_PROMETHEUS_URL": "prometheus.url",
    "IRO_AGENT_PROMETHEUS_TIMEOUT_S": "prometheus.timeout_s",
    "IRO_AGENT_SCORING": "prometheus.scoring",
    "IRO_AGENT_DISCOVER_NODES": "prometheus.discover_nodes",
    "IRO_AGENT_PROMETHEUS_BEARER_TOKEN_FILE": "prometheus.bearer_token_file",
    "IRO_AGENT_COLLECT_INTERVAL_S": "collect.interval_s",
    "IRO_AGENT_NETWORK_INTERFACES": "collect.network_interfaces",
    "IRO_AGENT_STORE_PATH": "store.path",
    "IRO_AGENT_STORE_MAX_ROWS": "store.max_rows",
    "IRO_AGENT_STORE_MAX_PENDING": "store.max_pending",
    "IRO_AGENT_STORE_BUSY_TIMEOUT_S": "store.busy_timeout_s",
    "IRO_AGENT_LOG_LEVEL": "log_level",
    "IRO_AGENT_FEDERATED_ENABLED": "federated.enabled",
    "IRO_AGENT_FEDERATED_MODE": "federated.mode",
    "IRO_AGENT_FEDERATED_EXECUTOR": "federated.executor",
    "IRO_AGENT_SUPERLINK": "federated.superlink",
    "IRO_AGENT_FEDERATED_SITE": "federated.site",
    "IRO_AGENT_FEDERATED_EMISSIONS_COUNTRY": "federated.emissions_country",
    "IRO_AGENT_FEDERATED_ROOT_CERTIFICATES": "federated.root_certificates",
    "IRO_AGENT_FEDERATED_AUTH_KEY": "federated.auth_key",
    "IRO_AGENT_FEDERATED_INSECURE": "federated.insecure",
    "IRO_AGENT_FEDERATED_CLIENTAPPIO_PORT": "federated.clientappio_port",
    "IRO_AGENT_FEDERATED_NODE_CONFIG": "federated.node_config",
    "IRO_AGENT_FEDERATED_FLWR_HOME": "federated.flwr_home",
}

# key -> (kind, check); kinds: str, int, float, bool, path, dict, queries, interfaces
_SCHEMA: dict[str, tuple[str, Any]] = {
    "problem": ("path", None),
    "site": ("str", None),
    "node_name": ("str", None),
    "listen.host": ("str", "nonempty"),
    "listen.port": ("int", (0, 65535)),
    "listen.max_body_bytes": ("int", (1, 1 << 30)),
    "listen.request_timeout_s": ("float", (0.001, None)),
    "listen.max_connections": ("int", (1, 10_000)),
    "recommend.k": ("int", (1, MAX_TOP_K)),  # what a request may ask: a larger default made every request a 400
    "recommend.solver": ("str", None),
    "recommend.solver_params": ("dict", None),
    "recommend.fallback": ("str", "nonempty"),
    "recommend.record": ("bool", None),
    "policy.registry": ("path", None),
    "policy.poll_interval_s": ("float", (0.01, None)),
    "prometheus.url": ("str", None),
    "prometheus.timeout_s": ("float", (0.001, 300)),
    "prometheus.refresh_interval_s": ("float", (0.01, None)),
    "prometheus.scoring": ("str", SCORING_MODES),
    "prometheus.discover_nodes": ("bool", None),
    "prometheus.bearer_token_file": ("path", None),
    "prometheus.queries": ("queries", None),
    "collect.interval_s": ("float", (0.01, None)),
    "collect.network_interfaces": ("interfaces", None),
    "store.path": ("path", None),
    "store.max_rows": ("int", (1, None)),
    "store.max_pending": ("int", (1, 10_000_000)),
    "store.busy_timeout_s": ("float", (0.0, 600)),
    "backoff.initial_s": ("float", (0.001, None)),
    "backoff.max_s": ("float", (0.001, None)),
    "federated.enabled": ("bool", None),
    "federated.mode": ("str", FEDERATED_MODES),
    "federated.executor": ("str", FEDERATED_EXECUTORS),
    "federated.superlink": ("str", None),
    "federated.site": ("int", (0, 999)),  # as `iro fed node --site` (iro_fed.federated.cli.MAX_SITE)
    "federated.emissions_country": ("str", None),  # checked against codecarbon's table in _check_federated
    "federated.root_certificates": ("path", None),
    "federated.auth_key": ("path", None),
    "federated.insecure": ("bool", None),
    "federated.clientappio_port": ("int", (0, 65535)),
    "federated.node_config": ("dict", None),
    "federated.experience": ("bool", None),
    "federated.flwr_home": ("path", None),
    "federated.restart_initial_s": ("float", (0.001, None)),
    "federated.restart_max_s": ("float", (0.001, None)),
    "federated.restart_stable_s": ("float", (0.0, None)),
    "federated.check_interval_s": ("float", (0.01, None)),
    "federated.stop_timeout_s": ("float", (0.0, 600)),
    "federated.observation_k": ("int", (1, MAX_TOP_K)),  # the federation's top-k bound
    "log_level": ("str", LOG_LEVELS),
    "shutdown_timeout_s": ("float", (0.0, None)),
}
_SECTIONS = {"listen", "recommend", "policy", "prometheus", "collect", "store", "backoff", "federated"}


def _convert(key: str, kind: str, check: Any, value: Any, base: Path, from_text: bool) -> Any:
    """The typed value, or raise ValueError with the message (the caller adds the key)."""
    if value is None:
        if kind in ("path",) or key in ("prometheus.url", "recommend.solver", "site", "node_name", "federated.superlink",
                                        "collect.network_interfaces", "federated.emissions_country"):
            return None if kind == "path" else ""
        raise ValueError("must not be null")
    if kind in ("int", "float"):
        if from_text:
            try:
                value = int(value) if kind == "int" else float(value)
            except ValueError:
                raise ValueError(f"expected {'an integer' if kind == 'int' else 'a number'}, got {value!r}") from None
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ValueError(f"expected {'an integer' if kind == 'int' else 'a number'}, got {type(value).__name__} {value!r}")
        if kind == "int":
            if isinstance(value, float):
                if not value.is_integer():
                    raise ValueError(f"expected an integer, got {value!r}")
                value = int(value)
        else:
            try:
                value = float(value)
            except OverflowError:  # an integer literal too large for a float
                raise ValueError(f"must be finite, got an integer of {len(str(value))} digits") from None
            if value != value or value in (float("inf"), float("-inf")):
                raise ValueError(f"must be finite, got {value!r}")
        lo, hi = check
        if lo is not None and value < lo:
            raise ValueError(f"must be >= {lo}, got {value!r}")
        if hi is not None and value > hi:
            raise ValueError(f"must be <= {hi}, got {value!r}")
        return value
    if kind == "bool":
        if from_text:
            low = str(value).strip().lower()
            if low in ("1", "true", "yes", "on"):
                return True
            if low in ("0", "false", "no", "off"):
                return False
            raise ValueError(f"expected true or false (also 1/0, yes/no, on/off), got {value!r}")
        if not isinstance(value, bool):
            raise ValueError(f"expected true or false, got {type(value).__name__} {value!r}")
        return value
    if kind in ("str", "path"):
        if not isinstance(value, str):
            raise ValueError(f"expected a string, got {type(value).__name__} {value!r}")
        if kind == "path":
            if not value:
                return None
            if "\x00" in value:  # the OS cannot name it; open() would raise ValueError later
                raise ValueError("must not contain a NUL character")
            try:
                p = Path(value).expanduser()
            except RuntimeError:  # ~user of an unknown user (or no home): a RuntimeError, not a ValueError
                raise ValueError(f"cannot expand the home folder of {value!r}") from None
            return p if p.is_absolute() else (base / p)
        if check == "nonempty" and not value:
            raise ValueError("must not be empty")
        if isinstance(check, tuple) and value not in check:
            raise ValueError(f"must be one of {', '.join(check)}, got {value!r}")
        return value
    if kind == "dict":
        if from_text:
            import json

            try:
                value = json.loads(value)
            except ValueError:
                raise ValueError(f"expected a JSON object, got {value!r}") from None
        if not isinstance(value, Mapping):
            raise ValueError(f"expected a mapping, got {type(value).__name__}")
        return dict(value)
    if kind == "interfaces":
        return _interfaces_pattern(value)
    if kind == "queries":
        if not isinstance(value, Mapping):
            raise ValueError(f"expected a mapping of query name -> PromQL, got {type(value).__name__}")
        try:
            return SnapshotQueries.from_dict(dict(value), path=key)
        except ValueError as exc:
            # from_dict names the sub-key itself; strip our key so it is not repeated.
            raise ValueError(str(exc).removeprefix(f"{key}.")) from None
    raise AssertionError(kind)


#: An item of an interface list made only of these is a name, matched exactly (``eth0.100`` is not
#: ``eth0x100``); any other item is a regular expression matched against whole names (``en.*``).
_INTERFACE_NAME = re.compile(r"[A-Za-z0-9_.@-]+")


def _split_interfaces(text: str) -> list[str]:
    """``text`` cut at its commas outside ``[...]``, ``{...}``, ``(...)`` and escapes, so that a
    regular expression such as ``eth{0,1}`` or ``en[,x]`` stays one item."""
    items: list[str] = []
    depth, start, i, in_class = 0, 0, 0, False
    while i < len(text):
        c = text[i]
        if c == "\\":
            i += 2
            continue
        if in_class:
            in_class = c != "]"
        elif c == "[":
            in_class = True
        elif c in "({":
            depth += 1
        elif c in ")}":
            depth = max(depth - 1, 0)
        elif c == "," and depth == 0:
            items.append(text[start:i])
            start = i + 1
        i += 1
    items.append(text[start:])
    return items


def _interfaces_pattern(value: Any) -> str:
    """``collect.network_interfaces``: one regular expression, or a list - a YAML list or a string
    with commas (``eth0,eth1``, what ``IRO_AGENT_NETWORK_INTERFACES`` can carry) - of interface
    names and regular expressions, which becomes one expression matching any of them. Checked
    here, not at the first reading."""
    if isinstance(value, str):
        items = [item.strip() for item in _split_interfaces(value)]
        if len(items) == 1:  # no comma outside a bracket: one regular expression, as always
            try:
                re.compile(value)
            except re.error as exc:
                raise ValueError(f"not a valid regular expression {value!r}: {exc}") from None
            return value
        for n, item in enumerate(items, 1):
            if not item:
                raise ValueError(f"item {n} of the comma-separated list {value!r} is empty")
        value = items
    elif not isinstance(value, list):
        raise ValueError(f"expected a regular expression or a list of interface names, got {type(value).__name__} {value!r}")
    if not value:
        raise ValueError('an empty list counts no interface; leave it empty ("") for the physical NICs')
    parts = []
    for n, item in enumerate(value, 1):
        # No interface name holds whitespace or '/': such an item is a mistake, not an expression.
        if not isinstance(item, str) or not item or any(c.isspace() or c == "/" for c in item):
            raise ValueError(f"expected interface names such as eth0, got {item!r}")
        if _INTERFACE_NAME.fullmatch(item):
            parts.append(re.escape(item))
            continue
        try:
            re.compile(item)
        except re.error as exc:
            raise ValueError(f"item {n} {item!r}: not a valid regular expression: {exc}") from None
        parts.append(f"(?:{item})")  # grouped: an item's own '|' stays inside it
    pattern = "|".join(parts)
    try:
        re.compile(pattern)
    except re.error as exc:  # e.g. an item's global flag (?i), allowed only at the very start
        raise ValueError(f"the items {value!r} do not combine into one regular expression: {exc}") from None
    return pattern


def _assign(cfg: AgentConfig, key: str, value: Any) -> None:
    if "." in key:
        section, name = key.split(".", 1)
        setattr(getattr(cfg, section), name, value)
    else:
        setattr(cfg, key, value)


def load_config(
    path: str | os.PathLike | None,
    env: Mapping[str, str] | None = None,
    port: int | None = None,
) -> AgentConfig:
    """Read, merge and validate the settings; raises :class:`ConfigError` listing every error."""
    env = os.environ if env is None else env
    errors: list[tuple[str, str]] = []
    cfg = AgentConfig()
    base = Path.cwd()
    source = ""
    if path is not None:
        source = str(path)
        p = Path(path)
        base = p.resolve().parent
        try:
            data = p.read_bytes()
        except OSError as exc:
            raise ConfigError([("", f"cannot read the config file: {exc.strerror or exc}")], source) from exc
        try:
            text = data.decode("utf-8-sig")  # a leading byte-order mark is fine, as in problem files
        except UnicodeDecodeError as exc:  # a ValueError, not an OSError: would escape as a traceback
            raise ConfigError([("", utf8_error(data, exc))], source) from None
        import yaml

        try:  # the problem files' loader: a repeated key is an error, numbers as in YAML 1.2
            doc = load_yaml(text)
        except DuplicateKeyError as exc:
            raise ConfigError(exc.errors, source) from None
        except yaml.YAMLError as exc:
            raise ConfigError([("", f"not valid YAML: {exc}")], source) from exc
        if doc is None:
            doc = {}
        if not isinstance(doc, Mapping):
            raise ConfigError([("", f"the config must be a mapping, got {type(doc).__name__}")], source)
        for top, value in doc.items():
            top = str(top)
            if top in _SECTIONS:
                if value is None:
                    continue
                if not isinstance(value, Mapping):
                    errors.append((top, f"expected a mapping, got {type(value).__name__}"))
                    continue
                for sub, v in value.items():
                    key = f"{top}.{sub}"
                    _set(cfg, key, v, base, False, errors, key)
            else:
                _set(cfg, top, value, base, False, errors, top)
    # Where each key set outside the file came from: the checks below name it too ("key (from VAR)").
    origin: dict[str, str] = {}
    links = service_link_vars(env)
    for var, key in ENV_VARS.items():
        if var in env and var not in links:
            origin[key] = f"{key} (from {var})"
            _set(cfg, key, env[var], Path.cwd(), True, errors, origin[key])
    _unknown_env(env, errors, links)
    if port is not None:
        origin["listen.port"] = "listen.port (from --port)"
        _set(cfg, "listen.port", port, base, False, errors, origin["listen.port"])

    checked = len(errors)
    _check_settings(cfg, errors)
    errors[checked:] = [(origin.get(key, key), message) for key, message in errors[checked:]]
    if errors:
        raise ConfigError(errors, source)
    cfg.origins = origin
    if not cfg.node_name:
        cfg.node_name = env.get("NODE_NAME") or socket.gethostname()
    return cfg


#: IRO_AGENT_* variables that are not settings: the SuperNode marker (edge_agent.federation.MARKER)
#: that the agent's children inherit.
_OTHER_ENV_VARS = frozenset({"IRO_AGENT_SUPERNODE_OF"})


#: What follows <NAME>_ in the kubelet's service links (pkg/kubelet/envvars FromServices, on while the
#: pod's enableServiceLinks is, the default): for every Service of the namespace, NAME its name
#: upper-cased with '-' as '_' (a Service iro-agent gives IRO_AGENT_SERVICE_HOST), the variables
#: <NAME>_SERVICE_HOST, <NAME>_SERVICE_PORT, <NAME>_SERVICE_PORT_<PORT NAME> (a named port), <NAME>_PORT
#: (the first port) and <NAME>_PORT_<port>_<PROTOCOL>[_PROTO|_PORT|_ADDR] (every port).
_LINK_SUFFIX = re.compile(
    r"_(?:SERVICE_HOST|SERVICE_PORT(?:_[A-Z0-9_]+)?|PORT(?:_[1-9][0-9]{0,4}_(?:TCP|UDP|SCTP)(?:_(?:PROTO|PORT|ADDR))?)?)"
)


def service_link_vars(env: Mapping[str, str]) -> frozenset[str]:
    """The IRO_AGENT_* variables of ``env`` that the kubelet set for a Service named iro-agent or
    iro-agent-*, not settings: a variable counts only with the <NAME>_SERVICE_HOST of its Service,
    which the kubelet always sets (a typo stays an error). IRO_AGENT_PORT is both a setting and the
    link of a Service iro-agent: it counts only with the value the kubelet writes, a URL
    (tcp://10.96.0.12:9464), which no port setting is; a value set in the pod's env wins over the link."""
    names = {v.removesuffix("_SERVICE_HOST") for v in env if v.endswith("_SERVICE_HOST")}
    names = {n for n in names if n == "IRO_AGENT" or n.startswith("IRO_AGENT_")}
    links: set[str] = set()
    for var in env:
        if not var.startswith("IRO_AGENT_"):
            continue
        for name in names:
            if var.startswith(name) and _LINK_SUFFIX.fullmatch(var, len(name)):
                if var not in ENV_VARS or _is_link_url(env[var], env[f"{name}_SERVICE_HOST"]):
                    links.add(var)
                    break
    return frozenset(links)


def _is_link_url(value: str, host: str) -> bool:
    """Whether ``value`` is a link's <proto>://<cluster IP>:<port>: the host bracketed when IPv6
    (net.JoinHostPort), or not (kubelets before JoinHostPort)."""
    proto, sep, rest = value.partition("://")
    if not sep or proto not in ("tcp", "udp", "sctp"):
        return False
    addr, sep, port = rest.rpartition(":")
    return bool(sep) and port.isascii() and port.isdigit() and addr in (host, f"[{host}]")


def _unknown_env(env: Mapping[str, str], errors: list[tuple[str, str]], links: frozenset[str] = frozenset()) -> None:
    """An IRO_AGENT_* variable that sets nothing is an error, as an unknown key of the file is: a
    misspelt one (IRO_AGENT_PROMETHEUS for IRO_AGENT_PROMETHEUS_URL) was ignored without a word.
    ``links`` (:func:`service_link_vars`) are skipped: the kubelet sets them in every pod of the
    namespace of a Service iro-agent, and refusing them made the DaemonSet crash-loop."""
    import difflib

    for var in sorted(v for v in env if v.startswith("IRO_AGENT_")):
        if var in ENV_VARS or var in _OTHER_ENV_VARS or var in links:
            continue
        near = difflib.get_close_matches(var, list(ENV_VARS), n=1)
        hint = f"; did you mean {near[0]}?" if near else " (see the settings table of docs/edge_agent.md)"
        errors.append((var, f"unknown environment variable: no agent setting has this name{hint}"))


def _check_settings(cfg: AgentConfig, errors: list[tuple[str, str]]) -> None:
    """Cross-field checks, once every setting is read; each error names the key it is about."""
    if cfg.backoff.max_s < cfg.backoff.initial_s:
        errors.append(("backoff.max_s", f"must be >= backoff.initial_s ({cfg.backoff.initial_s}), got {cfg.backoff.max_s}"))
    if cfg.prometheus.url:
        try:  # the client's own checks (http(s), a host, a port in range, not a password and a token)
            cfg.prometheus.client()
        except ValueError as exc:
            field = "prometheus.bearer_token_file" if "bearer_token_file" in str(exc) else "prometheus.url"
            errors.append((field, str(exc).removeprefix("prometheus url: ")))
    if cfg.prometheus.bearer_token_file is not None:
        if not cfg.prometheus.url:
            errors.append(("prometheus.bearer_token_file", "needs prometheus.url (the token is sent to Prometheus)"))
        elif not cfg.prometheus.bearer_token_file.is_file():
            errors.append(("prometheus.bearer_token_file", f"no such file: {cfg.prometheus.bearer_token_file}"))
    if cfg.prometheus.scoring != "requests" and not cfg.prometheus.url:
        errors.append(("prometheus.scoring", f"{cfg.prometheus.scoring!r} needs prometheus.url (observed usage comes from Prometheus)"))
    if cfg.prometheus.discover_nodes and not cfg.prometheus.url:
        errors.append(("prometheus.discover_nodes", "needs prometheus.url (the nodes come from Prometheus)"))
    if cfg.problem is None:
        if not cfg.prometheus.discover_nodes:
            errors.append(("problem", "required: the problem file that lists the site's nodes "
                                      "(or prometheus.discover_nodes with prometheus.url)"))
        elif not cfg.site:
            errors.append(("site", "required without a problem file: the domain name of the discovered nodes"))
    elif not cfg.problem.is_file():
        errors.append(("problem", f"no such file: {cfg.problem}"))
    _check_paths(cfg, errors)
    _check_solvers(cfg, errors)
    _check_federated(cfg.federated, errors)


def _set(cfg: AgentConfig, key: str, value: Any, base: Path, from_text: bool, errors: list, label: str) -> None:
    spec = _SCHEMA.get(key)
    if spec is None:
        section = key.split(".", 1)[0]
        known = sorted(k for k in _SCHEMA if k.startswith(section + ".")) if "." in key else sorted(
            {k.split(".", 1)[0] for k in _SCHEMA}
        )
        errors.append((label, f"unknown setting (known: {', '.join(known)})"))
        return
    kind, check = spec
    try:
        _assign(cfg, key, _convert(key, kind, check, value, base, from_text))
    except ValueError as exc:
        errors.append((label, str(exc)))


#: The first bytes of an SQLite 3 database file.
_SQLITE_MAGIC = b"SQLite format 3\x00"


def _check_paths(cfg: AgentConfig, errors: list[tuple[str, str]]) -> None:
    """Paths the agent writes or follows: caught here, with the key, rather than as a traceback
    when the store opens (``check`` does not open it) or never (a registry path that is a file)."""
    store = cfg.store.path
    if store is not None:
        folder = store.parent
        if store.is_dir():
            errors.append(("store.path", f"{str(store)!r} is a folder; give the database file's name"))
        elif store.exists() and not store.is_file():  # /dev/null: sqlite failed on it with "disk I/O error"
            errors.append(("store.path", f"{str(store)!r} is not a regular file (a device, pipe or socket); "
                                         "give the database file's name"))
        elif store.exists():
            try:
                with open(store, "rb") as fh:
                    head = fh.read(len(_SQLITE_MAGIC))
            except OSError as exc:
                errors.append(("store.path", f"cannot read {str(store)!r}: {exc.strerror or exc}"))
            else:
                if head and head != _SQLITE_MAGIC:  # an empty file is fine: sqlite makes it a database
                    errors.append(("store.path", f"{str(store)!r} exists and is not an SQLite database"))
        else:
            # The store makes its missing folders (like mkdir -p); only a file in the way stops it.
            blocker = next((p for p in (folder, *folder.parents) if p.exists() and not p.is_dir()), None)
            if blocker is not None:
                errors.append(("store.path", f"{str(blocker)!r} is not a folder"))
    for key, path in (("policy.registry", cfg.policy.registry), ("federated.flwr_home", cfg.federated.flwr_home)):
        if path is not None and path.exists() and not path.is_dir():
            errors.append((key, f"{str(path)!r} exists and is not a folder"))


def _check_solvers(cfg: AgentConfig, errors: list[tuple[str, str]]) -> None:
    """The configured solver and the fallback must exist, be installed and rank (online)."""
    import solvers
    from solvers.base import OnlineSolver, SolverError

    for key, name, params in (
        ("recommend.solver", cfg.recommend.solver, cfg.recommend.solver_params),
        ("recommend.fallback", cfg.recommend.fallback, {}),
    ):
        if not name:
            continue
        bad_keys = [k for k in params if not isinstance(k, str)]
        if bad_keys:  # solvers.make(**params) would raise TypeError
            errors.append(("recommend.solver_params", f"setting names must be strings, got {bad_keys[0]!r}"))
            continue
        try:
            solver = solvers.make(name, **params)
        except SolverError as exc:  # InvalidSettingError is a SolverError
            errors.append((key if "setting" not in str(exc) else "recommend.solver_params", str(exc)))
            continue
        if not isinstance(solver, OnlineSolver):
            errors.append((key, f"solver {name!r} is a batch solver; /recommend needs an online solver (one with rank)"))


#: node-config keys the agent sets itself (from ``federated.site``, the experience store and
#: ``federated.emissions_country``).
RESERVED_NODE_CONFIG = ("site", "partition-id", "experience-db", EMISSIONS_KEY)
_NODE_CONFIG_KEY = re.compile(r"^[A-Za-z0-9_-]+$")


def _check_federated(fed: FederatedConfig, errors: list[tuple[str, str]]) -> None:
    """Cross-field checks of the ``federated`` block; only an enabled block must be complete."""
    if fed.restart_max_s < fed.restart_initial_s:
        errors.append(("federated.restart_max_s",
                       f"must be >= federated.restart_initial_s ({fed.restart_initial_s}), got {fed.restart_max_s}"))
    for key, value in fed.node_config.items():
        label = f"federated.node_config.{key}"
        if not isinstance(key, str) or not _NODE_CONFIG_KEY.match(key):
            errors.append((label, "a node-config key is letters, digits, '-' and '_'"))
        elif key == EMISSIONS_KEY:
            errors.append((label, "set it with federated.emissions_country (checked against codecarbon's countries)"))
        elif key in RESERVED_NODE_CONFIG:
            errors.append((label, "set by the agent (federated.site, the experience store): remove it here"))
        elif isinstance(value, bool) or not isinstance(value, (str, int, float)):
            errors.append((label, f"expected a string, number or true/false, got {type(value).__name__}"))
        elif isinstance(value, float) and not math.isfinite(value):
            errors.append((label, f"must be finite, got {value!r}"))
    if fed.emissions_country:
        try:  # codecarbon's tracker only logs an unknown code and measures with no country's mix
            fed.emissions_country = check_country(fed.emissions_country)
        except ValueError as exc:
            errors.append(("federated.emissions_country", str(exc)))
    if not fed.enabled:
        return
    if fed.superlink:
        try:
            parse_host_port(fed.superlink)
        except ValueError as exc:
            errors.append(("federated.superlink", str(exc)))
    if fed.mode == "connect":
        if fed.clientappio_port == 0:
            errors.append(("federated.clientappio_port", "mode connect: the port of the running SuperNode is needed"))
        return
    if not fed.superlink:
        errors.append(("federated.superlink", "required with federated.mode start: the SuperLink's HOST:PORT"))
    if fed.insecure and (fed.root_certificates or fed.auth_key):
        key = "federated.root_certificates" if fed.root_certificates else "federated.auth_key"
        errors.append((key, "contradicts federated.insecure: true (plain HTTP has no certificates or node keys)"))
    elif not fed.insecure and fed.root_certificates is None:
        errors.append(("federated.root_certificates",
                       "required for TLS to the SuperLink (the CA that signed its certificate); set "
                       "federated.insecure: true to connect without TLS on a lab network"))
    for key, path in (("federated.root_certificates", fed.root_certificates), ("federated.auth_key", fed.auth_key)):
        if path is not None and not path.is_file():
            errors.append((key, f"no such file: {path}"))
    if not fed.insecure and fed.root_certificates is not None and fed.root_certificates.is_file():
        from iro_fed.federated.cli import ca_file_problem

        # Loaded as flower-supernode loads it: one it cannot load leaves a SuperNode that never connects.
        problem = ca_file_problem(fed.root_certificates)
        if problem is not None:
            errors.append(("federated.root_certificates", problem))
    from edge_agent.federation import find_flower_bin

    if find_flower_bin("flower-supernode") is None:
        errors.append(("federated.mode", "start needs flower-supernode (install the 'fed' extra: pip install "
                                         "'iro-fed[fed]'), or use mode connect with a SuperNode run elsewhere"))

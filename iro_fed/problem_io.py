"""Reading and writing the problem file (JSON or YAML) and the placement file.

Formats: ``shared/spec/interfaces.md``. The loader checks the whole document and reports
every error with its field path (``nodes[3].capacity.cpu``) in one
:class:`ProblemValidationError`; nothing is built from a document with an error.

Bounds (so that no sum, product or ratio downstream overflows to inf or NaN, and every count
fits the int32 arrays of :class:`~iro_fed.model.Problem`): every number is finite and at most
:data:`MAX_NUMBER` (1e10) in absolute value; a capacity is at least :data:`MIN_CAPACITY`; GPU
counts are at most :data:`MAX_GPUS`; ``priority`` is a signed 32-bit integer (as in Kubernetes).

Unknown fields: the format "may gain fields" (the spec), so a field this version does not know
is ignored, at the top level and in every object; :func:`unknown_fields` lists them (to warn
about typos). Unknown *names* (a resource, domain or user region that is not declared) are
errors, since they refer to data the document does not have.
"""

from __future__ import annotations

import errno
import json
import math
import os
import re
import reprlib
import stat
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from iro_fed.model import (
    DEFAULT_IDLE_SHARE,
    DEFAULT_LATENCY_REF_MS,
    DOMAIN_KINDS,
    GPU_MILLI,
    NONZERO_RESOURCES,
    SOFT_POD_TERM_KINDS,
    TAINT_EFFECTS,
    TOLERATION_OPERATORS,
    WORKLOAD_CLASSES,
    Domain,
    Node,
    PodScoring,
    PreferredTerm,
    Problem,
    SoftPodTerm,
    Taint,
    Toleration,
    Weights,
    Workload,
    default_power,
)

# TOLERATION_OPERATORS: Lt / Gt (Kubernetes 1.35 alpha TaintTolerationComparisonOperators) are read,
# so that one pod using them does not refuse the whole cluster, and tolerate nothing here
# (``Toleration.tolerates``, as upstream with the gate off): the pod may stay pending where a gated
# cluster would place it.
#: The value of an Lt / Gt toleration, as the API server validates it: a decimal int64, no leading zero.
_TOLERATION_INT = re.compile(r"0|-?[1-9][0-9]*")
#: Largest absolute value of any number in a problem file (amounts, prices, latencies, power,
#: weights, ...): 1e10 millicores or MiB is far beyond any real node, and products of a few such
#: numbers (cost = capacity x price, carbon = power x PUE x intensity) stay far from overflow.
MAX_NUMBER = 1e10
#: Smallest positive capacity: shares are demand / capacity, which must stay finite.
MIN_CAPACITY = 1e-6
#: Most GPU cards on one node or in one request (the card matrix is nodes x max cards).
MAX_GPUS = 1024
#: Kubernetes' int32 bounds: a priority, and a ``pod_scoring`` count or maxSkew.
INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
#: Kubernetes names (DNS-1123; the k8s commands and servers check them, the lengths are theirs):
#: a label is lowercase letters, digits and '-', starting and ending with a letter or digit; a
#: subdomain is labels joined by dots. Anchored with \A and \Z, not ^ and $: ``$`` also matches
#: before a trailing newline, which let "name\n" through; so .match and .fullmatch agree.
DNS_LABEL = re.compile(r"\A[a-z0-9]([-a-z0-9]*[a-z0-9])?\Z")
DNS_SUBDOMAIN = re.compile(r"\A[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*\Z")
#: Fields the loader reads, per object (for :func:`unknown_fields`).
KNOWN_FIELDS: dict[str, frozenset[str]] = {
    "": frozenset(
        {"resources", "feasibility_only", "domains", "latency_ms", "nodes", "workloads", "weights", "latency_ref_ms",
         "name", "description", "pod_scoring"}
    ),
    "pod_scoring": frozenset({"topologies", "groups"}),
    "pod_scoring.topologies[]": frozenset({"name", "key", "domains"}),
    "pod_scoring.groups[]": frozenset({"name", "counts"}),
    "domains[]": frozenset({"name", "kind", "carbon_zone", "carbon_intensity", "price_per_hour", "pue"}),
    "nodes[]": frozenset(
        {
            "name",
            "domain",
            "capacity",
            "allocated",
            "gpus",
            "gpu_model",
            "gpu_free_milli",
            "labels",
            "taints",
            "power_idle_w",
            "power_peak_w",
            "power_gpu_share",
            "nonzero_allocated",
        }
    ),
    "nodes[].taints[]": frozenset({"key", "value", "effect"}),
    "workloads[]": frozenset(
        {
            "name",
            "requests",
            "gpu",
            "class",
            "user_region",
            "max_latency_ms",
            "node_selector",
            "tolerations",
            "allowed_domains",
            "priority",
            "deadline_s",
            "preferred_node_affinity",
            "nonzero_requests",
            "pod_groups",
            "soft_pod_terms",
        }
    ),
    "workloads[].soft_pod_terms[]": frozenset({"kind", "group", "topology", "weight", "max_skew"}),
    "workloads[].gpu": frozenset({"count", "milli", "models"}),
    "workloads[].tolerations[]": frozenset({"key", "operator", "value", "effect"}),
    "workloads[].preferred_node_affinity[]": frozenset({"weight", "match_labels"}),
    "weights": frozenset(Weights.__dataclass_fields__),
}


class ProblemValidationError(ValueError):
    """A problem document is invalid; ``errors`` holds (field path, message) pairs."""

    def __init__(self, errors: list[tuple[str, str]], source: str = "") -> None:
        self.errors = errors
        self.source = source
        head = f"{source}: " if source else ""
        lines = [f"{path}: {msg}" if path else msg for path, msg in errors]
        super().__init__(head + f"{len(errors)} error(s) in problem\n  " + "\n  ".join(lines))


class _Checker:
    """Collects errors with field paths while reading a document."""

    def __init__(self) -> None:
        self.errors: list[tuple[str, str]] = []

    def fail(self, path: str, msg: str) -> None:
        self.errors.append((path, msg))

    def get(
        self, obj: Mapping, key: str, path: str, kind: type | tuple, default: Any = ..., required: bool = False
    ) -> Any:
        p = f"{path}.{key}" if path else key
        if key not in obj or obj[key] is None:
            if required or default is ...:
                self.fail(p, "required field is missing")
                return None
            return default
        value = _python_scalar(obj[key])
        if kind is float:
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                self.fail(p, f"expected a number, got {json_kind(value)} {_show(value)}")
                return None
            if not _finite(value):
                self.fail(p, f"must be finite, got {_show(value)}")
                return None
            if abs(value) > MAX_NUMBER:
                self.fail(p, f"must be at most {MAX_NUMBER:g} in absolute value, got {_show(value)}")
                return None
            return float(value)
        if kind is int:
            if isinstance(value, bool) or not isinstance(value, int):
                if isinstance(value, float) and value.is_integer():
                    return int(value)
                self.fail(p, f"expected an integer, got {json_kind(value)} {_show(value)}")
                return None
            return value
        if not isinstance(value, kind):
            want = kind.__name__ if isinstance(kind, type) else " or ".join(k.__name__ for k in kind)
            want = {"dict": "an object", "list": "a list", "str": "a string"}.get(want, want)
            self.fail(p, f"expected {want}, got {json_kind(value)} {_show(value)}")
            return None
        if isinstance(value, str) and not self.text(value, p):
            return None
        return value

    def text(self, value: str, path: str) -> bool:
        """Whether ``value`` is valid Unicode text, else an error at ``path``: JSON's "\\ud800"
        gives a lone surrogate, which passed here and broke the first write of the name (solve
        printed half its table, then failed with a UnicodeEncodeError)."""
        if value.isascii():
            return True
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as exc:
            self.fail(path, f"not valid Unicode text (a lone surrogate at character {exc.start}): {_show(value)}")
            return False
        return True

    def name(self, obj: Mapping, path: str) -> str | None:
        """The required, non-empty ``name`` of an object."""
        name = self.get(obj, "name", path, str, required=True)
        if name is not None and not name.strip():
            self.fail(f"{path}.name", "must not be empty")
            return None
        return name

    def int_in(self, value: int | None, path: str, low: int, high: int) -> int | None:
        """``value`` (an int from :meth:`get`) if low <= value <= high, else an error and None."""
        if value is not None and not low <= value <= high:
            self.fail(path, f"must be {low}..{high}, got {_show(value)}")
            return None
        return value

    def number(self, value: Any, path: str, minimum: float | None = None, positive: bool = False) -> float | None:
        value = _python_scalar(value)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not _finite(value):
            self.fail(path, f"expected a finite number, got {json_kind(value)} {_show(value)}")
            return None
        if abs(value) > MAX_NUMBER:
            self.fail(path, f"must be at most {MAX_NUMBER:g} in absolute value, got {_show(value)}")
            return None
        if positive and value < MIN_CAPACITY:
            self.fail(path, f"must be > 0 (at least {MIN_CAPACITY:g}), got {_show(value)}")
            return None
        if minimum is not None and value < minimum:
            self.fail(path, f"must be >= {minimum:g}, got {value!r}")
            return None
        return float(value)

    def string_map(self, obj: Any, path: str) -> dict[str, str]:
        if obj is None:
            return {}
        if not isinstance(obj, Mapping):
            self.fail(path, f"expected an object of strings, got {json_kind(obj)}")
            return {}
        out = {}
        for k, v in obj.items():
            if not str(k).strip():  # (YAML may give a number as a key: read as its text)
                self.fail(path, f"keys must not be empty, got {_show(k)}")
            elif not self.text(str(k), path):
                pass
            elif not isinstance(v, str):
                self.fail(f"{path}.{k}", f"expected a string, got {json_kind(v)} {_show(v)}")
            elif not self.text(v, f"{path}.{k}"):
                pass
            elif str(k) in out:  # YAML's 1 and "1": two keys, one label (the last would win silently)
                self.fail(f"{path}.{k}", f"duplicate key {str(k)!r} (keys are read as text)")
            else:
                out[str(k)] = v
        return out


def _python_scalar(value: Any) -> Any:
    """A numpy scalar as its Python value: a document built in code from numpy or pandas data held
    ``np.int64(4000)``, refused as "expected a finite number, got int64"."""
    return value.item() if isinstance(value, np.generic) else value


def _finite(value: int | float) -> bool:
    """math.isfinite that is False (not OverflowError) for ints beyond the float range."""
    try:
        return math.isfinite(value)
    except OverflowError:
        return False


def json_kind(value: Any) -> str:
    """The JSON name of a parsed value's type, for messages ("expected an object, got list")."""
    return {
        dict: "object",
        list: "list",
        str: "string",
        bool: "boolean",
        int: "integer",
        float: "number",
        type(None): "null",
    }.get(type(value), type(value).__name__)


class _ShortRepr(reprlib.Repr):
    """reprlib's bounded repr (a few levels, a few items each), huge ints as in :func:`show_value`."""

    def __init__(self) -> None:
        super().__init__()
        self.maxlevel, self.maxlist, self.maxdict, self.maxtuple = 3, 8, 8, 8
        self.maxstring = self.maxother = 80

    def repr_int(self, x: int, level: int) -> str:
        return _show(x)


_SHORT_REPR = _ShortRepr()


def show_value(value: Any, limit: int = 80, *, int_bits: bool = False) -> str:
    """repr(value), shortened: an error message must stay readable whatever the input holds.

    A huge int is described, not printed (its repr is useless, and fails beyond 4300 digits,
    sys.int_info): by its digits past 10**30, or with ``int_bits`` (solver settings' wording)
    by its bits past 128 bits."""
    if isinstance(value, int) and not isinstance(value, bool):
        if int_bits and value.bit_length() > 128:
            return f"an integer of {value.bit_length()} bits"
        if not int_bits and abs(value) > 10**30:
            return f"an integer of about {int(value.bit_length() * math.log10(2)) + 1} digits"
    # A container's full repr can be huge for a small file: YAML aliases nest one list many
    # times over (a 400-byte file whose repr is gigabytes), so only its first items are shown.
    try:
        text = _SHORT_REPR.repr(value) if isinstance(value, (list, dict, tuple)) else repr(value)
    except ValueError:  # another container (a set) holding an int too long to print
        return "(too large to print)"
    return text if len(text) <= limit else text[: limit - 3] + "..."


_show = show_value  # the short name this module's many messages use


def utf8_error(data: bytes, exc: UnicodeDecodeError, offset: int = 0, line: int = 1) -> str:
    """Where ``data`` stops being UTF-8, for a message: ``not UTF-8 text: byte 0xe9 at offset 40
    (line 2)``. ``exc`` is the error of decoding ``data`` or a suffix of it (``utf-8-sig`` drops a
    byte-order mark); ``offset`` and ``line`` say where ``data`` starts in its file, for a caller
    that decodes a part of it. Each caller puts its own prefix (file, flag or field) before it."""
    at = exc.start + len(data) - len(exc.object)
    line += data[:at].count(b"\n")
    return f"not UTF-8 text: byte 0x{data[at]:02x} at offset {offset + at} (line {line})"


#: Largest problem file read (bytes): a bigger one, or an endless stream, is refused before it
#: fills the memory (4 MB holds some 40k pods; 1 GiB is far beyond any real cluster).
MAX_DOCUMENT_BYTES = 1 << 30
_READ_CHUNK = 1 << 20


class DuplicateKeyError(ValueError):
    """A key repeated in one object of a JSON or YAML document (the parsers keep the last one
    silently); ``errors`` holds (field path, message) pairs, as :class:`ProblemValidationError`."""

    def __init__(self, errors: list[tuple[str, str]]) -> None:
        self.errors = errors
        super().__init__("; ".join(f"{p}: {m}" if p else m for p, m in errors))


def _key_path(path: str, key: Any) -> str:
    return f"{path}.{key}" if path else str(key)


def load_json(text: str) -> Any:
    """``json.loads`` that refuses a key repeated in one object (:class:`DuplicateKeyError`,
    naming each object by its path) instead of keeping the last value."""
    repeated: list[tuple[dict, list[str]]] = []

    def pairs_hook(pairs: list[tuple[str, Any]]) -> dict:
        obj = dict(pairs)
        if len(obj) != len(pairs):  # rare: only then are the repeated keys looked for
            seen: set[str] = set()
            keys = [k for k, _ in pairs if k in seen or seen.add(k)]
            repeated.append((obj, list(dict.fromkeys(keys))))
        return obj

    doc = json.loads(text, object_pairs_hook=pairs_hook)
    if repeated:
        # An object the document no longer holds was the value of a repeated key, reported above it.
        where = _paths_of(doc, {id(obj) for obj, _ in repeated})
        raise DuplicateKeyError(
            [(where[id(obj)], f"duplicate key {k!r}") for obj, keys in repeated if id(obj) in where for k in keys]
        )
    return doc


def _paths_of(doc: Any, wanted: set[int]) -> dict[int, str]:
    """The field path of each object of ``doc`` whose id is in ``wanted``."""
    found: dict[int, str] = {}
    stack: list[tuple[Any, str]] = [(doc, "")]
    while stack and len(found) < len(wanted):
        obj, path = stack.pop()
        if id(obj) in wanted:
            found.setdefault(id(obj), path)
        if isinstance(obj, dict):
            stack.extend((v, _key_path(path, k)) for k, v in obj.items())
        elif isinstance(obj, list):
            stack.extend((v, f"{path}[{i}]") for i, v in enumerate(obj))
    return found


# --- YAML ----------------------------------------------------------------------------------
# Problem files and the edge agent's config are read with one loader, built on first use (PyYAML
# is imported only then). It is PyYAML's safe loader with four changes:
# - libyaml's parser (CSafeLoader, some 3x faster) where PyYAML has it; the constructor and the
#   resolver stay Python, so the changes below hold for both parsers;
# - numbers as in YAML 1.2's core schema (JSON's numbers, plus 0o17 / 0x1f ints and .inf /
#   .nan): YAML 1.1 read `cpu: 0100` as octal 64 and `memory: 1:30` as base-60 90, silently;
#   such text is now a string (refused where a number is expected) and 0100 is 100;
# - the rest of the plain scalars as in YAML 1.2's core schema too: only true / false (True,
#   TRUE, False, FALSE) are booleans, and yes / no / on / off, a date (2026-12-03) or `=` are
#   strings. YAML 1.1 made a domain named `no` the boolean false, a label key `on` the text
#   "True" and `2026-12-03` a datetime.date, silently; a field that wants a boolean now refuses
#   `yes` as a string, naming the field;
# - a key repeated in one mapping is refused (:class:`DuplicateKeyError`); keys brought in by a
#   merge (`<<: *base`) may still be overridden, as merges are meant to be.
#: A decimal integer and a finite decimal number as YAML 1.2 (and JSON, less its rules on leading
#: zeros) write them: ASCII digits, an optional sign, no `_` (Python's int() and float() take
#: 1_000, " 1", "١" and, for float(), "nan" and "infinity"). Solver settings given as text
#: (``--set seed=7``) are read by the same rules (solvers.base).
DECIMAL_INT = r"[-+]?[0-9]+"
DECIMAL_FLOAT = r"[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?"
_YAML_INT = rf"{DECIMAL_INT}|0o[0-7]+|0x[0-9a-fA-F]+"
_YAML_FLOAT = rf"{DECIMAL_FLOAT}|[-+]?\.(inf|Inf|INF)|\.(nan|NaN|NAN)"
_YAML_BOOL = r"true|True|TRUE|false|False|FALSE"
_yaml_loader: type | None = None


def yaml_loader() -> type:
    """The YAML loader class described above (a ``yaml.SafeLoader`` or ``yaml.CSafeLoader`` subclass)."""
    global _yaml_loader
    if _yaml_loader is None:
        _yaml_loader = _make_yaml_loader()
    return _yaml_loader


def _make_yaml_loader() -> type:
    import yaml
    from yaml.constructor import ConstructorError

    base = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    int_tag, float_tag, merge_tag = "tag:yaml.org,2002:int", "tag:yaml.org,2002:float", "tag:yaml.org,2002:merge"
    bool_tag = "tag:yaml.org,2002:bool"
    # YAML 1.1's implicit types that YAML 1.2's core schema lacks or reads otherwise: their text is a string
    # (or, for bool, int and float, resolved by this loader's own rules below).
    yaml_1_1_only = {bool_tag, int_tag, float_tag, "tag:yaml.org,2002:timestamp", "tag:yaml.org,2002:value"}

    class Loader(base):  # type: ignore[misc,valid-type]
        def __init__(self, stream: Any) -> None:
            super().__init__(stream)
            self.repeated: list[tuple[Any, Any, Any, Any]] = []  # (mapping node, key, first key node, repeat)

        def construct_mapping(self, node: Any, deep: bool = False) -> dict:
            if isinstance(node, yaml.MappingNode):
                seen: dict[Any, Any] = {}
                for key_node, _ in node.value:
                    if key_node.tag == merge_tag:
                        continue
                    key = self.construct_object(key_node, deep=True)
                    try:
                        first = seen.setdefault(key, key_node)
                    except TypeError:  # unhashable: the base constructor refuses it
                        continue
                    if first is not key_node:
                        self.repeated.append((node, key, first, key_node))
            return super().construct_mapping(node, deep=deep)

        def construct_yaml_int(self, node: Any) -> int:
            text = str(self.construct_scalar(node))
            if not re.fullmatch(_YAML_INT, text):  # an explicit !!int on other text (int() takes 1_0)
                raise ConstructorError(None, None, f"not a YAML 1.2 integer: {text!r}", node.start_mark)
            try:
                if text.startswith(("0o", "0x")):
                    return int(text[2:], 8 if text[1] == "o" else 16)
                return int(text, 10)
            except ValueError:  # over Python's limit on the digits int() reads (4300): not a YAMLError
                raise ConstructorError(None, None, f"an integer of {len(text)} digits is too long", node.start_mark) from None

        def construct_yaml_float(self, node: Any) -> float:
            text = str(self.construct_scalar(node))
            special = {".inf": math.inf, "+.inf": math.inf, "-.inf": -math.inf, ".nan": math.nan}
            if text.lower() in special:
                return special[text.lower()]
            if re.fullmatch(_YAML_INT, text):  # an explicit !!float 0x10
                return float(self.construct_yaml_int(node))
            if not re.fullmatch(_YAML_FLOAT, text):  # float() would also take 1_0 and "nan"
                raise ConstructorError(None, None, f"not a YAML 1.2 number: {text!r}", node.start_mark)
            return float(text)

        def construct_yaml_bool(self, node: Any) -> bool:
            text = str(self.construct_scalar(node))
            if not re.fullmatch(_YAML_BOOL, text):  # an explicit !!bool yes (YAML 1.1's table takes it)
                raise ConstructorError(None, None, f"not a YAML 1.2 boolean: {text!r}", node.start_mark)
            return text.lower() == "true"

    Loader.add_constructor(int_tag, Loader.construct_yaml_int)
    Loader.add_constructor(float_tag, Loader.construct_yaml_float)
    Loader.add_constructor(bool_tag, Loader.construct_yaml_bool)
    # The resolvers live on the class (a dict by first character, read by the resolver for each plain
    # scalar), so libyaml's speed stays: no second walk over the document in Python.
    Loader.yaml_implicit_resolvers = {
        first: [(tag, rx) for tag, rx in resolvers if tag not in yaml_1_1_only]
        for first, resolvers in base.yaml_implicit_resolvers.items()
    }
    Loader.add_implicit_resolver(bool_tag, re.compile(rf"\A(?:{_YAML_BOOL})\Z"), list("tTfF"))
    Loader.add_implicit_resolver(int_tag, re.compile(rf"\A(?:{_YAML_INT})\Z"), list("-+0123456789"))
    Loader.add_implicit_resolver(float_tag, re.compile(rf"\A(?:{_YAML_FLOAT})\Z"), list("-+.0123456789"))
    return Loader


def dump_yaml(doc: Any) -> str:
    """``doc`` as YAML that :func:`load_yaml` reads back equal. PyYAML's ``safe_dump`` quotes the
    strings its YAML 1.1 resolvers would read as other types, not those of the 1.2 core schema the
    loader uses: a label ``1e3``, ``-.5`` or ``0o17`` was written plain and read back as a number."""
    import yaml

    core = re.compile(rf"\A(?:{_YAML_BOOL}|{_YAML_INT}|{_YAML_FLOAT})\Z")

    class Dumper(yaml.SafeDumper):
        pass

    def represent_str(dumper: Any, data: str) -> Any:
        if core.match(data):
            return dumper.represent_scalar("tag:yaml.org,2002:str", data, style="'")
        return dumper.represent_str(data)

    Dumper.add_representer(str, represent_str)
    return yaml.dump(doc, Dumper=Dumper, sort_keys=False, allow_unicode=False)


def _lines(first: int, again: int) -> str:
    return f"line {first}" if first == again else f"lines {first} and {again}"


def load_yaml(text: str) -> Any:
    """One YAML document read with :func:`yaml_loader` (None for an empty one). Raises
    ``yaml.YAMLError`` for a syntax error, :class:`DuplicateKeyError` for a repeated key."""
    loader = yaml_loader()(text)
    try:
        root = loader.get_single_node()
        doc = loader.construct_document(root) if root is not None else None
        if loader.repeated:
            raise DuplicateKeyError(_yaml_repeats(root, loader.repeated))
        return doc
    finally:
        loader.dispose()


def _yaml_repeats(root: Any, repeated: list[tuple[Any, Any, Any, Any]]) -> list[tuple[str, str]]:
    """(path, message) of each repeated key; the path of a mapping node is found by walking the
    node graph once (each node once: aliases can make the tree exponentially larger)."""
    import yaml

    wanted = {id(node) for node, *_ in repeated}
    found: dict[int, str] = {}
    seen: set[int] = set()
    stack: list[tuple[Any, str]] = [(root, "")]
    while stack and len(found) < len(wanted):
        node, path = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if id(node) in wanted:
            found[id(node)] = path
        if isinstance(node, yaml.MappingNode):
            for key_node, value in reversed(node.value):  # reversed: the stack pops them in order
                key = key_node.value if isinstance(key_node, yaml.ScalarNode) else "?"
                stack.append((value, _key_path(path, key)))
        elif isinstance(node, yaml.SequenceNode):
            stack.extend((v, f"{path}[{i}]") for i, v in reversed(list(enumerate(node.value))))
    return [
        (
            found.get(id(node), "?"),
            f"duplicate key {show_value(key)} ({_lines(first.start_mark.line + 1, again.start_mark.line + 1)})",
        )
        for node, key, first, again in repeated
    ]


def _read_document_bytes(p: Path) -> bytes:
    """The bytes of the file at ``p``: a regular file, or a pipe or fifo (``<(cat p.json)``
    passes /dev/fd/63), at most :data:`MAX_DOCUMENT_BYTES`. A device or socket is refused before
    it is opened: /dev/zero never ends, and opening some devices has effects of its own.

    A fifo is read as ``cat`` reads it: the open waits for a writer. Finding "no writer" would
    need a non-blocking open, which cannot tell "none yet" from "none at all", so a reader started
    before its writer (``iro validate f & make-problem > f``) would see an empty file; Ctrl-C ends
    the wait."""
    limit = MAX_DOCUMENT_BYTES
    try:
        st = os.stat(p)
        _check_readable_kind(st.st_mode, p)
        with open(p, "rb") as f:
            st = os.fstat(f.fileno())  # what was opened (the path may have changed since)
            _check_readable_kind(st.st_mode, p)
            if stat.S_ISREG(st.st_mode) and st.st_size > limit:
                raise ProblemValidationError([("", _too_large(st.st_size))], str(p))
            if stat.S_ISREG(st.st_mode):
                return f.read()
            chunks, size = [], 0
            while chunk := f.read1(_READ_CHUNK):  # a pipe: in chunks, so that an endless one stops at the cap
                size += len(chunk)
                if size > limit:
                    raise ProblemValidationError([("", _too_large(None))], str(p))
                chunks.append(chunk)
            return b"".join(chunks)
    except OSError as exc:
        raise ProblemValidationError([("", f"cannot read file: {exc.strerror or exc}")], str(p)) from exc


def _check_readable_kind(mode: int, p: Path) -> None:
    for is_kind, kind in (
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
    ):
        if is_kind(mode):
            raise ProblemValidationError([("", f"is {kind}, not a file (give a problem file, or a pipe)")], str(p))


def _too_large(size: int | None) -> str:
    got = f" ({size} bytes)" if size is not None else ""
    return f"the file is larger than {MAX_DOCUMENT_BYTES} bytes{got}, the most a problem file may hold"


def load_document(path: str | os.PathLike) -> dict:
    """Read a JSON or YAML file into a dict (YAML by extension .yaml/.yml; :func:`load_yaml`).

    A key repeated in one object is an error naming the object's path, as is a device or socket
    for ``path`` or a file over :data:`MAX_DOCUMENT_BYTES` (:func:`_read_document_bytes`)."""
    p = Path(path)
    data = _read_document_bytes(p)
    try:
        text = data.decode("utf-8-sig")  # a leading byte-order mark (some editors write one) is fine
    except UnicodeDecodeError as exc:
        raise ProblemValidationError([("", utf8_error(data, exc))], str(p)) from None
    if not text.strip():
        raise ProblemValidationError([("", "the file is empty (the document must be an object)")], str(p))
    is_yaml = p.suffix.lower() in (".yaml", ".yml")
    try:
        doc = load_yaml(text) if is_yaml else load_json(text)
    except DuplicateKeyError as exc:
        raise ProblemValidationError(exc.errors, str(p)) from None
    except Exception as exc:  # json.JSONDecodeError, yaml.YAMLError
        raise ProblemValidationError([("", f"not valid {'YAML' if is_yaml else 'JSON'}: {exc}")], str(p)) from exc
    if not isinstance(doc, dict):
        raise ProblemValidationError([("", f"the document must be an object, got {json_kind(doc)}")], str(p))
    return doc


def load_problem(path: str | os.PathLike) -> Problem:
    """Load and validate a problem file."""
    doc = load_document(path)
    return problem_from_dict(doc, source=str(path))


def problem_from_dict(doc: Mapping[str, Any], source: str = "") -> Problem:
    """Validate a problem document and build the :class:`Problem`."""
    c = _Checker()
    if not isinstance(doc, Mapping):
        raise ProblemValidationError([("", f"the document must be an object, got {json_kind(doc)}")], source)

    for key in ("name", "description"):  # read by no one, but a number there is a mistake like any other
        text = c.get(doc, key, "", str, default=None)
        if text is not None:
            c.text(text, key)
    resources = c.get(doc, "resources", "", list, default=["cpu", "memory"])
    res_names: list[str] = []
    if resources is None:  # mistyped (already reported): check the rest against the default
        res_names = ["cpu", "memory"]
    else:
        for i, r in enumerate(resources):
            if not isinstance(r, str) or not r:
                c.fail(f"resources[{i}]", f"expected a resource name, got {_show(r)}")
            elif not c.text(r, f"resources[{i}]"):
                pass
            elif r in res_names:
                c.fail(f"resources[{i}]", f"duplicate resource {r!r}")
            elif r == "gpu":
                c.fail(f"resources[{i}]", "'gpu' is not an additive resource: use nodes[].gpus and workloads[].gpu")
            else:
                res_names.append(r)
        if "cpu" not in res_names:
            c.fail("resources", "must include 'cpu' (the power model uses CPU utilization)")
    feasibility_only = _feasibility_only(c, doc, res_names, resources is not None)

    # --- domains ---
    domains: list[Domain] = []
    seen: dict[str, int] = {}
    # Whether the domains are a list of objects: if not (reported), the names used elsewhere are not
    # checked, so that `domains: ["az-1"]` gives one error, not one more per node and latency entry.
    # (An object without its name still gives them: they say which nodes used the domain.)
    domains_ok = isinstance(doc.get("domains"), list)  # missing or mistyped: reported by _list
    for i, d in enumerate(_list(c, doc, "domains", required=True)):
        p = f"domains[{i}]"
        if not isinstance(d, Mapping):
            c.fail(p, f"expected an object, got {json_kind(d)}")
            domains_ok = False
            continue
        name = c.name(d, p)
        _unique_name(c, seen, name, "domains", i, "domain ")
        kind = c.get(d, "kind", p, str, default="zone")
        if kind is not None and kind not in DOMAIN_KINDS:
            c.fail(f"{p}.kind", f"must be one of {', '.join(DOMAIN_KINDS)}, got {kind!r}")
        ci = c.get(d, "carbon_intensity", p, float, default=0.0)
        if ci is not None and ci < 0:
            c.fail(f"{p}.carbon_intensity", f"must be >= 0, got {ci!r}")
        pue = c.get(d, "pue", p, float, default=1.0)
        if pue is not None and pue < 1.0:
            c.fail(f"{p}.pue", f"must be >= 1.0, got {pue!r}")
        prices = c.get(d, "price_per_hour", p, dict, default={}) or {}
        price: dict[str, float] = {}
        for k, v in prices.items():
            val = c.number(v, f"{p}.price_per_hour.{k}", minimum=0.0)
            if k != "gpu" and k not in res_names:
                c.fail(
                    f"{p}.price_per_hour.{k}", f"unknown resource {k!r} (resources: {', '.join(res_names + ['gpu'])})"
                )
            elif val is not None:
                price[k] = val
        carbon_zone = c.get(d, "carbon_zone", p, str, default="")
        if name is not None:
            domains.append(Domain(name, kind or "zone", carbon_zone or "", ci or 0.0, price, pue or 1.0))
    domain_names = [d.name for d in domains]

    # --- latency ---
    regions: list[str] = []
    lat_rows: list[list[float]] = []
    latency = c.get(doc, "latency_ms", "", dict, default={})
    latency_ok = latency is not None  # when mistyped (reported), user_region is not checked
    for region, row in (latency or {}).items():
        p = f"latency_ms.{region}"
        if not str(region).strip():
            c.fail("latency_ms", f"user region names must not be empty, got {_show(region)}")
        c.text(str(region), "latency_ms")
        if not isinstance(row, Mapping):
            c.fail(p, f"expected an object domain -> ms, got {json_kind(row)}")
            row = {}  # the region still exists: workloads naming it get no follow-up error
        values = [math.nan] * len(domain_names)
        for dom, ms in row.items():
            if dom not in seen:
                if domains_ok:
                    c.fail(f"{p}.{dom}", f"unknown domain {dom!r} (domains: {', '.join(domain_names)})")
                continue
            v = c.number(ms, f"{p}.{dom}", minimum=0.0)
            if v is not None and seen[dom] < len(values):
                values[domain_names.index(dom)] = v
        if str(region) in regions:  # YAML's 1 and "1": one name, two rows (the first was lost)
            c.fail(p, f"duplicate user region {str(region)!r} (names are read as text)")
            continue
        regions.append(str(region))
        lat_rows.append(values)

    # --- nodes ---
    nodes: list[Node] = []
    cap_rows, alloc_rows, gpu_counts, gpu_free_rows, idle, peak = [], [], [], [], [], []
    gpu_share: list[float] = []
    node_nonzero = _NonzeroColumn("nodes", "nonzero_allocated")
    node_seen: dict[str, int] = {}
    for i, n in enumerate(_list(c, doc, "nodes", required=True)):
        p = f"nodes[{i}]"
        if not isinstance(n, Mapping):
            c.fail(p, f"expected an object, got {json_kind(n)}")
            continue
        name = c.name(n, p)
        _unique_name(c, node_seen, name, "nodes", i, "node ")
        dom = c.get(n, "domain", p, str, required=True)
        if dom is not None and dom not in seen and domains_ok:
            c.fail(f"{p}.domain", f"unknown domain {dom!r} (domains: {', '.join(domain_names)})")
        cap_doc = c.get(n, "capacity", p, dict, required=True)
        cap = []
        for r in res_names:
            if cap_doc is None:  # missing or mistyped, already reported
                cap.append(0.0)
                continue
            if r not in cap_doc:
                c.fail(f"{p}.capacity.{r}", "required field is missing")
                cap.append(0.0)
                continue
            cap.append(c.number(cap_doc[r], f"{p}.capacity.{r}", positive=True) or 0.0)
        for k in cap_doc or {}:
            if k not in res_names:
                c.fail(
                    f"{p}.capacity.{k}",
                    f"unknown resource {k!r} (resources: {', '.join(res_names)}; GPUs go in 'gpus')",
                )
        alloc_doc = c.get(n, "allocated", p, dict, default={}) or {}
        alloc = []
        for j, r in enumerate(res_names):
            v = c.number(alloc_doc.get(r, 0), f"{p}.allocated.{r}", minimum=0.0) or 0.0
            if v > cap[j] > 0:
                c.fail(f"{p}.allocated.{r}", f"{v:g} exceeds capacity {cap[j]:g}")
            alloc.append(v)
        for k in alloc_doc:
            if k not in res_names:
                c.fail(f"{p}.allocated.{k}", f"unknown resource {k!r}")
        nz_alloc = node_nonzero.read(c, n, p, res_names, "allocated", alloc)
        gpus = c.get(n, "gpus", p, int, default=0)
        gpus_ok = gpus is not None
        if gpus is not None and gpus < 0:
            c.fail(f"{p}.gpus", f"must be >= 0, got {_show(gpus)}")
            gpus, gpus_ok = 0, False
        elif c.int_in(gpus, f"{p}.gpus", 0, MAX_GPUS) is None:  # before [1000] * gpus is built
            gpus, gpus_ok = 0, False
        gpus = gpus or 0
        model = c.get(n, "gpu_model", p, str, default="") or ""
        free = c.get(n, "gpu_free_milli", p, list, default=None)
        if free is None:
            free = [GPU_MILLI] * gpus
        elif not gpus_ok:  # mistyped gpus, already reported
            free = []
        elif len(free) != gpus:
            c.fail(f"{p}.gpu_free_milli", f"has {len(free)} entries, the node has gpus={gpus}")
            free = [GPU_MILLI] * gpus
        else:
            checked = []
            for j, v in enumerate(free):
                if isinstance(v, float) and v.is_integer():
                    v = int(v)
                if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= GPU_MILLI:
                    c.fail(f"{p}.gpu_free_milli[{j}]", f"must be an integer 0..{GPU_MILLI}, got {_show(v)}")
                    v = GPU_MILLI
                checked.append(int(v))
            free = checked
        labels = c.string_map(n.get("labels"), f"{p}.labels")
        taints = []
        for j, t in enumerate(c.get(n, "taints", p, list, default=[]) or []):
            tp = f"{p}.taints[{j}]"
            if not isinstance(t, Mapping):
                c.fail(tp, f"expected an object, got {json_kind(t)}")
                continue
            key = c.get(t, "key", tp, str, required=True)
            if key is not None and not key.strip():  # " " was taken: a taint no toleration could name
                c.fail(f"{tp}.key", "must not be empty")
                key = None
            value = c.get(t, "value", tp, str, default="")
            effect = c.get(t, "effect", tp, str, default="NoSchedule")
            if effect is not None and effect not in TAINT_EFFECTS:
                c.fail(f"{tp}.effect", f"must be one of {', '.join(TAINT_EFFECTS)}, got {effect!r}")
            if key:
                taints.append(Taint(key, value or "", effect or "NoSchedule"))
        d_idle, d_peak = default_power(cap[res_names.index("cpu")] if "cpu" in res_names else 0.0, gpus)
        ia = c.get(n, "power_idle_w", p, float, default=None)
        # With only idle given, peak follows from the default idle share (idle = 40 % of peak).
        default_peak = max(d_peak, ia / DEFAULT_IDLE_SHARE) if isinstance(ia, float) and ia > 0 else d_peak
        pk = c.get(n, "power_peak_w", p, float, default=default_peak)
        if pk is not None and pk < 0:
            c.fail(f"{p}.power_peak_w", f"must be >= 0, got {pk}")
        if ia is None:
            ia = (d_idle / d_peak * pk) if (pk and d_peak) else 0.0
        elif ia < 0 or (pk is not None and ia > pk):
            c.fail(f"{p}.power_idle_w", f"must be between 0 and power_peak_w ({pk}), got {ia}")
        # The GPUs' share of the dynamic power range (NaN: the default, from capacity and cards).
        share = c.get(n, "power_gpu_share", p, float, default=math.nan)
        if share is not None and not math.isnan(share):
            if not 0.0 <= share <= 1.0:
                c.fail(f"{p}.power_gpu_share", f"must be between 0 and 1, got {share}")
            elif share > 0 and gpus_ok and gpus == 0:
                c.fail(f"{p}.power_gpu_share", f"must be 0 on a node without GPUs (gpus=0), got {share}")
        if name is None or dom is None:
            continue
        nodes.append(Node(name, dom, labels, tuple(taints), model))
        node_nonzero.rows.append(nz_alloc)
        cap_rows.append(cap)
        alloc_rows.append(alloc)
        gpu_counts.append(gpus)
        gpu_free_rows.append(free)
        idle.append(ia or 0.0)
        peak.append(pk or 0.0)
        gpu_share.append(math.nan if share is None else share)

    # --- workloads ---
    workloads: list[Workload] = []
    dem_rows, wl_gc, wl_gm = [], [], []
    wl_nonzero = _NonzeroColumn("workloads", "nonzero_requests")
    wl_seen: dict[str, int] = {}
    for i, w in enumerate(_list(c, doc, "workloads", required=False)):
        p = f"workloads[{i}]"
        if not isinstance(w, Mapping):
            c.fail(p, f"expected an object, got {json_kind(w)}")
            continue
        name = c.name(w, p)
        _unique_name(c, wl_seen, name, "workloads", i, "workload ")
        req = c.get(w, "requests", p, dict, default={}) or {}
        dem = []
        for r in res_names:
            dem.append(c.number(req.get(r, 0), f"{p}.requests.{r}", minimum=0.0) or 0.0)
        for k in req:
            if k not in res_names:
                hint = "; GPUs go in 'gpu'" if k in ("gpu", "nvidia.com/gpu") else ""
                c.fail(f"{p}.requests.{k}", f"unknown resource {k!r} (resources: {', '.join(res_names)}{hint})")
        nz_req = wl_nonzero.read(c, w, p, res_names, "requests", dem)
        gpu = c.get(w, "gpu", p, dict, default=None)
        count, milli, models = 0, 0, ()
        if gpu is not None:
            count = c.get(gpu, "count", f"{p}.gpu", int, default=1)
            if count is not None and count < 1:
                c.fail(f"{p}.gpu.count", f"must be >= 1 (leave out 'gpu' for a pod without GPUs), got {_show(count)}")
            count = c.int_in(count, f"{p}.gpu.count", 1, MAX_GPUS) if count is not None and count >= 1 else count
            count = count or 0
            milli = c.get(gpu, "milli", f"{p}.gpu", int, default=GPU_MILLI)
            if milli is None:
                milli = GPU_MILLI
            elif count == 1 and not 0 < milli <= GPU_MILLI:
                c.fail(f"{p}.gpu.milli", f"a GPU share must be in 1..{GPU_MILLI} milli of one card, got {_show(milli)}")
            elif count > 1 and milli != GPU_MILLI:
                c.fail(
                    f"{p}.gpu.milli",
                    f"a pod asking for {count} GPUs takes whole cards: milli must be {GPU_MILLI}, got {_show(milli)}",
                )
            if count > 1:
                milli = GPU_MILLI
            if count == 0:
                milli = 0
            model_list = c.get(gpu, "models", f"{p}.gpu", list, default=[]) or []
            bad = [m for m in model_list if not isinstance(m, str)]
            if bad:
                c.fail(f"{p}.gpu.models", f"expected GPU model names, got {_show(bad)}")
            for j, m in enumerate(model_list):
                if isinstance(m, str):
                    c.text(m, f"{p}.gpu.models[{j}]")
            models = tuple(m for m in model_list if isinstance(m, str))
        klass = c.get(w, "class", p, str, default="online")
        if klass is not None and klass not in WORKLOAD_CLASSES:
            c.fail(f"{p}.class", f"must be one of {', '.join(WORKLOAD_CLASSES)}, got {klass!r}")
        region = c.get(w, "user_region", p, str, default="") or ""
        if region and latency_ok and region not in regions:
            c.fail(
                f"{p}.user_region", f"unknown user region {region!r} (latency_ms has: {', '.join(regions) or 'none'})"
            )
        max_lat = c.get(w, "max_latency_ms", p, float, default=None)
        if max_lat is not None and max_lat <= 0:
            c.fail(f"{p}.max_latency_ms", f"must be > 0, got {max_lat}")
        if max_lat is not None and not region:
            c.fail(f"{p}.max_latency_ms", "needs user_region to know where the latency is measured from")
        selector = c.string_map(w.get("node_selector"), f"{p}.node_selector")
        tols = []
        for j, t in enumerate(c.get(w, "tolerations", p, list, default=[]) or []):
            tp = f"{p}.tolerations[{j}]"
            if not isinstance(t, Mapping):
                c.fail(tp, f"expected an object, got {json_kind(t)}")
                continue
            key = c.get(t, "key", tp, str, default="")
            key_ok = key is not None  # mistyped (reported): no follow-up "required" error
            key = key or ""
            op = c.get(t, "operator", tp, str, default="Equal") or "Equal"
            if op not in TOLERATION_OPERATORS:
                c.fail(f"{tp}.operator", f"must be Equal or Exists (or the alpha Lt, Gt), got {op!r}")
            value = c.get(t, "value", tp, str, default="") or ""
            if op == "Exists" and value:
                c.fail(f"{tp}.value", "must be empty with operator Exists")
            if op in ("Equal", "Lt", "Gt") and not key and key_ok:
                c.fail(f"{tp}.key", f"required with operator {op} (only Exists may leave it empty)")
            if op in ("Lt", "Gt") and (not _TOLERATION_INT.fullmatch(value) or not -(2**63) <= int(value) < 2**63):
                c.fail(f"{tp}.value", f"must be an integer (int64, no leading zero) with operator {op}, got {value!r}")
            effect = c.get(t, "effect", tp, str, default="") or ""
            if effect and effect not in TAINT_EFFECTS:
                c.fail(f"{tp}.effect", f"must be empty or one of {', '.join(TAINT_EFFECTS)}, got {effect!r}")
            tols.append(Toleration(key, op, value, effect))
        allowed = c.get(w, "allowed_domains", p, list, default=[]) or []
        for j, dname in enumerate(allowed):
            if not isinstance(dname, str) or (dname not in seen and domains_ok):
                c.fail(
                    f"{p}.allowed_domains[{j}]", f"unknown domain {_show(dname)} (domains: {', '.join(domain_names)})"
                )
        priority = c.int_in(c.get(w, "priority", p, int, default=0), f"{p}.priority", INT32_MIN, INT32_MAX)
        deadline = c.get(w, "deadline_s", p, float, default=None)
        if deadline is not None and deadline <= 0:
            c.fail(f"{p}.deadline_s", f"must be > 0, got {deadline}")
        preferred = []
        for j, term in enumerate(c.get(w, "preferred_node_affinity", p, list, default=[]) or []):
            tp = f"{p}.preferred_node_affinity[{j}]"
            if not isinstance(term, Mapping):
                c.fail(tp, f"expected an object, got {json_kind(term)}")
                continue
            weight = c.get(term, "weight", tp, int, required=True)
            if weight is not None and not 1 <= weight <= 100:
                c.fail(f"{tp}.weight", f"must be 1..100 (as in Kubernetes), got {_show(weight)}")
            labels = c.string_map(term.get("match_labels"), f"{tp}.match_labels")
            if weight:
                preferred.append(PreferredTerm(weight, labels))
        if name is None:
            continue
        workloads.append(
            Workload(
                name=name,
                klass=klass or "online",
                user_region=region,
                max_latency_ms=max_lat,
                node_selector=selector,
                tolerations=tuple(tols),
                allowed_domains=tuple(a for a in allowed if isinstance(a, str)),
                priority=priority or 0,
                gpu_models=models,
                deadline_s=deadline,
                preferred=tuple(preferred),
            )
        )
        dem_rows.append(dem)
        wl_nonzero.rows.append(nz_req)
        wl_gc.append(count)
        wl_gm.append(milli)

    weights_doc = c.get(doc, "weights", "", dict, default={}) or {}
    wvals = {}
    for k, v in weights_doc.items():
        if k not in Weights.__dataclass_fields__:
            continue  # a weight of a later version of the format: ignored (see unknown_fields)
        val = c.number(v, f"weights.{k}", minimum=0.0)
        if val is not None:
            wvals[k] = val
    latency_ref = c.get(doc, "latency_ref_ms", "", float, default=DEFAULT_LATENCY_REF_MS)
    if latency_ref is not None and latency_ref <= 0:
        c.fail("latency_ref_ms", f"must be > 0, got {latency_ref}")
    node_nonzero.check(c)
    wl_nonzero.check(c)
    node_names = [n.name for n in nodes]
    pod_scoring = _pod_scoring(c, doc, node_names, len(node_names) == len(doc.get("nodes") or ()))
    if c.errors:
        raise ProblemValidationError(c.errors, source)

    width = max(gpu_counts, default=0)
    gpu_free = np.full((len(nodes), width), -1, dtype=np.int32)
    for i, row in enumerate(gpu_free_rows):
        gpu_free[i, : len(row)] = row
    return Problem(
        resources=res_names,
        domains=domains,
        nodes=nodes,
        workloads=workloads,
        regions=regions,
        latency_ms=np.array(lat_rows, dtype=np.float64).reshape(len(regions), len(domains)),
        capacity=np.array(cap_rows, dtype=np.float64).reshape(len(nodes), len(res_names)),
        allocated=np.array(alloc_rows, dtype=np.float64).reshape(len(nodes), len(res_names)),
        demand=np.array(dem_rows, dtype=np.float64).reshape(len(workloads), len(res_names)),
        gpu_free=gpu_free,
        gpu_count=np.array(gpu_counts, dtype=np.int32),
        wl_gpu_count=np.array(wl_gc, dtype=np.int32),
        wl_gpu_milli=np.array(wl_gm, dtype=np.int32),
        power_idle_w=np.array(idle, dtype=np.float64),
        power_peak_w=np.array(peak, dtype=np.float64),
        power_gpu_share=np.array(gpu_share, dtype=np.float64) if not np.isnan(gpu_share).all() else None,
        weights=Weights(**wvals),
        latency_ref_ms=latency_ref or DEFAULT_LATENCY_REF_MS,
        nonzero_demand=wl_nonzero.array(),
        initial_nonzero=node_nonzero.array(),
        feasibility_only=feasibility_only,
        pod_scoring=pod_scoring,
    )


def _name_list(c: _Checker, items: list, path: str) -> dict[str, int]:
    """The ``name`` of each object of ``items`` (non-empty, unique) -> its position."""
    out: dict[str, int] = {}
    for i, item in enumerate(items):
        p = f"{path}[{i}]"
        if not isinstance(item, Mapping):
            c.fail(p, f"expected an object, got {json_kind(item)}")
            continue
        _unique_name(c, out, c.name(item, p), path, i, keep_first=True)
    return out


def _unique_name(c: _Checker, seen: dict[str, int], name: str | None, path: str, i: int, what: str = "",
                 *, keep_first: bool = False) -> None:
    """Record ``name`` (of ``path[i]``; None: missing, reported) in ``seen`` (name -> position); a
    repeat is an error at ``path[i].name`` naming the position ``seen`` holds: the first one
    (``keep_first``, for a name -> index map) or the latest (the loader's domains, nodes, workloads)."""
    if name is None:
        return
    if name in seen:
        c.fail(f"{path}[{i}].name", f"duplicate {what}name {name!r} (also {path}[{seen[name]}])")
        if keep_first:
            return
    seen[name] = i


def _node_ints(c: _Checker, obj: Mapping, key: str, path: str, nodes: dict[str, int], low: int) -> dict[int, int]:
    """A map node name -> integer (``low`` .. int32) at ``obj[key]``, by node index."""
    value = c.get(obj, key, path, dict, default={}) or {}
    out: dict[int, int] = {}
    for name, v in value.items():
        p = f"{path}.{key}.{name}"
        if str(name) not in nodes:
            c.fail(p, f"unknown node {str(name)!r}")
            continue
        v = _python_scalar(v)
        if isinstance(v, bool) or not isinstance(v, int) or not low <= v <= INT32_MAX:
            c.fail(p, f"expected an integer {low}..{INT32_MAX}, got {json_kind(v)} {_show(v)}")
            continue
        out[nodes[str(name)]] = v
    return out


def _pod_scoring(c: _Checker, doc: Mapping, node_names: list[str], nodes_ok: bool) -> PodScoring | None:
    """The optional ``pod_scoring`` (``Problem.pod_scoring``, what kube-default's
    PodTopologySpread and InterPodAffinity score; written by a Kubernetes snapshot): top-level
    ``topologies`` (``name``, node label ``key``, ``domains``: node -> domain id >= 0, a node
    left out is not counted) and ``groups`` (``name``, ``counts``: node -> pods of the group
    there, 0 where left out); per workload ``pod_groups`` (the groups it joins when placed) and
    ``soft_pod_terms`` (``kind``, ``group``, ``topology`` by name; ``max_skew`` for the spread
    kinds, ``weight`` 1..100 for the affinity ones). Absent: None (those plugins score every
    node alike)."""
    workloads = doc.get("workloads") if isinstance(doc.get("workloads"), list) else []
    section = c.get(doc, "pod_scoring", "", dict, default=None)
    if section is None:
        if "pod_scoring" not in doc or doc["pod_scoring"] is None:
            for i, w in enumerate(workloads):
                for key in ("pod_groups", "soft_pod_terms"):
                    if isinstance(w, Mapping) and w.get(key):
                        c.fail(f"workloads[{i}].{key}", "needs the top-level pod_scoring (its groups and topologies)")
        return None
    nodes = {n: i for i, n in enumerate(node_names)}
    topologies = c.get(section, "topologies", "pod_scoring", list, default=[]) or []
    groups = c.get(section, "groups", "pod_scoring", list, default=[]) or []
    topo_index = _name_list(c, topologies, "pod_scoring.topologies")
    group_index = _name_list(c, groups, "pod_scoring.groups")
    n = len(node_names)
    topo = np.full((len(topologies), n), -1, dtype=np.int32)
    keys: list[str] = []
    for i, t in enumerate(topologies):
        p = f"pod_scoring.topologies[{i}]"
        if not isinstance(t, Mapping):
            keys.append("")
            continue
        key = c.get(t, "key", p, str, required=True)
        if key is not None and not key:
            c.fail(f"{p}.key", "must not be empty (a node label key)")
        keys.append(key or "")
        if nodes_ok:
            for node, v in _node_ints(c, t, "domains", p, nodes, 0).items():
                topo[i, node] = v
    counts = np.zeros((len(groups), n), dtype=np.int32)
    for g, grp in enumerate(groups):
        if isinstance(grp, Mapping) and nodes_ok:
            for node, v in _node_ints(c, grp, "counts", f"pod_scoring.groups[{g}]", nodes, 0).items():
                counts[g, node] = v
    members = np.zeros((len(groups), len(workloads)), dtype=bool)
    terms: list[tuple[SoftPodTerm, ...]] = []
    for w, wl in enumerate(workloads):
        row: list[SoftPodTerm] = []
        terms.append(())
        if not isinstance(wl, Mapping):
            continue
        p = f"workloads[{w}]"
        for j, name in enumerate(c.get(wl, "pod_groups", p, list, default=[]) or []):
            if not isinstance(name, str) or name not in group_index:
                c.fail(f"{p}.pod_groups[{j}]", f"unknown group {_show(name)} (pod_scoring.groups: "
                                               f"{', '.join(group_index) or 'none'})")
            elif members[group_index[name], w]:
                c.fail(f"{p}.pod_groups[{j}]", f"group {name!r} is repeated")
            else:
                members[group_index[name], w] = True
        for k, term in enumerate(c.get(wl, "soft_pod_terms", p, list, default=[]) or []):
            got = _soft_pod_term(c, term, f"{p}.soft_pod_terms[{k}]", group_index, topo_index)
            if got is not None:
                row.append(got)
        terms[w] = tuple(row)
    return PodScoring(tuple(keys), topo, tuple(group_index), counts, members, tuple(terms), tuple(topo_index))


def _soft_pod_term(c: _Checker, term: Any, p: str, groups: dict[str, int], topologies: dict[str, int]) -> SoftPodTerm | None:
    """One ``soft_pod_terms`` entry, or None (its errors reported)."""
    if not isinstance(term, Mapping):
        c.fail(p, f"expected an object, got {json_kind(term)}")
        return None
    kind = c.get(term, "kind", p, str, required=True)
    if kind is not None and kind not in SOFT_POD_TERM_KINDS:
        c.fail(f"{p}.kind", f"must be one of {', '.join(SOFT_POD_TERM_KINDS)}, got {_show(kind)}")
        kind = None
    ids = []
    for key, names, section in (("group", groups, "groups"), ("topology", topologies, "topologies")):
        name = c.get(term, key, p, str, required=True)
        if name is not None and name not in names:
            c.fail(f"{p}.{key}", f"unknown {key} {_show(name)} (pod_scoring.{section}: {', '.join(names) or 'none'})")
            name = None
        ids.append(None if name is None else names[name])
    if kind is None:
        return None
    spread = kind.endswith("spread")
    want, other, high = ("max_skew", "weight", INT32_MAX) if spread else ("weight", "max_skew", 100)
    if term.get(other) is not None:
        c.fail(f"{p}.{other}", f"not for kind {kind} (it takes {want})")
    value = c.int_in(c.get(term, want, p, int, required=True), f"{p}.{want}", 1, high)
    if value is None or None in ids:
        return None
    return SoftPodTerm(kind, ids[0], ids[1], value)


def _feasibility_only(c: _Checker, doc: Mapping, res_names: list[str], resources_ok: bool) -> tuple[str, ...]:
    """The optional top-level ``feasibility_only``: names of ``resources`` that bound where a
    workload fits and count in no objective term (``Problem.feasibility_only``; a Kubernetes
    snapshot sets them for requested resources the cluster config does not list). The rules and
    messages are the model's (``model._util_columns``): each a resource of the problem, once, not
    cpu. Against a mistyped ``resources`` (reported) the names are not checked."""
    names = c.get(doc, "feasibility_only", "", list, default=[]) or []
    out: list[str] = []
    for i, r in enumerate(names):
        p = f"feasibility_only[{i}]"
        if not isinstance(r, str) or not r:
            c.fail(p, f"expected a resource name, got {_show(r)}")
        elif not c.text(r, p):
            pass
        elif resources_ok and r not in res_names:
            c.fail(p, f"{r!r} is not one of the resources {res_names}")
        elif r == "cpu":
            c.fail(p, "'cpu' counts in the objective (the power model uses CPU utilization)")
        elif r in out:
            c.fail(p, f"{r!r} is repeated")
        else:
            out.append(r)
    return tuple(out)


class _NonzeroColumn:
    """The optional per-object non-zero cpu / memory of kube-scheduler's scoring: per workload
    ``nonzero_requests`` (``Problem.nonzero_demand``), per node ``nonzero_allocated``
    (``Problem.initial_nonzero``), each ``{"cpu": .., "memory": ..}`` in the units of
    ``requests`` / ``allocated`` for the resources of :data:`NONZERO_RESOURCES` that the problem
    has (both required). Every object of the list gives it, or none does: the array is
    the problem's or absent, and a half-filled one would score the rest by another rule. Each
    amount is at least the object's ``requests`` / ``allocated`` of it: kube's non-zero request
    only fills in a *missing* container request, so it is never below the request (10m against
    a request of 100m would have kube-default score the pod as a tenth of its size)."""

    def __init__(self, section: str, key: str) -> None:
        self.section, self.key = section, key
        self.rows: list[list[float] | None] = []  # per object built, None where it gave none
        self.given: list[str] = []  # paths of the objects that give it
        self.missing: list[str] = []  # ... and of those that do not

    def read(
        self, c: _Checker, obj: Mapping, path: str, res_names: list[str], base_key: str, base: list[float]
    ) -> list[float] | None:
        """The row of ``obj`` (None when it gives none); ``base`` is its ``base_key`` amounts
        (``requests`` / ``allocated``) per resource of ``res_names``, the floor of each."""
        if obj.get(self.key) is None:
            self.missing.append(path)
            return None
        self.given.append(path)
        doc = c.get(obj, self.key, path, dict)
        row = [0.0] * len(NONZERO_RESOURCES)  # a resource the problem lacks has a 0 column (nothing scores it)
        if doc is None:  # mistyped, reported
            return row
        for j, r in enumerate(NONZERO_RESOURCES):
            if r not in res_names:
                continue
            if r not in doc:
                c.fail(f"{path}.{self.key}.{r}", "required field is missing")
                continue
            value = c.number(doc[r], f"{path}.{self.key}.{r}", minimum=0.0)
            floor = base[res_names.index(r)]
            if value is not None and value < floor:
                c.fail(f"{path}.{self.key}.{r}", f"must be >= {base_key}.{r} ({floor:.12g}), got {value:.12g}")
            row[j] = value or 0.0
        for k in doc:
            if k not in NONZERO_RESOURCES or k not in res_names:
                scored = [r for r in NONZERO_RESOURCES if r in res_names]
                c.fail(
                    f"{path}.{self.key}.{k}",
                    f"unknown resource {k!r} (only {', '.join(scored)}: what kube-scheduler scores)",
                )
        return row

    def check(self, c: _Checker) -> None:
        if self.given and self.missing:
            others = f" ({len(self.missing) - 1} more lack it)" if len(self.missing) > 1 else ""
            c.fail(
                f"{self.missing[0]}.{self.key}",
                f"required, since {self.given[0]} gives it: give it for all {len(self.given) + len(self.missing)}"
                f" {self.section} or for none{others}",
            )

    def array(self) -> np.ndarray | None:
        if not self.rows or any(r is None for r in self.rows):
            return None
        return np.array(self.rows, dtype=np.float64).reshape(len(self.rows), len(NONZERO_RESOURCES))


def unknown_fields(doc: Any) -> list[str]:
    """Paths of the fields of ``doc`` that this loader ignores (``nodes[2].gpu_modle``).

    The format may gain fields, so these are not errors; a command may still show them, as
    a field the reader does not know is often a typo.
    """
    out: list[str] = []

    def visit(obj: Any, path: str, schema: str) -> None:
        if not isinstance(obj, Mapping):
            return
        known = KNOWN_FIELDS[schema]
        out.extend(f"{path}.{k}" if path else str(k) for k in obj if k not in known)
        for key, value in obj.items():
            if not isinstance(key, str) or not key:
                continue
            child = f"{schema}.{key}" if schema else key
            if f"{child}[]" in KNOWN_FIELDS and isinstance(value, list):
                for i, item in enumerate(value):
                    visit(item, f"{path}.{key}[{i}]" if path else f"{key}[{i}]", f"{child}[]")
            elif child in KNOWN_FIELDS:
                visit(value, f"{path}.{key}" if path else str(key), child)

    visit(doc, "", "")
    return out


def _list(c: _Checker, doc: Mapping, key: str, required: bool) -> list:
    value = c.get(doc, key, "", list, default=... if required else [])
    return value or []


def _num(x: float) -> int | float:
    return int(x) if float(x).is_integer() else float(x)


def _nonzero_doc(problem: Problem, row: np.ndarray) -> dict[str, int | float]:
    """A row of ``nonzero_demand`` / ``initial_nonzero`` as the file's object (the problem's resources only)."""
    return {r: _num(row[j]) for j, r in enumerate(NONZERO_RESOURCES) if r in problem.resources}


def problem_to_dict(problem: Problem) -> dict:
    """The problem as a document that :func:`problem_from_dict` reads back to an equal problem."""
    doc: dict[str, Any] = {"resources": list(problem.resources)}
    if problem.feasibility_only:  # only when set: other problems' files stay as they were
        doc["feasibility_only"] = list(problem.feasibility_only)
    doc.update(domains=[], latency_ms={}, nodes=[], workloads=[])
    for d in problem.domains:
        doc["domains"].append(
            {
                "name": d.name,
                "kind": d.kind,
                "carbon_zone": d.carbon_zone,
                "carbon_intensity": d.carbon_intensity,
                "price_per_hour": dict(d.price_per_hour),
                "pue": d.pue,
            }
        )
    for u, region in enumerate(problem.regions):
        doc["latency_ms"][region] = {
            problem.domains[j].name: float(v) for j, v in enumerate(problem.latency_ms[u]) if not math.isnan(v)
        }
    for i, n in enumerate(problem.nodes):
        g = int(problem.gpu_count[i])
        node: dict[str, Any] = {
            "name": n.name,
            "domain": n.domain,
            "capacity": {r: _num(problem.capacity[i, j]) for j, r in enumerate(problem.resources)},
            "allocated": {r: _num(problem.allocated[i, j]) for j, r in enumerate(problem.resources)},
            "gpus": g,
            "gpu_model": n.gpu_model,
            "gpu_free_milli": [int(v) for v in problem.gpu_free[i, :g]],
            "labels": dict(n.labels),
            "taints": [{"key": t.key, "value": t.value, "effect": t.effect} for t in n.taints],
            "power_idle_w": float(problem.power_idle_w[i]),
            "power_peak_w": float(problem.power_peak_w[i]),
        }
        given = problem.power_gpu_share_given
        if given is not None and not math.isnan(given[i]):  # written only where given (else the default)
            node["power_gpu_share"] = float(given[i])
        if problem.initial_nonzero is not None:
            node["nonzero_allocated"] = _nonzero_doc(problem, problem.initial_nonzero[i])
        doc["nodes"].append(node)
    for i, w in enumerate(problem.workloads):
        wl: dict[str, Any] = {
            "name": w.name,
            "requests": {r: _num(problem.demand[i, j]) for j, r in enumerate(problem.resources)},
            "class": w.klass,
            "priority": w.priority,
        }
        if problem.nonzero_demand is not None:
            wl["nonzero_requests"] = _nonzero_doc(problem, problem.nonzero_demand[i])
        if problem.pod_scoring is not None:
            wl.update(_workload_scoring_doc(problem.pod_scoring, i))
        if problem.wl_gpu_count[i] > 0:
            wl["gpu"] = {
                "count": int(problem.wl_gpu_count[i]),
                "milli": int(problem.wl_gpu_milli[i]),
                "models": list(w.gpu_models),
            }
        if w.user_region:
            wl["user_region"] = w.user_region
        if w.max_latency_ms is not None:
            wl["max_latency_ms"] = w.max_latency_ms
        if w.node_selector:
            wl["node_selector"] = dict(w.node_selector)
        if w.tolerations:
            wl["tolerations"] = [
                {"key": t.key, "operator": t.operator, "value": t.value, "effect": t.effect} for t in w.tolerations
            ]
        if w.allowed_domains:
            wl["allowed_domains"] = list(w.allowed_domains)
        if w.deadline_s is not None:
            wl["deadline_s"] = w.deadline_s
        if w.preferred:
            wl["preferred_node_affinity"] = [
                {"weight": t.weight, "match_labels": dict(t.match_labels)} for t in w.preferred
            ]
        doc["workloads"].append(wl)
    wt = problem.weights
    doc["weights"] = {k: getattr(wt, k) for k in Weights.__dataclass_fields__}
    doc["latency_ref_ms"] = problem.latency_ref_ms
    if problem.pod_scoring is not None:  # only when set: other problems' files stay as they were
        doc["pod_scoring"] = _pod_scoring_doc(problem)
    return doc


def _pod_scoring_doc(problem: Problem) -> dict[str, Any]:
    """``Problem.pod_scoring``'s topologies and groups as the file's ``pod_scoring``."""
    ps = problem.pod_scoring
    assert ps is not None
    names = [n.name for n in problem.nodes]
    return {
        "topologies": [
            {"name": name, "key": key, "domains": {names[i]: int(ps.topology[t, i]) for i in np.flatnonzero(ps.topology[t] >= 0)}}
            for t, (name, key) in enumerate(zip(ps.topology_names, ps.topology_keys, strict=True))
        ],
        "groups": [
            {"name": name, "counts": {names[i]: int(ps.group_counts[g, i]) for i in np.flatnonzero(ps.group_counts[g])}}
            for g, name in enumerate(ps.group_names)
        ],
    }


def _workload_scoring_doc(ps: PodScoring, w: int) -> dict[str, Any]:
    """A workload's ``pod_groups`` and ``soft_pod_terms`` (each only when it has some)."""
    out: dict[str, Any] = {}
    groups = [ps.group_names[g] for g in np.flatnonzero(ps.members[:, w])]
    if groups:
        out["pod_groups"] = groups
    if ps.terms[w]:
        out["soft_pod_terms"] = [
            {"kind": t.kind, "group": ps.group_names[t.group], "topology": ps.topology_names[t.topology],
             ("max_skew" if t.kind.endswith("spread") else "weight"): t.value}
            for t in ps.terms[w]
        ]
    return out


def write_file_atomic(path: str | os.PathLike, write: Callable[[str], Any]) -> Path:
    """Run ``write(tmp)`` on a temporary file beside ``path`` (its missing folders made), then
    rename it over ``path``: a reader, or a crash or an error while writing, leaves the old file
    (or none), never half a file, and no temporary file behind.

    The file is made readable by others (0644), not left at the 0600 of the temporary file it
    is renamed from, so a placement written by one user or container can be read by another.

    A ``path`` that is a symbolic link is written through, as the shell's ``>`` does: the
    temporary file goes beside the link's (resolved) target and replaces it, so the link stays.

    A ``path`` that exists and is neither a regular file nor a folder (a device such as
    /dev/null, a fifo, a socket) is written directly, as the shell's ``>`` does, not atomically:
    renaming over it replaced the device with a plain file (as root, /dev/null itself). A fifo
    waits for its reader. ``write`` should sync with :func:`fsync_file`, which such files refuse.
    Returns the file written.
    """
    target = Path(path)
    if target.is_symlink():  # renaming over the link would replace it with a plain file
        try:
            target = target.resolve()
        except (RuntimeError, OSError) as exc:  # a loop (RuntimeError before Python 3.13)
            raise OSError(errno.ELOOP, f"cannot resolve the symbolic link: {exc}", str(path)) from None
    if _is_special_file(target):
        write(str(target))
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
    os.close(fd)
    try:
        write(tmp)
        os.chmod(tmp, 0o644)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return target


def _is_special_file(path: Path) -> bool:
    """Whether ``path`` exists and is neither a regular file nor a folder (a device, a fifo, a socket)."""
    try:
        mode = os.stat(path).st_mode
    except OSError:  # missing (or unreadable: the write reports it)
        return False
    return not (stat.S_ISREG(mode) or stat.S_ISDIR(mode))


def fsync_file(fd: int) -> None:
    """``os.fsync``, except where the file cannot be synced (a device, a fifo: EINVAL), which
    :func:`write_file_atomic` writes directly."""
    try:
        os.fsync(fd)
    except OSError as exc:
        if exc.errno not in (errno.EINVAL, errno.ENOTSUP, errno.EROFS):
            raise


def write_text_atomic(path: str | os.PathLike, text: str) -> None:
    """Write a text file atomically (:func:`write_file_atomic`), synced to disk before the rename."""

    def write(tmp: str) -> None:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            fsync_file(f.fileno())

    write_file_atomic(path, write)


def write_json_atomic(path: str | os.PathLike, data: Any) -> None:
    """Write JSON so that a reader sees either the old file or the whole new one. A NaN or an
    infinity is refused (ValueError naming the file and the field; nothing is written): json.dumps
    would write NaN / Infinity, which is not JSON, and every reader of ours refuses it (write None,
    null, for a number that is missing)."""
    try:
        text = json.dumps(data, indent=2, sort_keys=False, allow_nan=False)
    except ValueError:
        where = _non_finite_path(data)
        if where is None:  # another ValueError (a circular reference): json's own message
            raise
        field, value = where
        raise ValueError(f"{os.fspath(path)}: {field or 'the document'} is {float(value)!r}, which JSON cannot hold; "
                         "nothing was written") from None
    write_text_atomic(path, text + "\n")


def _non_finite_path(data: Any) -> tuple[str, float] | None:
    """The field path and value of the first NaN or infinity in ``data`` (dicts, lists, tuples)."""
    stack: list[tuple[Any, str]] = [(data, "")]
    seen: set[int] = set()
    while stack:
        obj, path = stack.pop()
        if isinstance(obj, float):
            if not math.isfinite(obj):
                return path, obj
        elif isinstance(obj, (dict, list, tuple)) and id(obj) not in seen:
            seen.add(id(obj))  # a circular document: each container once
            items = obj.items() if isinstance(obj, dict) else enumerate(obj)
            children = [(v, _key_path(path, k) if isinstance(obj, dict) else f"{path}[{k}]") for k, v in items]
            stack.extend(reversed(children))  # reversed: the first field is reported first
    return None


def write_problem(problem: Problem, path: str | os.PathLike) -> None:
    """Write a problem file: YAML for a .yaml/.yml path, JSON otherwise (atomically).

    The file is what :func:`load_problem` reads back to an equal problem: a problem the file
    format cannot hold is refused with the loader's errors (field paths), nothing written. A
    directly built problem may hold what a file may not (a snapshot's node with a capacity of 0,
    an overcommitted node, numbers past :data:`MAX_NUMBER`); such a file failed only when read."""
    p = Path(path)
    doc = problem_to_dict(problem)
    is_yaml = p.suffix.lower() in (".yaml", ".yml")
    if is_yaml:
        text = dump_yaml(doc)
        back = load_yaml(text)  # what load_problem reads
    else:
        text = json.dumps(doc, indent=2, allow_nan=False) + "\n"  # (the constructor refuses NaN and inf amounts)
        back = load_json(text)
    try:
        problem_from_dict(back, source=str(p))
    except ProblemValidationError as exc:
        raise ProblemValidationError(exc.errors, f"{p} (not written: a problem file cannot hold this problem)") from None
    write_text_atomic(p, text)

"""Small process helpers for starting Flower's executables, free of any Flower import.

Shared by ``iro fed`` / :class:`iro_fed.federated.local.LocalFederation` and the edge agent's
SuperNode supervisor (``edge_agent.federation``), which must import without the ``fed`` extra.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any


def parse_host_port(text: str) -> tuple[str, int]:
    """``(host, port)`` of a SuperLink address, ``HOST:PORT`` or ``[IPv6]:PORT``: no scheme or user,
    port 1..65535; ValueError says what is wrong. The host is not resolved: a SuperNode keeps
    retrying a SuperLink that is not up (or not in DNS) yet."""
    host, sep, port = text.strip().rpartition(":")
    bare = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    if (not sep or not bare or any(c in "/[]@" for c in bare) or any(c.isspace() for c in text)
            or not port.isascii() or not port.isdigit() or not 1 <= int(port) <= 65535):
        raise ValueError(f"expected HOST:PORT (port 1..65535, [IPv6]:PORT, no scheme), got {text!r}")
    if ":" in bare and bare == host:  # '::1:80' reads as host '::1' port 80 or host '::1:80'
        raise ValueError(f"an IPv6 address needs brackets: [{bare}]:{port}, got {text!r}")
    return bare, int(port)


def find_flower_bin(name: str) -> str | None:
    """A Flower executable beside this interpreter (the venv), else on PATH; None when neither."""
    here = Path(sys.executable).parent / name
    if here.is_file():
        return str(here)
    return shutil.which(name)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# Written as \uXXXX in a value: '"' (it would end the value for Flower's parser) and the control
# characters a TOML string may not hold as they are (tab excepted).
_TOML_ESCAPE = re.compile(r'["\x00-\x08\x0a-\x1f\x7f]')
# A config key Flower's parser reads whole (no space, no '=') and TOML takes bare; dots nest.
_CONFIG_KEY = re.compile(r"[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*")
INT64 = (-(2**63), 2**63 - 1)  # Flower sends config integers as protobuf sint64


def toml_value(value: Any, key: str = "value") -> str:
    r"""One ``--run-config`` / ``--node-config`` value such that Flower reads back exactly ``value``.

    Flower (``flwr.common.config.parse_config_args``) cuts ``key=value`` pairs with the pattern
    ``'[^']*'|"[^"]*"|\S+`` and only then reads each value as TOML: a ``"`` inside a double-quoted
    value ends it however it is escaped (``"a\"b"`` is cut at ``"a\"`` and fails). So a string is a
    TOML basic string with ``\`` doubled and ``"`` and control characters as ``\uXXXX`` escapes;
    other characters stay as they are (JSON's surrogate-pair escapes of non-BMP characters are not
    TOML). ValueError, naming ``key``, for what Flower cannot carry: a lone surrogate, an integer
    beyond 64 bits.
    """
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        if not INT64[0] <= value <= INT64[1]:
            raise ValueError(f"{key}: {value} is outside the 64-bit integers Flower's config carries")
        return str(int(value))
    if isinstance(value, float):
        return repr(float(value))  # inf and nan are TOML too; float() drops a numpy type's repr
    text = str(value)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError(f"{key}: {text!r} is not valid Unicode (a lone surrogate), which Flower's config "
                         "cannot carry") from None
    escaped = text.replace("\\", "\\\\")
    escaped = _TOML_ESCAPE.sub(lambda m: f"\\u{ord(m.group()):04x}", escaped)
    return f'"{escaped}"'


def config_arg(entries: Mapping[str, Any]) -> str:
    """The ``--run-config`` / ``--node-config`` text ``key=value ...`` of ``entries`` that Flower
    reads back as ``entries``; ValueError naming the key for a key or value it cannot carry."""
    for key in entries:
        if not isinstance(key, str) or not _CONFIG_KEY.fullmatch(key):
            raise ValueError(f"{key!r}: a config key is letters, digits, '-' and '_' (dots nest)")
    return " ".join(f"{k}={toml_value(v, k)}" for k, v in entries.items())


def signal_process(pid: int, sig: int, group: bool = False) -> None:
    """Send ``sig`` to ``pid`` (to its process group with ``group``); one already gone is no error."""
    try:
        (os.killpg if group else os.kill)(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass

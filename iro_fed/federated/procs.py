"""Small process helpers for starting Flower's executables, free of any Flower import.

Shared by ``iro fed`` / :class:`iro_fed.federated.local.LocalFederation` and the edge agent's
SuperNode supervisor (``edge_agent.federation``), which must import without the ``fed`` extra.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import sys
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


def toml_value(value: Any) -> str:
    """One ``--run-config`` / ``--node-config`` value in TOML syntax."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    return json.dumps(str(value))  # a JSON string is a valid TOML basic string


def signal_process(pid: int, sig: int, group: bool = False) -> None:
    """Send ``sig`` to ``pid`` (to its process group with ``group``); one already gone is no error."""
    try:
        (os.killpg if group else os.kill)(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass

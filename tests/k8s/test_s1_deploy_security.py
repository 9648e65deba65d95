"""deploy/: the image installs pinned versions, and the federated guide's PKI steps leave the keys readable
by the systemd units (User=iro-fed) and by nobody else."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
GUIDE = DEPLOY / "federated" / "README.md"
# The extras deploy/Dockerfile installs (its `pip install ".[k8s,...]"`), read from it so that adding one there
# without pinning its dependencies fails below.
(_EXTRAS,) = re.findall(r'pip install "\.\[([\w,-]+)\]"', (DEPLOY / "Dockerfile").read_text())
EXTRAS = tuple(_EXTRAS.split(","))
PIN = re.compile(r"^(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)==(?P<version>[A-Za-z0-9.+!_-]+)$")
PKI = "/etc/iro-fed/pki"


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _constraints() -> dict[str, str]:
    pins = {}
    for line in (DEPLOY / "constraints.txt").read_text().splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        m = PIN.match(line.strip())
        assert m, f"constraints.txt: {line!r} is not an exact pin NAME==VERSION"
        assert _norm(m["name"]) not in pins, f"constraints.txt: {m['name']} twice"
        pins[_norm(m["name"])] = m["version"]
    return pins


def _closure(name: str, extras: tuple[str, ...]) -> set[str]:
    """The installed distributions ``name[extras]`` needs, itself included (markers for this interpreter: the
    image's python:3.11 on Linux, like the venv)."""
    from importlib.metadata import PackageNotFoundError, distribution

    from packaging.requirements import Requirement

    seen: dict[str, set[str]] = {}
    todo = [(name, set(extras))]
    while todo:
        dist_name, wanted = todo.pop()
        try:
            dist = distribution(dist_name)
        except PackageNotFoundError:
            pytest.skip(f"{dist_name} is not installed: the environment lacks iro-fed[{','.join(EXTRAS)}]")
        key = _norm(dist.metadata["Name"])
        if key in seen and wanted <= seen[key]:
            continue
        seen.setdefault(key, set()).update(wanted)
        for text in dist.requires or []:
            req = Requirement(text)
            if req.marker is None or any(req.marker.evaluate({"extra": e}) for e in ("", *seen[key])):
                todo.append((req.name, set(req.extras)))
    return set(seen)


def test_constraints_pin_exactly_what_the_image_installs():
    """deploy/constraints.txt pins every package of the dependency closure of the extras the Dockerfile installs
    (iro-fed[k8s,agent,fed,dqn,sim,carbon]), each at one exact version, and nothing else; the Dockerfile's torch is
    the pinned one."""
    pins = _constraints()
    assert set(pins) == _closure("iro-fed", EXTRAS) - {"iro-fed"}
    docker = (DEPLOY / "Dockerfile").read_text()
    (torch,) = re.findall(r"\btorch==(\S+)", docker)
    assert pins["torch"].split("+")[0] == torch


def test_every_pip_install_of_the_image_is_constrained():
    """No `pip install` of deploy/Dockerfile resolves open ranges: each takes -c with the copied constraints file."""
    lines = (DEPLOY / "Dockerfile").read_text().splitlines()
    copy = [i for i, line in enumerate(lines) if re.match(r"COPY\s+deploy/constraints\.txt\s+/tmp/constraints\.txt$", line)]
    installs = [i for i, line in enumerate(lines) if line.startswith("RUN") and "pip install" in line]
    assert copy and installs
    for i in installs:
        command = lines[i].split("pip install", 1)[1].split("&&")[0].split()
        assert copy[0] < i and "-c" in command and command[command.index("-c") + 1] == "/tmp/constraints.txt", lines[i]
    assert "@sha256:<digest>" in "\n".join(lines)  # how to pin the base image is written down


def _pki_steps() -> str:
    """The first shell block of the guide's "1. Certificates" section (the SuperLink host's steps)."""
    section = GUIDE.read_text().split("## 1. Certificates", 1)[1]
    return re.search(r"```sh\n(.*?)```", section, re.S).group(1)


def _unit_pki_files(unit: str) -> set[str]:
    """The files under /etc/iro-fed/pki that a systemd unit of deploy/federated reads."""
    return set(re.findall(re.escape(PKI) + r"/([\w.%]+)", (DEPLOY / "federated" / unit).read_text()))


def test_guide_gives_the_superlink_unit_its_files_and_nobody_else():
    """The units run as User=iro-fed: the folder is 0750 root:iro-fed (not 0700 root), every file the SuperLink unit
    reads is in group iro-fed, and its private key is 0640 (group-readable, not world-readable)."""
    steps = _pki_steps()
    assert f"install -d -m 0750 -o root -g iro-fed {PKI}" in steps
    assert "-m 0700" not in steps
    needed = _unit_pki_files("iro-fed-superlink.service")
    assert needed == {"ca.crt", "server.crt", "server.key"}
    (chgrp,) = [line for line in steps.splitlines() if line.startswith("chgrp iro-fed ")]
    assert {Path(p).name for p in chgrp.split()[2:]} == needed
    assert f"chmod 0640 {PKI}/server.key" in steps
    for unit in ("iro-fed-superlink.service", "iro-fed-supernode@.service", "iro-fed-rounds.service"):
        assert "User=iro-fed" in (DEPLOY / "federated" / unit).read_text()


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0 or shutil.which("setpriv") is None,
                    reason="runs the guide's steps as root and the SuperLink's check as another user (setpriv)")
def test_guide_steps_let_an_unprivileged_superlink_read_its_keys():
    """The guide's commands, run as root into a scratch folder (group iro-fed: a free numeric gid), leave
    `iro fed server`, run as an unprivileged user of that group, able to read its TLS files (its --dry-run loads
    them), and ca.key unreadable to it."""
    uid = gid = 64123  # no account needed: setpriv takes numbers
    iro = Path(sys.executable).with_name("iro")
    base = Path(tempfile.mkdtemp(prefix="s1-pki-", dir="/tmp"))
    try:
        base.chmod(0o755)  # the user must traverse it
        pki = base / "pki"
        script = _pki_steps().replace(PKI, str(pki)).replace("iro-fed ", f"{gid} ").replace("-g iro-fed", f"-g {gid}")
        script = "\n".join(line for line in script.splitlines() if "useradd" not in line)
        env = {**os.environ, "PATH": f"{iro.parent}:{os.environ.get('PATH', '')}"}
        out = subprocess.run(["sh", "-ec", script], capture_output=True, text=True, timeout=120, env=env)
        assert out.returncode == 0, out.stderr
        as_user = ["setpriv", f"--reuid={uid}", f"--regid={gid}", "--clear-groups"]
        server = subprocess.run([*as_user, str(iro), "fed", "server", "--port", "18999", "--dry-run",
                                 "--ssl-ca-certfile", str(pki / "ca.crt"), "--ssl-certfile", str(pki / "server.crt"),
                                 "--ssl-keyfile", str(pki / "server.key")], capture_output=True, text=True, timeout=120)
        assert server.returncode == 0, server.stderr
        assert "flower-superlink" in server.stdout
        assert subprocess.run([*as_user, "cat", str(pki / "ca.key")], capture_output=True, timeout=30).returncode != 0
        assert (pki / "server.key").stat().st_mode & 0o777 == 0o640
    finally:
        shutil.rmtree(base, ignore_errors=True)

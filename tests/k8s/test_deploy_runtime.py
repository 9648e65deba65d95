"""deploy/: what the pods need at run time beyond a valid schema.

* The federated server's container has a read-only root filesystem; the ServerApp that each
  ``flwr run`` starts in it unpacks the app with ``tempfile`` (``flwr.cli.install``) and publishes
  the policy registry, so ``/tmp``, its working folder and the documented registry path must be
  writable volumes. Checked on the rendered pod spec and, where ``unshare`` can make a private
  mount namespace, by running those steps in a copy of the pod's filesystem layout (every mount
  read-only, an empty tmpfs at each writable volume).
* The SuperLink starts its own SuperExec, which connects to the listen address with ``0.0.0.0``
  replaced by ``127.0.0.1`` and verifies the server certificate: the ``iro fed certs`` commands
  the READMEs give must put that address into the certificate.
* The recording rules' ConfigMap keeps a fixed name for the Prometheus that mounts it.
"""

from __future__ import annotations

import ipaddress
import json
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
TARGETS = ["deploy/base", "deploy/overlays/cloud"]  # the edge overlay has no federated server
FED_README = ROOT / "deploy/federated/README.md"


def _render(target: str) -> list[dict]:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl not installed (Debian package kubernetes-client)")
    out = subprocess.run([kubectl, "kustomize", str(ROOT / target)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return [d for d in yaml.safe_load_all(out.stdout) if d]


def _fed_server(target: str) -> tuple[dict, dict]:
    """(pod spec, superlink container) of the rendered federated server."""
    (dep,) = [d for d in _render(target) if d["kind"] == "Deployment" and d["metadata"]["name"] == "iro-fed-server"]
    spec = dep["spec"]["template"]["spec"]
    (container,) = [c for c in spec["containers"] if c["name"] == "superlink"]
    return spec, container


def _writable_mounts(spec: dict, container: dict) -> list[str]:
    """Mount paths of the container's writable volumes (emptyDir or a claim, not mounted readOnly)."""
    kinds = {v["name"]: v for v in spec.get("volumes", [])}
    return [m["mountPath"] for m in container.get("volumeMounts", [])
            if not m.get("readOnly") and {"emptyDir", "persistentVolumeClaim"} & set(kinds[m["name"]])]


def _under(path: str, mounts: list[str]) -> bool:
    return any(Path(path) == Path(m) or Path(m) in Path(path).parents for m in mounts)


def _documented_registry() -> str:
    """The registry path deploy/federated/README.md tells the operator to pass to `flwr run`."""
    (path,) = set(re.findall(r'registry="([^"]+)"', FED_README.read_text()))
    return path


@pytest.mark.parametrize("target", TARGETS)
def test_fed_server_writes_only_to_writable_volumes(target):
    spec, c = _fed_server(target)
    assert c["securityContext"]["readOnlyRootFilesystem"] is True
    writable = _writable_mounts(spec, c)
    env = {e["name"]: e.get("value") for e in c.get("env", [])}
    database = next(a.split("=", 1)[1] for a in c["args"] if a.startswith("--database="))
    work = c.get("workingDir", "/")
    needed = {
        "/tmp (flwr.cli.install unpacks each run's app with tempfile)": "/tmp",
        "FLWR_HOME": env["FLWR_HOME"],
        "--database's folder": str(Path(database).parent),
        "workingDir (the default registry `policies` is relative to it)": f"{work}/policies",
        "the registry of deploy/federated/README.md": _documented_registry(),
    }
    missing = {why: path for why, path in needed.items() if not _under(path, writable)}
    assert not missing, f"not on a writable volume ({writable}): {missing}"


_SIM = r"""
# A pod's filesystem: every mount read-only, an empty tmpfs at each writable volume's path.
set -e
for m in $(awk '{print $5}' /proc/self/mountinfo | sort -u); do
  case $m in /proc*|/sys*|/dev*) continue;; esac
  mount -o remount,bind,ro "$m" 2>/dev/null || true
done
for p in $WRITABLE; do
  if [ ! -d "$p" ]; then  # make the mount point on a private tmpfs over its nearest existing folder
    a=$(dirname "$p"); while [ ! -d "$a" ]; do a=$(dirname "$a"); done
    mount -t tmpfs tmpfs "$a"; mkdir -p "$p"; mount -o remount,ro "$a"
  fi
  mount -t tmpfs tmpfs "$p"
done
cd "$WORKDIR"
exec "$@"
"""

_STEPS = r"""
import json, sys, tempfile, zipfile
out = {}
try:  # what the SuperLink's ServerApp runtime does first with each run's app (FAB)
    from flwr.cli.install import install_from_fab
    install_from_fab(b"not a FAB", skip_prompt=True)
except zipfile.BadZipFile:
    out["install_from_fab"] = "ok"  # got as far as reading the archive: the temporary folder exists
except Exception as exc:
    out["install_from_fab"] = f"{type(exc).__name__}: {exc}"
from iro_fed.federated.registry import PolicyRegistry
for path in sys.argv[1:]:
    try:  # what PolicyRegistry.publish does: make the root, write a temporary file in it
        root = PolicyRegistry(path).root
        root.mkdir(parents=True, exist_ok=True)
        tempfile.mkstemp(dir=root)
        out[path] = "ok"
    except Exception as exc:
        out[path] = f"{type(exc).__name__}: {exc}"
print(json.dumps(out))
"""


def _unshare_works() -> bool:
    unshare = shutil.which("unshare")
    if unshare is None:
        return False
    try:
        done = subprocess.run([unshare, "-rm", "sh", "-c", "mount -t tmpfs tmpfs /mnt"], capture_output=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


@pytest.mark.skipif(not _unshare_works(), reason="needs `unshare -rm` (user and mount namespaces) to copy the pod's filesystem")
def test_serverapp_steps_run_in_the_fed_server_pod_filesystem():
    spec, c = _fed_server("deploy/base")
    env = {e["name"]: e["value"] for e in c.get("env", []) if "value" in e}
    writable = " ".join(_writable_mounts(spec, c))
    # Scripts go on the command line: a file under /tmp would be hidden by the pod's /tmp volume.
    cmd = ["unshare", "-rm", "env", f"WRITABLE={writable}", f"WORKDIR={c.get('workingDir', '/')}",
           *(f"{k}={v}" for k, v in env.items()), "HOME=/nonexistent",
           "sh", "-c", _SIM, "pod-fs", sys.executable, "-c", _STEPS, "policies", _documented_registry()]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result == {"install_from_fab": "ok", "policies": "ok", _documented_registry(): "ok"}, result


def _certs_commands() -> list[list[str]]:
    """Every `iro fed certs ...` command line of the deploy READMEs."""
    found = []
    for readme in (ROOT / "deploy/README.md", FED_README):
        for line in re.findall(r"iro fed certs [^`\n]*", readme.read_text()):
            found.append(shlex.split(line.split("#")[0]))
    return found


def test_readme_certificates_name_the_address_the_superexec_dials(tmp_path):
    from cryptography import x509
    from flwr.supercore.address import resolve_bind_address

    # `iro fed server` listens on 0.0.0.0 unless --host says otherwise (the manifest and the systemd unit).
    hosts = {"0.0.0.0"}
    _, c = _fed_server("deploy/base")
    hosts |= {a.split("=", 1)[1] for a in c["args"] if a.startswith("--host=")}
    dialed = {resolve_bind_address(f"{h}:8000").rsplit(":", 1)[0] for h in hosts}
    commands = _certs_commands()
    for i, argv in enumerate(commands):
        assert argv[:3] == ["iro", "fed", "certs"], argv
        args = argv[3:]
        out = tmp_path / f"pki{i}"
        if "--out" in args:
            args[args.index("--out") + 1] = str(out)
        else:
            args += ["--out", str(out)]
        done = subprocess.run([str(Path(sys.executable).parent / "iro"), "fed", "certs", *args],
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stdout + done.stderr
        cert = x509.load_pem_x509_certificate((out / "server.crt").read_bytes())
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        ips = {str(ip) for ip in san.get_values_for_type(x509.IPAddress)}
        missing = {h for h in dialed if str(ipaddress.ip_address(h)) not in ips}
        assert not missing, f"{shlex.join(argv)}: server.crt lacks {missing} (has {sorted(ips)})"
    assert len(commands) == 2, commands  # deploy/federated/README.md and the Secret in deploy/README.md


@pytest.mark.parametrize("target", ["deploy/base", "deploy/overlays/edge", "deploy/overlays/cloud"])
def test_rules_config_map_has_the_fixed_name_a_prometheus_mounts(target):
    names = {d["metadata"]["name"] for d in _render(target) if d["kind"] == "ConfigMap"}
    assert "iro-prometheus-rules" in names, sorted(names)


def test_systemd_units_run_iro_command_lines_that_parse():
    """Each unit's ExecStart (continuation lines joined, %i as site 0) is a valid `iro` invocation."""
    from iro_fed.cli import build_parser

    units = sorted((ROOT / "deploy/federated").glob("*.service"))
    assert len(units) == 3
    parser = build_parser()
    for unit in units:
        text = unit.read_text().replace("\\\n", " ")
        (line,) = re.findall(r"^ExecStart=(.*)$", text, re.M)
        argv = shlex.split(line.replace("%i", "0"))
        assert Path(argv[0]).name == "iro", unit.name
        args = parser.parse_args(argv[1:])
        assert callable(getattr(args, "func", None)), unit.name

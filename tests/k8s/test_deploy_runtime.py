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
* The ServerApp evaluates on the held-out site in the simulator, which reads the shared data folder
  from ``$IRO_DATA_DIR``: the pod sets it to a mounted volume, and the init container that fills
  that volume, run here as written in the manifest, leaves a folder the evaluation's environment
  builds from (and stops with a clear error when the image holds no data).
* ``iro scheduler``, run with the Deployment's arguments against the loopback API server
  (:mod:`iro_fed.k8s.testing`), makes only requests its rendered RBAC allows, and uses every grant.
* The recording rules' ConfigMap keeps a fixed name for the Prometheus that mounts it.
"""

from __future__ import annotations

import ipaddress
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from urllib.parse import parse_qs

import pytest

from iro_fed.federated.procs import free_port
from tests.k8s.test_deploy import ROOT, _bound_rules, _render, find

TARGETS = ["deploy/base", "deploy/overlays/cloud"]  # the edge overlay has no federated server
FED_README = ROOT / "deploy/federated/README.md"


def _fed_server(target: str) -> tuple[dict, dict]:
    """(pod spec, superlink container) of the rendered federated server."""
    spec = find(_render(target), "Deployment", "iro-fed-server")["spec"]["template"]["spec"]
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


def test_serverapp_steps_run_in_the_fed_server_pod_filesystem():
    if not _unshare_works():  # checked here, not at collection: it starts a process
        pytest.skip("needs `unshare -rm` (user and mount namespaces) to copy the pod's filesystem")
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


# --- the federated server's data -----------------------------------------------------------------

_EVAL_ENV = """
from iro_fed.federated.task import FedConfig, make_site_env
env = make_site_env("edge-iot", FedConfig().eval_site, 0)  # what evaluate_policy builds each round
env.reset(seed=0)
print("evaluation environment built")
"""


def _data_init(spec: dict, data_dir: str) -> dict:
    """The init container that mounts, writable, the volume holding ``data_dir``."""
    mounts = {(c["name"], m["mountPath"]): m for c in spec.get("initContainers", []) for m in c.get("volumeMounts", [])}
    found = [c for c in spec.get("initContainers", []) for m in c.get("volumeMounts", [])
             if not m.get("readOnly") and _under(data_dir, [m["mountPath"]])]
    assert len(found) == 1, f"no init container fills {data_dir}: {sorted(mounts)}"
    return found[0]


@pytest.mark.parametrize("target", TARGETS)
def test_fed_server_data_folder_is_a_mounted_volume(target):
    """IRO_DATA_DIR is set (an installed package has no data beside it) to a mounted volume, which an
    init container fills before the SuperLink starts (or a claim that already holds it)."""
    spec, c = _fed_server(target)
    env = {e["name"]: e.get("value") for e in c.get("env", [])}
    assert env.get("IRO_DATA_DIR"), "the ServerApp's simulator would look for the data beside the package"
    volumes = {v["name"]: v for v in spec["volumes"]}
    (mount,) = [m for m in c["volumeMounts"] if _under(env["IRO_DATA_DIR"], [m["mountPath"]])]
    volume = volumes[mount["name"]]
    assert {"emptyDir", "persistentVolumeClaim"} & set(volume), volume
    if "emptyDir" in volume:
        init = _data_init(spec, env["IRO_DATA_DIR"])
        assert any(m["name"] == mount["name"] for m in init["volumeMounts"])
        assert {e["name"]: e.get("value") for e in init["env"]}["IRO_DATA_DIR"] == env["IRO_DATA_DIR"]


def _run_data_init(init: dict, source: Path, dest: Path) -> subprocess.CompletedProcess:
    """The init container's command as the manifest writes it, this interpreter as its `python`."""
    argv = [*init["command"], *init.get("args", [])]
    assert argv[0] in ("python", "python3"), argv
    env = {**os.environ, **{e["name"]: e["value"] for e in init["env"]},
           "IRO_DATA_SOURCE": str(source), "IRO_DATA_DIR": str(dest)}
    return subprocess.run([sys.executable, *argv[1:]], capture_output=True, text=True, env=env, timeout=120)


def test_fed_server_init_container_fills_the_data_the_evaluation_reads(tmp_path):
    from iro_fed.sim.signals import data_dir

    source = data_dir()
    if not (source / "carbon").is_dir():
        pytest.skip(f"no simulator data at {source} (set IRO_DATA_DIR)")
    spec, c = _fed_server("deploy/base")
    data = {e["name"]: e.get("value") for e in c["env"]}["IRO_DATA_DIR"]
    init = _data_init(spec, data)
    dest = tmp_path / "data"
    done = _run_data_init(init, source, dest)
    assert done.returncode == 0, done.stderr
    # The ServerApp's evaluation environment builds from the copy alone (IRO_DATA_DIR as in the pod).
    env = dict(os.environ, IRO_DATA_DIR=str(dest))
    built = subprocess.run([sys.executable, "-c", _EVAL_ENV], capture_output=True, text=True, env=env, timeout=300)
    assert built.returncode == 0 and "evaluation environment built" in built.stdout, built.stderr
    # An image without the data, or with a broken file, stops the pod at start with the reason.
    done = _run_data_init(init, tmp_path / "missing", tmp_path / "out1")
    assert done.returncode == 1 and f"IRO_DATA_SOURCE: no data folder at {tmp_path / 'missing'}" in done.stderr, done.stderr
    broken = tmp_path / "broken"
    shutil.copytree(source, broken)
    (broken / "latency" / "gcp_latency_matrix.csv").write_text("not,a,matrix\n")
    done = _run_data_init(init, broken, tmp_path / "out2")
    assert done.returncode == 1 and "IRO_DATA_DIR: " in done.stderr and "gcp_latency_matrix.csv line 1" in done.stderr, done.stderr


# --- the scheduler's requests against its RBAC ---------------------------------------------------

_CORE = re.compile(r"^/api/v1/(?:namespaces/(?P<ns>[^/]+)/)?(?P<rest>.+)$")
_GROUP = re.compile(r"^/apis/(?P<group>[^/]+)/[^/]+/(?:namespaces/(?P<ns>[^/]+)/)?(?P<rest>.+)$")
_VERBS = {"POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}


def _attributes(request: dict) -> tuple[str, str, str, str, str | None]:
    """(apiGroup, resource[/subresource], verb, namespace or "", name) of a logged request, as the API
    server's RequestInfoResolver derives them for RBAC."""
    m = _CORE.match(request["path"]) or _GROUP.match(request["path"])
    assert m, request
    group = m.groupdict().get("group") or ""
    resource, name, *sub = m["rest"].split("/") + [None]
    sub = [x for x in sub if x]
    if request["method"] == "GET":
        watch = parse_qs(request["query"]).get("watch", [""])[-1].lower() in ("true", "1")
        verb = "get" if name else "watch" if watch else "list"
    else:
        verb = _VERBS[request["method"]]
    return group, "/".join([resource, *sub]), verb, m["ns"] or "", name


def _bound_grants(docs: list[dict], account: str, namespace: str) -> list[tuple]:
    """Every (role, scope, apiGroup, resource, verb, resourceNames) that the rendered bindings give the
    ServiceAccount ``namespace/account``; scope is a RoleBinding's namespace or "*"."""
    return [(role["metadata"]["name"], scope, g, r, v, tuple(rule.get("resourceNames", [])))
            for role, scope, rule in _bound_rules(docs, account, namespace)
            for g in rule["apiGroups"] for r in rule["resources"] for v in rule["verbs"]]


def _allowing(grants: list[tuple], attrs: tuple) -> set[tuple]:
    """The grants that allow a request's (apiGroup, resource, verb, namespace, name), as RBAC matches them."""
    group, resource, verb, ns, name = attrs
    return {g for g in grants if g[1] in ("*", ns) and g[2:5] == (group, resource, verb) and (not g[5] or name in g[5])}


def test_scheduler_requests_only_what_its_rbac_grants(api, kubeconfig):
    """The real `iro scheduler` with the Deployment's own arguments (the cluster config of the base, a
    free metrics port, a short NodeMetrics period so the feedback loop polls during the test): every
    request it makes is allowed by the rendered roles, and every granted (rule, verb) is used."""
    from iro_fed.k8s.testing import make_node, make_pod

    docs = _render("deploy/base")
    dep = find(docs, "Deployment", "iro-scheduler")
    pod = dep["spec"]["template"]["spec"]
    account, ns = pod["serviceAccountName"], dep["metadata"]["namespace"]
    (c,) = pod["containers"]
    args = []
    for a in c["args"]:
        flag = a.split("=", 1)[0]
        args.append({"--cluster-config": f"--cluster-config={ROOT / 'deploy/base/cluster-config.yaml'}",
                     "--metrics-port": f"--metrics-port={free_port()}",
                     "--metrics-poll-s": "--metrics-poll-s=0.2"}.get(flag, a))
    api.add_node(make_node("n1", cpu="4", memory="8Gi"))
    api.node_metrics["n1"] = {"cpu": "3", "memory": "6Gi"}
    api.add_pod(make_pod("fits", cpu="1", memory="1Gi", scheduler="iro"))
    api.add_pod(make_pod("too-big", cpu="64", memory="1Gi", scheduler="iro"))  # fits nowhere
    proc = subprocess.Popen([sys.executable, "-m", "iro_fed.cli", *args, f"--kubeconfig={kubeconfig}"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=dict(os.environ, PYTHONUNBUFFERED="1"))
    try:
        def seen(verb: str, pattern: str) -> bool:
            return any(_attributes(r)[2] == verb and re.search(pattern, r["path"]) for r in api.requests)

        # Each kind of call once (the watches too), then a clean stop: no waiting on time.
        done = api.wait_for(lambda: proc.poll() is not None or all(seen(v, p) for v, p in [
            ("watch", r"^/api/v1/nodes$"), ("watch", r"^/api/v1/pods$"), ("create", r"/pods/fits/binding$"),
            ("patch", r"/pods/too-big/status$"), ("create", r"/events$"), ("list", r"^/apis/metrics\.k8s\.io/"),
            ("create", r"/leases$")]), timeout=120)
    finally:
        proc.send_signal(signal.SIGTERM)  # a clean stop releases the Lease (get + update)
        out, err = proc.communicate(timeout=60)
    assert done and proc.returncode == 0, err[-3000:]
    requests = api.requests_to(".*", ".*")
    assert any(r["method"] == "PUT" and "/leases/" in r["path"] for r in requests), "the Lease was not released"
    grants = _bound_grants(docs, account, ns)
    used = set()
    for r in requests:
        attrs = _attributes(r)
        allowing = _allowing(grants, attrs)
        assert allowing, f"{r['method']} {r['path']}?{r['query']} ({attrs}) is not allowed by the RBAC of {account}"
        used |= allowing
    assert used == set(grants), f"granted, never requested: {sorted(set(grants) - used)}"


def test_dockerfile_holds_what_the_manifests_run():
    """deploy/Dockerfile (not built here): the extras of every command the pods run, the data where the
    fed server's init container reads it, and the pods' user."""
    import tomllib

    text = (ROOT / "deploy/Dockerfile").read_text()
    extras = set(re.search(r'pip install "\.\[([^\]]+)\]"', text)[1].split(","))
    known = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"])
    # iro scheduler/extender/webhook: k8s; edge-agent: agent; iro fed server's ServerApp: fed, dqn, sim.
    assert {"k8s", "agent", "fed", "dqn", "sim"} <= extras <= known, extras
    spec, _ = _fed_server("deploy/base")
    source = {e["name"]: e.get("value") for c in spec["initContainers"] for e in c.get("env", [])}["IRO_DATA_SOURCE"]
    assert re.search(rf"^COPY --from=data \. {re.escape(source)}$", text, re.M), source
    docs = _render("deploy/base")
    users = {d["spec"]["template"]["spec"]["securityContext"]["runAsUser"] for d in docs if d["kind"] in ("Deployment", "DaemonSet")}
    (user,) = re.findall(r"^USER (\d+)", text, re.M)
    assert users == {int(user)}, users

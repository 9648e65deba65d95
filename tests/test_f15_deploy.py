"""deploy/ beyond tests/k8s/test_deploy.py: every kustomization's paths, the image's files, the webhook's
certificate chain (cert-manager overlay), the edge agents' site per overlay, the federated server's Secret
command, memory limits, the federated server's opt-in NetworkPolicy and the help/README texts that said
one thing twice.
"""

from __future__ import annotations

import argparse
import base64
import functools
import json
import re
import shlex
import shutil
import socket
import ssl
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
DEPLOY = ROOT / "deploy"
# Every kustomize target, the opt-in overlays of this change included (tests/k8s/test_deploy.py lists its own).
TARGETS = ["deploy/base"] + sorted(
    f"deploy/overlays/{p.name}" for p in (DEPLOY / "overlays").iterdir() if (p / "kustomization.yaml").is_file()
)
KUSTOMIZE_V2_FIELDS = {
    "apiVersion",
    "kind",
    "resources",
    "bases",
    "patchesStrategicMerge",
    "patchesJson6902",
    "configMapGenerator",
    "secretGenerator",
    "generatorOptions",
    "images",
    "commonLabels",
    "commonAnnotations",
    "namePrefix",
    "nameSuffix",
    "namespace",
    "vars",
    "crds",
}
DEPRECATION = re.compile(r"^# Warning: '(bases|patchesStrategicMerge|patchesJson6902)' is deprecated\.")
INJECT_FROM = "cert-manager.io/inject-ca-from"
INJECT_FROM_SECRET = "cert-manager.io/inject-ca-from-secret"
PLACEHOLDER = "192.0.2.0/24"


def _kubectl() -> str:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl not installed (Debian package kubernetes-client)")
    return kubectl


@functools.cache
def _render(target: str) -> tuple[dict, ...]:
    out = subprocess.run([_kubectl(), "kustomize", str(ROOT / target)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, f"kubectl kustomize {target}: {out.stderr}"
    unexpected = [line for line in out.stderr.splitlines() if line.strip() and not DEPRECATION.match(line)]
    assert not unexpected, f"kubectl kustomize {target}: {unexpected}"
    return tuple(d for d in yaml.safe_load_all(out.stdout) if d)


def _find(docs, kind: str, name: str) -> dict:
    matches = [d for d in docs if d["kind"] == kind and d["metadata"]["name"].startswith(name)]
    assert matches, f"{kind}/{name} missing"
    return matches[0]


# --- kustomizations and the image ----------------------------------------------------------------


def test_every_kustomization_names_existing_paths_and_only_v2_fields():
    """Every kustomization.yaml under deploy/ (new overlays included): each resource, patch and base exists."""
    found = sorted(DEPLOY.rglob("kustomization.yaml"))
    assert len(found) >= len(TARGETS) + 2  # deploy/, prometheus/
    for path in found:
        here = path.parent
        kust = yaml.safe_load(path.read_text())
        assert set(kust) <= KUSTOMIZE_V2_FIELDS, f"{path}: {sorted(set(kust) - KUSTOMIZE_V2_FIELDS)}"
        for field in ("resources", "patchesStrategicMerge"):
            for entry in kust.get(field, []):
                assert (here / entry).is_file(), f"{path}: {field} {entry!r}"
        for entry in kust.get("bases", []):
            assert (here / entry / "kustomization.yaml").is_file(), f"{path}: bases {entry!r}"
        for patch in kust.get("patchesJson6902", []):
            assert (here / patch["path"]).is_file(), f"{path}: {patch['path']}"
        for gen in kust.get("configMapGenerator", []):
            for entry in gen.get("files", []):
                assert (here / entry.split("=")[-1]).is_file(), f"{path}: configMapGenerator {entry!r}"


def _dockerfile_copied() -> set[str]:
    """Sources of the Dockerfile's COPY lines from the build context (not --from stages/contexts)."""
    copied = set()
    for line in (DEPLOY / "Dockerfile").read_text().splitlines():
        words = line.split()
        if not words or words[0].upper() != "COPY" or any(w.startswith("--from") for w in words):
            continue
        copied |= {w.rstrip("/") for w in words[1:-1] if not w.startswith("--")}
    return copied


def test_dockerfile_copies_every_file_pyproject_names():
    """pyproject's readme and license-files must be in the build context, or setuptools warns and the wheel
    ships without its license."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    named = {project["readme"] if isinstance(project["readme"], str) else project["readme"]["file"]}
    named |= set(project.get("license-files", []))
    assert "LICENSE" in named and all((ROOT / n).is_file() for n in named)
    missing = named - _dockerfile_copied()
    assert not missing, f"deploy/Dockerfile does not COPY {sorted(missing)}"


# --- the webhook's certificate ---------------------------------------------------------------------


@pytest.mark.parametrize("target", TARGETS)
def test_webhook_ca_injection_names_a_source_that_is_rendered(target):
    """An inject-ca-from annotation must name a Certificate of the same render whose Secret the webhook
    mounts and whose DNS names include the Service's; the base ships no Certificate, so no annotation."""
    docs = _render(target)
    hook = _find(docs, "MutatingWebhookConfiguration", "iro-webhook")
    annotations = hook["metadata"].get("annotations", {})
    assert INJECT_FROM_SECRET not in annotations  # the Secret's opt-in annotation is the operator's (README)
    if not target.endswith("/cert-manager"):
        assert INJECT_FROM not in annotations, f"{target}: names a Certificate the render does not have"
        assert not [d for d in docs if d["apiVersion"].startswith("cert-manager.io/")]
        return
    ns, name = annotations[INJECT_FROM].split("/")
    certs = {(d["metadata"]["namespace"], d["metadata"]["name"]): d for d in docs if d["kind"] == "Certificate"}
    issuers = {(d["metadata"]["namespace"], d["metadata"]["name"]): d for d in docs if d["kind"] == "Issuer"}
    cert = certs[(ns, name)]["spec"]
    (webhook,) = hook["webhooks"]
    svc = webhook["clientConfig"]["service"]
    assert {f"{svc['name']}.{svc['namespace']}.svc", f"{svc['name']}.{svc['namespace']}.svc.cluster.local"} == set(
        cert["dnsNames"]
    )
    pod = _find(docs, "Deployment", "iro-webhook")["spec"]["template"]["spec"]
    assert {"secret": {"secretName": cert["secretName"]}, "name": "tls"} in pod["volumes"]
    assert ns == _find(docs, "Deployment", "iro-webhook")["metadata"]["namespace"]
    # The issuer chain resolves within the render: leaf <- CA issuer <- CA certificate <- self-signed issuer.
    ca_issuer = issuers[(ns, cert["issuerRef"]["name"])]["spec"]
    ca_cert = next(
        c["spec"] for (n, _), c in certs.items() if n == ns and c["spec"]["secretName"] == ca_issuer["ca"]["secretName"]
    )
    assert ca_cert["isCA"] is True and "selfSigned" in issuers[(ns, ca_cert["issuerRef"]["name"])]["spec"]
    assert all(
        d["metadata"]["labels"]["app.kubernetes.io/part-of"] == "iro-fed" for d in [*certs.values(), *issuers.values()]
    )


@pytest.mark.parametrize("target", TARGETS)
def test_builtin_objects_validate(target):
    """Every built-in object of every target, the new overlays' included, validates strictly (the
    cert-manager kinds are checked above: the schema has no CRDs)."""
    kv = pytest.importorskip("kubernetes_validate")
    for doc in _render(target):
        if not doc["apiVersion"].startswith("cert-manager.io/"):
            kv.validate(doc, "1.32.0", strict=True)


# --- the edge agents' site -----------------------------------------------------------------------


def _agent_site(docs) -> tuple[str, str | None]:
    """(site the agents run as: IRO_AGENT_SITE over the ConfigMap's `site`, the domain kind they are pinned to)."""
    ds = _find(docs, "DaemonSet", "iro-edge-agent")["spec"]["template"]["spec"]
    (container,) = ds["containers"]
    env = {e["name"]: e for e in container.get("env", [])}
    config = yaml.safe_load(_find(docs, "ConfigMap", "iro-edge-agent")["data"]["edge-agent-config.yaml"])
    site = env["IRO_AGENT_SITE"]["value"] if "IRO_AGENT_SITE" in env else config.get("site", "")
    return site, ds.get("nodeSelector", {}).get("iro-fed.io/domain-kind")


@pytest.mark.parametrize("target", ["deploy/overlays/edge", "deploy/overlays/cloud"])
def test_pinned_agents_run_as_a_site_of_their_nodes_kind(target):
    """Agents pinned to edge (zone) nodes must claim an edge (zone) domain of their problem file, not the
    base's edge-1 on zone nodes."""
    docs = _render(target)
    site, kind = _agent_site(docs)
    problem = yaml.safe_load(_find(docs, "ConfigMap", "iro-edge-agent")["data"]["site-problem.yaml"])
    kinds = {d["name"]: d["kind"] for d in problem["domains"]}
    assert kind is not None and kinds.get(site) == kind, f"{target}: agents on {kind} nodes run as site {site!r}"
    assert any(n["domain"] == site for n in problem["nodes"])


def test_cloud_agents_site_passes_edge_agent_check(monkeypatch, capsys):
    """The agent itself accepts the cloud overlay's IRO_AGENT_SITE with the base's settings and problem."""
    cli = pytest.importorskip("edge_agent.cli")
    site, _ = _agent_site(_render("deploy/overlays/cloud"))
    monkeypatch.setenv("IRO_AGENT_SITE", site)
    assert cli.main(["check", "--config", str(DEPLOY / "base/edge-agent-config.yaml")]) == 0
    assert '"settings_ok": true' in capsys.readouterr().out


# --- the federated server's Secret ----------------------------------------------------------------


def _fed_secret_command() -> list[str]:
    text = (DEPLOY / "README.md").read_text().replace("\\\n", " ")
    (line,) = re.findall(r"kubectl [^\n`]*create secret generic iro-fed-server-tls[^\n`]*", text)
    return shlex.split(line)


def test_readme_fed_server_secret_holds_the_files_certs_writes_under_the_manifest_names(tmp_path):
    """`iro fed certs` writes ca.crt, server.crt, server.key; the README's Secret command maps them onto
    the keys the fed-server Deployment reads (ca.crt, tls.crt, tls.key)."""
    argv = _fed_secret_command()
    assert argv[:3] == ["kubectl", "-n", "iro-system"]
    sources = dict(a.split("=", 2)[1:] for a in argv if a.startswith("--from-file="))
    dep = _find(_render("deploy/base"), "Deployment", "iro-fed-server")["spec"]["template"]["spec"]
    server = next(c for c in dep["containers"] if c["command"] == ["iro"])
    mount = next(m["mountPath"] for m in server["volumeMounts"] if m["name"] == "tls")
    read = {a.split("=", 1)[1] for a in server["args"] if a.startswith("--ssl-")}
    assert {f"{mount}/{k}" for k in sources} == read
    out = tmp_path / "pki"
    done = subprocess.run(
        [
            str(Path(sys.executable).parent / "iro"),
            "fed",
            "certs",
            "--host",
            "iro-fed-server.iro-system",
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    written = {p.name for p in out.iterdir()}
    assert {Path(p).name for p in sources.values()} <= written, (sources, written)
    assert {k: Path(p).name for k, p in sources.items()} == {
        "ca.crt": "ca.crt",
        "tls.crt": "server.crt",
        "tls.key": "server.key",
    }


# --- resources, policies, texts ------------------------------------------------------------------


@pytest.mark.parametrize("target", TARGETS)
def test_every_container_has_a_memory_limit(target):
    for d in _render(target):
        if d["kind"] not in ("Deployment", "DaemonSet"):
            continue
        spec = d["spec"]["template"]["spec"]
        for c in [*spec.get("initContainers", []), *spec["containers"]]:
            assert c.get("resources", {}).get("limits", {}).get("memory"), (d["metadata"]["name"], c["name"])


@pytest.mark.parametrize("target", TARGETS)
def test_replicated_deployments_spread_over_nodes(target):
    # Two replicas on one node go down with it (the scheduler's and the webhook's had no spread).
    for d in _render(target):
        if d["kind"] != "Deployment" or d["spec"].get("replicas", 1) < 2:
            continue
        spec = d["spec"]["template"]["spec"]
        own = d["spec"]["selector"]["matchLabels"]
        spreads = [c for c in spec.get("topologySpreadConstraints", [])
                   if c["topologyKey"] == "kubernetes.io/hostname" and c["labelSelector"]["matchLabels"] == own]
        assert spreads, d["metadata"]["name"]


@pytest.mark.parametrize("target", TARGETS)
def test_the_base_restricts_the_fed_server_port_and_the_overlay_opens_it(target):
    """Whoever reaches the SuperLink's port can start runs (code in the server pod and every agent pod): the base's
    NetworkPolicy iro-fed-server admits only the edge agents' pods; overlays/fed-server-network-policy adds
    iro-fed-server-external for the documented CIDR to edit. The edge variant has no server and no policy."""
    docs = _render(target)
    policies = {d["metadata"]["name"]: d for d in docs if d["kind"] == "NetworkPolicy"
                and d["metadata"]["name"].startswith("iro-fed-server")}
    if target.endswith("overlays/edge"):
        assert policies == {}
        return
    assert set(policies) == ({"iro-fed-server", "iro-fed-server-external"} if target.endswith("fed-server-network-policy")
                             else {"iro-fed-server"})
    dep = _find(docs, "Deployment", "iro-fed-server")["spec"]["template"]
    (server,) = [c for c in dep["spec"]["containers"] if c["command"] == ["iro"]]
    (port,) = [p["containerPort"] for p in server["ports"]]
    assert f"--port={port}" in server["args"]
    agent = _find(docs, "DaemonSet", "iro-edge-agent")
    expected_from = {
        "iro-fed-server": [{
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": agent["metadata"]["namespace"]}},
            "podSelector": {"matchLabels": agent["spec"]["template"]["metadata"]["labels"]},
        }],
        "iro-fed-server-external": [{"ipBlock": {"cidr": PLACEHOLDER}}],
    }
    for name, policy in policies.items():
        spec = policy["spec"]
        assert spec["podSelector"] == {"matchLabels": dep["metadata"]["labels"]}
        assert spec["policyTypes"] == ["Ingress"]
        (rule,) = spec["ingress"]
        assert rule["ports"] == [{"protocol": "TCP", "port": port}]
        assert rule["from"] == expected_from[name]
    if "iro-fed-server-external" in policies:
        text = (ROOT / target / "network-policy.yaml").read_text()
        assert "EDIT" in text and PLACEHOLDER in text


def _paragraphs(text: str) -> list[str]:
    return [p.strip() for p in re.split(r"\n\s*\n", text) if len(p.strip()) > 80]


@pytest.mark.parametrize("readme", ["deploy/README.md", "deploy/federated/README.md"])
def test_readme_says_each_paragraph_once(readme):
    seen: set[str] = set()
    for para in _paragraphs((ROOT / readme).read_text()):
        for sentence in re.split(r"(?<=\.)\s+", para):
            if len(sentence) > 60:
                assert sentence not in seen, f"{readme}: repeated: {sentence[:80]}"
                seen.add(sentence)


def _watch_help(command: str) -> str:
    from iro_fed.cli import build_parser

    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    action = next(a for a in sub.choices[command]._actions if "--watch-timeout-s" in a.option_strings)
    return " ".join(action.help.split())


@pytest.mark.parametrize("command", ["scheduler", "extender", "webhook"])
def test_watch_timeout_help_says_the_documented_range_once(command):
    """docs/kubernetes.md and deploy/README.md: without the flag each watch lasts 60..119 s at random."""
    text = _watch_help(command)
    assert "60..119 s at random" in text
    assert "default 60" not in text and "120" not in text


# --- the README's hand-made webhook certificate ----------------------------------------------------


def _readme_sh_blocks() -> list[str]:
    text = (DEPLOY / "README.md").read_text()
    return [re.sub(r"^ {2}", "", b, flags=re.M) for b in re.findall(r"```sh\n(.*?)```", text, re.S)]


def test_readme_hand_made_webhook_certificate_serves_the_service_name(tmp_path):
    """The README's openssl line gives a certificate the webhook serves and a client that trusts ca.crt (the
    same file) accepts for iro-webhook.iro-system.svc; its caBundle patch puts exactly that PEM in, as JSON."""
    from iro_fed.k8s.webhook import Webhook, WebhookServer

    if shutil.which("openssl") is None:
        pytest.skip("openssl not installed")
    blocks = _readme_sh_blocks()
    (make,) = [b for b in blocks if b.startswith("openssl req")]
    (patch,) = [b for b in blocks if "clientConfig/caBundle" in b]
    openssl = make.split("\nkubectl")[0]  # the openssl command; the kubectl lines need a cluster
    done = subprocess.run(["bash", "-c", openssl], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    crt, key = tmp_path / "tls.crt", tmp_path / "tls.key"
    srv = WebhookServer(Webhook("scheduler-name", "iro"), str(crt), str(key), "127.0.0.1", 0)
    srv.serve_in_thread()
    try:
        # The API server's check: the Service's name against the certificate, ca.crt (= tls.crt) as the CA.
        ctx = ssl.create_default_context(cafile=str(crt))
        raw = socket.create_connection(("127.0.0.1", srv.server_address[1]), timeout=10)
        with ctx.wrap_socket(raw, server_hostname="iro-webhook.iro-system.svc") as tls:
            tls.sendall(b"GET /healthz HTTP/1.1\r\nHost: iro-webhook.iro-system.svc\r\nConnection: close\r\n\r\n")
            assert tls.recv(64).startswith(b"HTTP/1.1 200"), "healthz over the verified connection"
    finally:
        srv.shutdown()
        srv.server_close()
    # The patch command as bash runs it, with kubectl printing its arguments.
    shown = subprocess.run(
        ["bash", "-c", 'kubectl() { printf "%s\\0" "$@"; }\n' + patch],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert shown.returncode == 0, shown.stderr
    argv = shown.stdout.split("\0")[:-1]
    assert argv[:3] == ["patch", "mutatingwebhookconfiguration", "iro-webhook"] and "--type=json" in argv
    (op,) = json.loads(argv[argv.index("-p") + 1])
    assert op["path"] == "/webhooks/0/clientConfig/caBundle" and op["op"] == "add"
    assert base64.b64decode(op["value"], validate=True) == crt.read_bytes()

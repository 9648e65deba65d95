"""The admission webhook against admission.k8s.io/v1 and RFC 6902 as the API server applies them.

The patch is applied with a strict RFC 6902 applier (below; ``jsonpatch`` is not installed): a
missing parent, an array index past the end, ``replace``/``remove`` of a missing member and a
failed ``test`` are errors, as in the API server's evanphx/json-patch. The result is compared
with the whole pod the API server would store.
"""

from __future__ import annotations

import base64
import copy
import http.client
import json
import ssl
from typing import Any

import pytest

from iro_fed.k8s.client import ClusterCache
from iro_fed.k8s.testing import make_node, make_pod
from iro_fed.k8s.webhook import Webhook, WebhookServer, parse_selector
from tests.k8s.helpers import tls_files  # noqa: F401 (the tls fixture)

PREFERRED = "preferredDuringSchedulingIgnoredDuringExecution"
REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"


class PatchError(ValueError):
    pass


def _pointer(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise PatchError(f"{path!r}: a JSON pointer starts with /")
    # RFC 6901: ~1 -> / first, then ~0 -> ~
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def _index(container: list, token: str, *, allow_end: bool) -> int:
    if token == "-" and allow_end:
        return len(container)
    if not token.isdigit() or (token != "0" and token.startswith("0")):
        raise PatchError(f"{token!r} is not an array index")
    i = int(token)
    if i > len(container) or (i == len(container) and not allow_end):
        raise PatchError(f"index {i} out of range (length {len(container)})")
    return i


def _resolve(doc: Any, tokens: list[str]) -> Any:
    for t in tokens:
        if isinstance(doc, dict):
            if t not in doc:
                raise PatchError(f"member {t!r} does not exist")
            doc = doc[t]
        elif isinstance(doc, list):
            doc = doc[_index(doc, t, allow_end=False)]
        else:
            raise PatchError(f"cannot descend into {type(doc).__name__} at {t!r}")
    return doc


def apply_patch(doc: Any, ops: list[dict[str, Any]]) -> Any:
    """RFC 6902 add / remove / replace / test, strictly."""
    doc = copy.deepcopy(doc)
    for op in ops:
        kind, tokens = op["op"], _pointer(op["path"])
        if not tokens:
            if kind in ("add", "replace"):
                doc = copy.deepcopy(op["value"])
                continue
            raise PatchError(f"{kind} of the whole document")
        parent = _resolve(doc, tokens[:-1])
        last = tokens[-1]
        if kind == "test":
            if _resolve(parent, [last]) != op["value"]:
                raise PatchError(f"test failed at {op['path']}")
        elif isinstance(parent, dict):
            if kind == "add":
                parent[last] = copy.deepcopy(op["value"])
            elif kind in ("replace", "remove"):
                if last not in parent:
                    raise PatchError(f"{kind}: {op['path']} does not exist")
                if kind == "replace":
                    parent[last] = copy.deepcopy(op["value"])
                else:
                    del parent[last]
            else:
                raise PatchError(f"unsupported op {kind!r}")
        elif isinstance(parent, list):
            if kind == "add":
                parent.insert(_index(parent, last, allow_end=True), copy.deepcopy(op["value"]))
            elif kind == "replace":
                parent[_index(parent, last, allow_end=False)] = copy.deepcopy(op["value"])
            elif kind == "remove":
                del parent[_index(parent, last, allow_end=False)]
            else:
                raise PatchError(f"unsupported op {kind!r}")
        else:
            raise PatchError(f"parent of {op['path']} is not a container")
    return doc


def test_the_applier_is_strict_and_unescapes_pointers():
    pod = {"metadata": {"labels": {"app.kubernetes.io/name": "web", "a~b": "x"}}, "spec": {"list": [1]}}
    out = apply_patch(pod, [{"op": "test", "path": "/metadata/labels/app.kubernetes.io~1name", "value": "web"},
                            {"op": "replace", "path": "/metadata/labels/a~0b", "value": "y"},
                            {"op": "add", "path": "/spec/list/-", "value": 2},
                            {"op": "add", "path": "/spec/list/0", "value": 0}])
    assert out == {"metadata": {"labels": {"app.kubernetes.io/name": "web", "a~b": "y"}}, "spec": {"list": [0, 1, 2]}}
    for bad in ({"op": "add", "path": "/spec/affinity/nodeAffinity", "value": {}},  # no parent
                {"op": "add", "path": "/spec/list/5", "value": 1},
                {"op": "replace", "path": "/spec/missing", "value": 1},
                {"op": "remove", "path": "/metadata/labels/app.kubernetes.io/name"},  # unescaped: wrong path
                {"op": "test", "path": "/spec/list/0", "value": 9}):
        with pytest.raises(PatchError):
            apply_patch(pod, [bad])


def review(pod: dict, namespace: str = "default", uid: str = "705ab4f5-6393-11e8-b7cc-42010a800002", dry_run: bool = False) -> dict:
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {"uid": uid, "kind": {"group": "", "version": "v1", "kind": "Pod"},
                        "resource": {"group": "", "version": "v1", "resource": "pods"},
                        "requestKind": {"group": "", "version": "v1", "kind": "Pod"},
                        "requestResource": {"group": "", "version": "v1", "resource": "pods"},
                        "name": pod["metadata"].get("name", ""), "namespace": namespace, "operation": "CREATE",
                        "userInfo": {"username": "system:serviceaccount:kube-system:replicaset-controller"},
                        "object": pod, "oldObject": None, "dryRun": dry_run,
                        "options": {"kind": "CreateOptions", "apiVersion": "meta.k8s.io/v1"}}}


def stored(pod: dict, response: dict) -> dict:
    """The pod as the API server stores it after this response."""
    assert response["allowed"] is True
    if "patch" not in response:
        assert "patchType" not in response
        return pod
    assert response["patchType"] == "JSONPatch"
    return apply_patch(pod, json.loads(base64.b64decode(response["patch"], validate=True)))


def labelled_pod(name: str = "web", **kw: Any) -> dict:
    pod = make_pod(name, labels={"app.kubernetes.io/name": "web", "iro-fed.io/schedule": "true"},
                   annotations={"kubectl.kubernetes.io/last-applied-configuration": "{}", "a~b/c": "d"}, **kw)
    return pod


# --- the review over TLS: envelope, uid, dryRun ---------------------------------------------------


def call(srv: WebhookServer, cafile: str, body: dict) -> tuple[int, dict]:
    conn = http.client.HTTPSConnection("localhost", srv.server_address[1], timeout=10,
                                       context=ssl.create_default_context(cafile=cafile))
    conn.request("POST", "/mutate", body=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    resp = conn.getresponse()
    out = json.loads(resp.read())
    conn.close()
    return resp.status, out


def test_scheduler_name_review_echoes_uid_and_patches_only_the_scheduler(tls):
    srv = WebhookServer(Webhook("scheduler-name", "iro"), tls[0], tls[1], "127.0.0.1", 0)
    srv.serve_in_thread()
    try:
        pod = labelled_pod()
        for dry_run in (False, True):  # no side effects: a dry run gets the same answer
            status, out = call(srv, tls[0], review(pod, uid=f"uid-{dry_run}", dry_run=dry_run))
            assert status == 200
            assert set(out) == {"apiVersion", "kind", "response"}
            assert (out["apiVersion"], out["kind"]) == ("admission.k8s.io/v1", "AdmissionReview")
            assert set(out["response"]) == {"uid", "allowed", "patchType", "patch"}
            assert out["response"]["uid"] == f"uid-{dry_run}"
            assert json.loads(base64.b64decode(out["response"]["patch"])) == [
                {"op": "add", "path": "/spec/schedulerName", "value": "iro"}]
            want = copy.deepcopy(pod)
            want["spec"]["schedulerName"] = "iro"
            assert stored(pod, out["response"]) == want  # labels and annotations with / and ~ untouched
    finally:
        srv.shutdown()
        srv.server_close()


def test_a_pod_without_scheduler_name_gets_one_added():
    pod = labelled_pod()
    del pod["spec"]["schedulerName"]  # a webhook before defaulting, or a client that omits it
    out = Webhook("scheduler-name", "iro").review(review(pod))
    assert stored(pod, out["response"])["spec"]["schedulerName"] == "iro"


def test_a_pod_that_chose_another_scheduler_keeps_it():
    """Before the fix a pod asking for e.g. volcano (gang scheduling) was switched to iro."""
    pod = labelled_pod(scheduler="volcano")
    resp = Webhook("scheduler-name", "iro").review(review(pod))["response"]
    assert stored(pod, resp) == pod
    assert "volcano" in resp["warnings"][0]
    # the default and our own name are not a choice to keep
    for name in ("default-scheduler", "iro"):
        p = labelled_pod(scheduler=name)
        assert stored(p, Webhook("scheduler-name", "iro").review(review(p))["response"])["spec"]["schedulerName"] == "iro"


def test_a_non_string_scheduler_name_is_named_and_the_pod_admitted():
    pod = labelled_pod()
    pod["spec"]["schedulerName"] = ["iro"]
    resp = Webhook("scheduler-name", "iro").review(review(pod))["response"]
    assert resp["allowed"] is True and "patch" not in resp
    assert "request.object.spec.schedulerName" in resp["warnings"][0]


# --- affinity mode: the patch against every shape of an existing affinity ------------------------


@pytest.fixture
def one_node_cache(api, kube):
    api.add_node(make_node("n1", cpu="8"))
    cache = ClusterCache(kube, watch_timeout_s=5).start()
    assert cache.wait_synced(10) and cache.wait_fresh(10)
    yield cache
    cache.stop()


OURS = {"weight": 100, "preference": {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}}
THEIRS = {"weight": 5, "preference": {"matchExpressions": [{"key": "disk", "operator": "In", "values": ["ssd"]}]}}
ANTI = {"podAntiAffinity": {PREFERRED: [{"weight": 1, "podAffinityTerm": {
    "labelSelector": {"matchLabels": {"app.kubernetes.io/name": "web"}}, "topologyKey": "kubernetes.io/hostname"}}]}}
ON_N1 = {"nodeSelectorTerms": [{"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": ["n1"]}]}]}


@pytest.mark.parametrize(
    ("affinity", "expected"),
    [
        (None, {"nodeAffinity": {PREFERRED: [OURS]}}),
        ({}, {"nodeAffinity": {PREFERRED: [OURS]}}),
        ({"nodeAffinity": None}, {"nodeAffinity": {PREFERRED: [OURS]}}),
        (ANTI, {**ANTI, "nodeAffinity": {PREFERRED: [OURS]}}),
        ({"nodeAffinity": {}}, {"nodeAffinity": {PREFERRED: [OURS]}}),
        ({"nodeAffinity": {REQUIRED: ON_N1}}, {"nodeAffinity": {REQUIRED: ON_N1, PREFERRED: [OURS]}}),
        ({"nodeAffinity": {PREFERRED: []}}, {"nodeAffinity": {PREFERRED: [OURS]}}),
        ({"nodeAffinity": {PREFERRED: None}}, {"nodeAffinity": {PREFERRED: [OURS]}}),
        ({**ANTI, "nodeAffinity": {REQUIRED: ON_N1, PREFERRED: [THEIRS]}},
         {**ANTI, "nodeAffinity": {REQUIRED: ON_N1, PREFERRED: [THEIRS, OURS]}}),
    ],
    ids=["none", "empty", "null-node-affinity", "pod-anti-affinity", "empty-node-affinity", "required-only",
         "empty-preferred", "null-preferred", "everything"],
)
def test_affinity_patch_applies_strictly_and_keeps_what_the_pod_had(one_node_cache, affinity, expected):
    pod = labelled_pod("job", cpu="1")
    if affinity is not None:
        pod["spec"]["affinity"] = copy.deepcopy(affinity)
    resp = Webhook("affinity", cache=one_node_cache, solver="best-fit").review(review(pod))["response"]
    want = copy.deepcopy(pod)
    want["spec"]["affinity"] = expected
    assert stored(pod, resp) == want


def test_a_reinvocation_does_not_add_the_same_preference_twice(api, kube):
    """reinvocationPolicy: IfNeeded calls the webhook again with the pod it already patched (after
    another webhook changed it). Before the fix each call appended the terms again, doubling the
    weight of the recommended nodes."""
    for name, cpu in (("snug", "2"), ("mid", "4")):
        api.add_node(make_node(name, cpu=cpu))
    cache = ClusterCache(kube, watch_timeout_s=5).start()
    try:
        assert cache.wait_synced(10) and cache.wait_fresh(10)
        hook = Webhook("affinity", cache=cache, solver="best-fit", top_k=2)
        pod = labelled_pod("job", cpu="1500m", affinity={"nodeAffinity": {PREFERRED: [THEIRS]}})
        once = stored(pod, hook.review(review(pod))["response"])
        terms = once["spec"]["affinity"]["nodeAffinity"][PREFERRED]
        assert [(t["weight"], t["preference"].get("matchFields", [{}])[0].get("values")) for t in terms] == [
            (5, None), (100, ["snug"]), (1, ["mid"])]
        again = hook.review(review(once))["response"]
        assert "patch" not in again and stored(once, again) == once
        # a pod that prefers one of them already (same term, its own weight) gets only the other
        mine = {"weight": 7, "preference": {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["mid"]}]}}
        pod2 = labelled_pod("job2", cpu="1500m", affinity={"nodeAffinity": {PREFERRED: [mine]}})
        out = stored(pod2, hook.review(review(pod2))["response"])
        assert out["spec"]["affinity"]["nodeAffinity"][PREFERRED] == [mine, {"weight": 100, "preference": {
            "matchFields": [{"key": "metadata.name", "operator": "In", "values": ["snug"]}]}}]
    finally:
        cache.stop()


# --- selection -----------------------------------------------------------------------------------


def test_selection_by_labels_with_prefixed_keys_or_by_namespace():
    hook = Webhook("scheduler-name", "iro", selector=parse_selector("iro-fed.io/schedule=true"), namespaces=["edge"])
    selected = labelled_pod()
    assert stored(selected, hook.review(review(selected))["response"])["spec"]["schedulerName"] == "iro"
    other = make_pod("plain", labels={"iro-fed.io/schedule": "false"})
    assert hook.review(review(other))["response"] == {"uid": review(other)["request"]["uid"], "allowed": True}
    # the request's namespace decides (a generateName pod's object may not carry one)
    in_edge = make_pod("x", namespace="edge")
    del in_edge["metadata"]["namespace"]
    assert stored(in_edge, hook.review(review(in_edge, namespace="edge"))["response"])["spec"]["schedulerName"] == "iro"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", {}),
        ("app=web", {"app": "web"}),
        ("app==web", {"app": "web"}),  # kubectl's equality; before the fix: {"app": "=web"}
        (" iro-fed.io/schedule = true , tier=", {"iro-fed.io/schedule": "true", "tier": ""}),
        ("a=b,a=b", {"a": "b"}),
    ],
)
def test_selectors_kubectl_writes_parse_to_match_labels(text, expected):
    assert parse_selector(text) == expected


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("app!=web", "not !="),  # before the fix: {"app!": "web"}, silently never matching
        ("app in (a,b)", "expected key=value"),
        ("app", "expected key=value"),
        ("=web", "expected key=value"),
        ("app=we b", "label value 'we b'"),
        ("app=-web", "label value '-web'"),
        ("Iro.io/x=1", "prefix must be a DNS subdomain"),
        ("/x=1", "prefix must be a DNS subdomain"),
        ("a/b/c=1", "prefix must be a DNS subdomain"),
        ("x" * 64 + "=1", "the name must be 1-63"),
        ("a=1,a=2", "given twice"),
    ],
)
def test_selectors_that_would_never_match_are_refused_naming_the_part(text, fragment):
    with pytest.raises(ValueError) as err:
        parse_selector(text)
    assert fragment in str(err.value)

"""The mutating admission webhook over real TLS (self-signed certificate from ``cryptography``)."""

from __future__ import annotations

import base64
import copy
import functools
import http.client
import json
import ssl
import threading
import uuid
from pathlib import Path

import pytest

from iro_fed.k8s.client import ClusterCache
from iro_fed.k8s.testing import json_patch, make_node, make_pod, self_signed_cert
from iro_fed.k8s.webhook import Webhook, WebhookServer
from tests.k8s.helpers import serving

pytest.importorskip("cryptography")


@pytest.fixture(scope="module")
def tls(tmp_path_factory) -> tuple[str, str]:
    cert, key = self_signed_cert(tmp_path_factory.mktemp("tls"), ("localhost", "iro-webhook.iro-system.svc"))
    return str(cert), str(key)


@pytest.fixture
def serve(tls):
    yield from serving(lambda hook: WebhookServer(hook, tls[0], tls[1], "127.0.0.1", 0))


@functools.lru_cache(maxsize=4)
def _context(cafile: str) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=cafile)


def call(srv: WebhookServer, cafile: str, body, path: str = "/mutate") -> tuple[int, dict]:
    """POST over TLS, verifying the server certificate against the CA (as the API server does with caBundle)."""
    ctx = _context(cafile)
    conn = http.client.HTTPSConnection("localhost", srv.server_address[1], context=ctx, timeout=10)
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    conn.request("POST", path, body=data, headers={"Content-Type": "application/json"})
    resp = conn.getresponse()
    out = json.loads(resp.read())
    conn.close()
    return resp.status, out


def review(pod: dict, namespace: str = "default", operation: str = "CREATE", kind: str = "Pod") -> dict:
    return {
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {"uid": str(uuid.uuid4()), "kind": {"group": "", "version": "v1", "kind": kind},
                    "resource": {"group": "", "version": "v1", "resource": "pods"}, "operation": operation,
                    "namespace": namespace, "object": pod, "dryRun": False, "userInfo": {"username": "test"}},
    }


def patched(pod: dict, response: dict) -> dict:
    assert response["patchType"] == "JSONPatch"
    ops = json.loads(base64.b64decode(response["patch"]))
    return json_patch(copy.deepcopy(pod), ops)


def test_scheduler_name_mode_sets_the_scheduler_of_selected_pods(serve, tls):
    srv = serve(Webhook("scheduler-name", "iro", selector={"iro-fed.io/schedule": "true"}, namespaces=["edge-apps"]))
    pod = make_pod("web", labels={"iro-fed.io/schedule": "true"})
    req = review(pod)
    status, out = call(srv, tls[0], req)
    assert status == 200
    assert out["apiVersion"] == "admission.k8s.io/v1" and out["kind"] == "AdmissionReview"
    resp = out["response"]
    assert resp["uid"] == req["request"]["uid"] and resp["allowed"] is True
    assert patched(pod, resp)["spec"]["schedulerName"] == "iro"
    # selected by namespace
    _, out = call(srv, tls[0], review(make_pod("x", namespace="edge-apps"), namespace="edge-apps"))
    assert patched(make_pod("x"), out["response"])["spec"]["schedulerName"] == "iro"
    # not selected, already ours, not a pod CREATE: allowed unchanged
    for req in (review(make_pod("plain")), review(make_pod("mine", scheduler="iro", labels={"iro-fed.io/schedule": "true"})),
                review(make_pod("u", labels={"iro-fed.io/schedule": "true"}), operation="UPDATE"),
                review({"metadata": {"name": "cm"}}, kind="ConfigMap")):
        status, out = call(srv, tls[0], req)
        assert status == 200 and out["response"] == {"uid": req["request"]["uid"], "allowed": True}


def test_affinity_mode_prefers_the_solvers_top_k_nodes(serve, tls, api, kube):
    for name, cpu in (("big", "16"), ("snug", "2"), ("mid", "4"), ("tiny", "1")):
        api.add_node(make_node(name, cpu=cpu, memory="16Gi"))
    cache = ClusterCache(kube, watch_timeout_s=5).start()
    try:
        assert cache.wait_synced(10)
        srv = serve(Webhook("affinity", cache=cache, solver="best-fit", top_k=2))
        pod = make_pod("job", cpu="1500m", memory="1Gi")
        pod["metadata"].pop("name")
        pod["metadata"]["generateName"] = "job-"
        _, out = call(srv, tls[0], review(pod))
        terms = patched(pod, out["response"])["spec"]["affinity"]["nodeAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
        prefs = [(t["preference"]["matchFields"][0]["values"][0], t["weight"]) for t in terms]
        assert prefs == [("snug", 100), ("mid", 1)]  # best-fit's top 2; "tiny" cannot run it
        assert all(t["preference"]["matchFields"][0] == {"key": "metadata.name", "operator": "In", "values": [n]} for t, (n, _) in zip(terms, prefs, strict=True))
        # existing preferred terms are kept and ours appended
        pod2 = make_pod("job2", cpu="1500m", affinity={"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": 5, "preference": {"matchExpressions": [{"key": "disk", "operator": "In", "values": ["ssd"]}]}}]}})
        _, out = call(srv, tls[0], review(pod2))
        terms = patched(pod2, out["response"])["spec"]["affinity"]["nodeAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
        assert [t["weight"] for t in terms] == [5, 100, 1]
        # a pod no node can run is admitted unchanged, with a warning
        _, out = call(srv, tls[0], review(make_pod("whale", cpu="64")))
        assert "patch" not in out["response"] and "no node can run" in out["response"]["warnings"][0]
    finally:
        cache.stop()


@pytest.fixture
def affinity_cache(api, kube):
    """A synced cluster cache of four nodes for affinity mode."""
    for name, cpu in (("big", "16"), ("snug", "2"), ("mid", "4"), ("tiny", "1")):
        api.add_node(make_node(name, cpu=cpu, memory="16Gi"))
    cache = ClusterCache(kube, watch_timeout_s=5).start()
    try:
        assert cache.wait_synced(10)
        yield cache
    finally:
        cache.stop()


def test_affinity_patch_on_a_pod_with_terms_is_exact_and_the_request_is_not_changed(serve, tls, affinity_cache):
    srv = serve(Webhook("affinity", cache=affinity_cache, solver="best-fit", top_k=2))
    theirs = {"weight": 5, "preference": {"matchExpressions": [{"key": "disk", "operator": "In", "values": ["ssd"]}]}}
    pod = make_pod("job", cpu="1500m", affinity={
        "nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [theirs]},
        "podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": []}})
    pod["metadata"].pop("name")
    pod["metadata"]["generateName"] = "job-"
    pod["metadata"].pop("namespace", None)
    before = copy.deepcopy(pod)
    hook = srv.webhook
    req = review(pod)
    out = hook.review(req)["response"]
    ours = [{"weight": w, "preference": {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [n]}]}}
            for n, w in (("snug", 100), ("mid", 1))]
    # Appended one by one to the pod's own list; nothing else of the pod touched.
    assert json.loads(base64.b64decode(out["patch"])) == [
        {"op": "add", "path": "/spec/affinity/nodeAffinity/preferredDuringSchedulingIgnoredDuringExecution/-", "value": t}
        for t in ours]
    # The recommendation names the pod (generateName, the review's namespace) on a copy: the
    # request's object is as it came.
    assert req["request"]["object"] == before
    _, served = call(srv, tls[0], review(pod))
    assert served["response"]["patch"] == out["patch"]


def test_recommend_does_not_copy_what_it_does_not_change(affinity_cache):
    """A deep copy of the whole request object ran in the pool, outside the parse budget and past
    budget_s: a large field the webhook never reads cost a copy of every object in it."""
    import tracemalloc

    hook = Webhook("affinity", cache=affinity_cache, solver="best-fit", top_k=2)
    small = make_pod("job", cpu="1500m")
    large = copy.deepcopy(small)
    large["example.com/unknown"] = [{"k": i} for i in range(100_000)]  # ~20 MB copied, as read
    large["spec"]["example.com/unknown"] = [{"k": i} for i in range(100_000)]
    assert hook.recommend(small, "default") == [("snug", 1.0), ("mid", 0.0)]  # the cluster's model is built once

    def peak(pod: dict) -> tuple[list, int]:
        started = not tracemalloc.is_tracing()
        if started:
            tracemalloc.start()
        try:
            tracemalloc.reset_peak()
            base = tracemalloc.get_traced_memory()[0]
            out = hook.recommend(pod, "default")
            return out, tracemalloc.get_traced_memory()[1] - base
        finally:
            if started:
                tracemalloc.stop()

    small_out, small_peak = peak(small)
    large_out, large_peak = peak(large)
    assert large_out == small_out
    assert large_peak - small_peak < 2 << 20, (small_peak, large_peak)  # was ~40 MB more
    assert large["example.com/unknown"][0] == {"k": 0} and "name" in large["metadata"]
    hook.close()


def test_a_late_recommendation_admits_the_pod_unchanged_within_the_budget(serve, tls):
    release = threading.Event()
    hook = Webhook("affinity", budget_s=0.2)

    def slow(pod, namespace):
        release.wait(10)
        return [("n1", 1.0)]

    hook.recommend = slow
    srv = serve(hook)
    try:
        status, out = call(srv, tls[0], review(make_pod("p")))
    finally:
        release.set()
    assert status == 200 and out["response"]["allowed"] is True and "patch" not in out["response"]
    assert "within 0.2 s" in out["response"]["warnings"][0]


def test_internal_errors_admit_unchanged_with_a_warning(serve, tls):
    hook = Webhook("scheduler-name")

    def boom(pod):
        raise KeyError("spec")

    hook.scheduler_patch = boom
    srv = serve(hook)
    status, out = call(srv, tls[0], review(make_pod("p")))
    assert status == 200 and out["response"]["allowed"] is True
    assert "internal error" in out["response"]["warnings"][0]
    # affinity mode without a cluster view says so instead of failing the pod
    srv2 = serve(Webhook("affinity"))
    _, out = call(srv2, tls[0], review(make_pod("p")))
    assert "needs a cluster view" in out["response"]["warnings"][0]


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        (b"{oops", "not valid JSON"),
        (json.dumps([1]).encode(), "expected an AdmissionReview"),
        (json.dumps({"kind": "Pod"}).encode(), "kind: expected AdmissionReview"),
        (json.dumps({"kind": "AdmissionReview", "apiVersion": "admission.k8s.io/v1beta1", "request": {"uid": "1"}}).encode(), "apiVersion"),
        (json.dumps({"kind": "AdmissionReview", "apiVersion": "admission.k8s.io/v1", "request": {}}).encode(), "request.uid"),
    ],
)
def test_malformed_reviews_get_400(serve, tls, body, fragment):
    srv = serve(Webhook())
    status, out = call(srv, tls[0], body)
    assert status == 400 and fragment in out["message"]


def test_https_only(serve, tls):
    srv = serve(Webhook())
    conn = http.client.HTTPConnection("127.0.0.1", srv.server_address[1], timeout=5)
    with pytest.raises((ConnectionError, http.client.HTTPException, OSError)):
        conn.request("POST", "/mutate", body=b"{}")
        conn.getresponse()
    conn.close()
    assert call(srv, tls[0], review(make_pod("p")))[0] == 200  # still serving


def test_fuzzed_reviews_never_crash(serve, tls):
    hypothesis = pytest.importorskip("hypothesis")
    st = hypothesis.strategies
    srv = serve(Webhook("scheduler-name"))
    values = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=6),
                          lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
                          max_leaves=12)
    reviews = st.fixed_dictionaries({
        "apiVersion": st.just("admission.k8s.io/v1"), "kind": st.just("AdmissionReview"),
        "request": st.fixed_dictionaries({"uid": st.text(min_size=1, max_size=6), "kind": st.just({"kind": "Pod"}),
                                          "operation": st.just("CREATE"), "object": values, "namespace": values}),
    })

    @hypothesis.settings(max_examples=30, deadline=None, derandomize=True)
    @hypothesis.given(body=st.one_of(st.binary(max_size=40), values.map(lambda v: json.dumps(v).encode()),
                                     reviews.map(lambda v: json.dumps(v).encode())))
    def check(body):
        status, out = call(srv, tls[0], body)
        assert status in (200, 400)
        if status == 200:
            assert out["response"]["allowed"] is True

    check()


def test_bad_settings_are_rejected(tls):
    with pytest.raises(ValueError, match="mode"):
        Webhook("magic")
    with pytest.raises(ValueError, match="top_k"):
        Webhook("affinity", top_k=0)
    with pytest.raises(FileNotFoundError):
        WebhookServer(Webhook(), str(Path(tls[0]).with_name("missing.crt")), tls[1], "127.0.0.1", 0)

"""kube-default scores PodTopologySpread and InterPodAffinity from a Kubernetes snapshot
(``Problem.pod_scoring``), as kube-scheduler does; build_snapshot widens resources for its pods."""

from __future__ import annotations

import json
import math
import random
from decimal import ROUND_HALF_UP, Decimal

import numpy as np
import pytest

import solvers
from iro_fed.k8s.snapshot import ClusterModel, assignment_names, build_snapshot
from iro_fed.model import ClusterState
from iro_fed.problem_io import ProblemValidationError, problem_from_dict, problem_to_dict

HOST = "kubernetes.io/hostname"
ZONE = "topology.kubernetes.io/zone"
MIB = 1024 * 1024


def node(name, cpu, mem="64Gi", labels=None, pods="110", extra=None):
    alloc = {"cpu": cpu, "memory": mem, "pods": pods, **(extra or {})}
    return {"metadata": {"name": name, "labels": {HOST: name, **(labels or {})}}, "spec": {},
            "status": {"allocatable": alloc, "capacity": alloc}}


def pod(name, cpu="1", mem="1Gi", node_name=None, labels=None, affinity=None, owner=None, spread=None, selector=None,
        ns="default", containers=None):
    spec = {"containers": containers or [{"name": "c", "resources": {"requests": {"cpu": cpu, "memory": mem}}}]}
    if node_name:
        spec["nodeName"] = node_name
    if affinity:
        spec["affinity"] = affinity
    if spread:
        spec["topologySpreadConstraints"] = spread
    if selector:
        spec["nodeSelector"] = selector
    meta = {"name": name, "namespace": ns, "labels": labels or {}, "uid": name}
    if owner:
        meta["ownerReferences"] = [{"kind": "ReplicaSet", "name": owner, "uid": owner, "controller": True, "apiVersion": "apps/v1"}]
    return {"metadata": meta, "spec": spec, "status": {"phase": "Running" if node_name else "Pending"}}


def weighted(kind, weight, match, key=HOST):
    return {kind: {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": weight, "podAffinityTerm": {"labelSelector": {"matchLabels": match}, "topologyKey": key}}]}}


def solve(snap, seed=1):
    return assignment_names(snap, solvers.make("kube-default", seed=seed).solve(snap.problem).assignment)


# --- the auditor's cases (s1.py, s3.py) --------------------------------------------------------


def test_preferred_anti_affinity_avoids_the_node_of_the_matching_pod():
    # big -100 -> normalized 0, small 0 -> 100, times weight 2: outweighs big's emptier resources
    nodes = [node("big", "64"), node("small", "8")]
    bound = [pod("web-0", node_name="big", labels={"app": "web"})]
    pending = [pod("web-1", labels={"app": "web"}, affinity=weighted("podAntiAffinity", 100, {"app": "web"}))]
    snap = build_snapshot(nodes, bound, pending)
    assert solve(snap) == {"default/web-1": "small"}  # was big: the plugin was left out


def test_an_existing_pods_preferred_anti_affinity_repels_the_incoming_pod():
    # the symmetric part: web-0's own term scores web-1, which has none
    nodes = [node("big", "64"), node("small", "8")]
    bound = [pod("web-0", node_name="big", labels={"app": "web"}, affinity=weighted("podAntiAffinity", 100, {"app": "web"}))]
    snap = build_snapshot(nodes, bound, [pod("web-1", labels={"app": "web"})])
    assert solve(snap) == {"default/web-1": "small"}


def test_schedule_anyway_spread_prefers_the_emptier_domain():
    nodes = [node("big", "64"), node("small", "8")]
    sp = [{"maxSkew": 1, "topologyKey": HOST, "whenUnsatisfiable": "ScheduleAnyway", "labelSelector": {"matchLabels": {"app": "web"}}}]
    bound = [pod("web-0", node_name="big", labels={"app": "web"})]
    snap = build_snapshot(nodes, bound, [pod("web-1", labels={"app": "web"}, spread=sp)])
    assert solve(snap) == {"default/web-1": "small"}


def test_replicas_of_a_controller_spread_by_the_system_defaults_within_one_batch():
    # hostname maxSkew 3: each replica placed counts for the next (kube assumes it before the next cycle)
    nodes = [node("big", "64"), node("small", "8")]
    pending = [pod(f"api-{i}", labels={"app": "api"}, owner="api-rs") for i in range(4)]
    got = solve(build_snapshot(nodes, [], pending))
    assert sorted(got.values()) == ["big", "big", "small", "small"]  # was 4 x big
    # a bare pod (no controller) is not spread by the defaults
    bare = [pod(f"b-{i}", labels={"app": "api"}) for i in range(4)]
    assert set(solve(build_snapshot(nodes, [], bare)).values()) == {"big"}


def test_a_problem_without_pod_terms_has_no_pod_scoring():
    snap = build_snapshot([node("a", "4"), node("b", "8")], [], [pod("p")])
    assert snap.problem.pod_scoring is None
    assert "pod_scoring" not in problem_to_dict(snap.problem)


# --- build_snapshot widens the resources for its pending pods (s3b.py, s3c.py) --------------


def test_build_snapshot_counts_pod_slots_of_a_full_node():
    nodes = [node("n1", "64", pods="2"), node("n2", "4")]
    bound = [pod("b1", "100m", "10Mi", node_name="n1"), pod("b2", "100m", "10Mi", node_name="n1")]
    snap = build_snapshot(nodes, bound, [pod("p", "100m", "10Mi")])
    assert "pods" in snap.problem.resources
    assert solve(snap) == {"default/p": "n2"}  # was n1: "Too many pods" was not checked


def test_build_snapshot_checks_an_extended_resource_the_config_does_not_list():
    nodes = [node("n1", "64"), node("n2", "4", extra={"example.com/fpga": "1"})]
    fpga = pod("p", containers=[{"name": "c", "resources": {"requests": {"cpu": "100m", "example.com/fpga": "1"}}}])
    snap = build_snapshot(nodes, [], [fpga])
    assert snap.problem.feasibility_only == ("example.com/fpga",)
    assert solve(snap) == {"default/p": "n2"}  # was n1, which has no FPGA


# --- a snapshot written as a problem file scores the same -------------------------------------


def _mixed_cluster():
    nodes = [node(f"n{i}", str(4 + 4 * i), labels={ZONE: f"z{i % 2}"} if i != 3 else {}) for i in range(5)]
    bound = [pod("w0", node_name="n4", labels={"app": "web"}, owner="web-rs"),
             pod("d0", node_name="n2", labels={"app": "db"}, affinity=weighted("podAffinity", 30, {"app": "web"}, ZONE)),
             pod("x0", node_name="n0", labels={"app": "x"}, affinity={"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                 {"labelSelector": {"matchLabels": {"app": "web"}}, "topologyKey": HOST}]}})]
    sp = [{"maxSkew": 2, "topologyKey": ZONE, "whenUnsatisfiable": "ScheduleAnyway", "labelSelector": {"matchLabels": {"app": "db"}}}]
    pending = [pod(f"w{i}", labels={"app": "web"}, owner="web-rs") for i in range(1, 4)]
    pending += [pod("d1", labels={"app": "db"}, spread=sp, affinity=weighted("podAntiAffinity", 60, {"app": "db"}))]
    return nodes, bound, pending


def test_problem_file_round_trip_scores_the_same(tmp_path):
    snap = build_snapshot(*_mixed_cluster())
    p = snap.problem
    assert p.pod_scoring is not None
    doc = json.loads(json.dumps(problem_to_dict(p)))
    again = problem_from_dict(doc)
    assert problem_to_dict(again) == doc
    for seed in range(5):
        a = solvers.make("kube-default", seed=seed).solve(p).assignment
        b = solvers.make("kube-default", seed=seed).solve(again).assignment
        assert np.array_equal(a, b)
    # and every plugin's scores, pod by pod
    sa, sb = solvers.make("kube-default", seed=1), solvers.make("kube-default", seed=1)
    sa.reset(p)
    sb.reset(again)
    st_a, st_b = ClusterState(p), ClusterState(again)
    for w in range(p.num_workloads):
        cand = sa.candidates(st_a, w)
        assert np.array_equal(cand, sb.candidates(st_b, w))
        ka, kb = sa.plugin_scores(st_a, w, cand), sb.plugin_scores(st_b, w, cand)
        assert {k: v.tolist() for k, v in ka.items()} == {k: v.tolist() for k, v in kb.items()}
        st_a.place(w, int(cand[0]))
        st_b.place(w, int(cand[0]))


def test_with_workloads_keeps_each_pods_terms():
    p = build_snapshot(*_mixed_cluster()).problem
    sub = p.with_workloads([3, 0])
    assert sub.pod_scoring.terms == (p.pod_scoring.terms[3], p.pod_scoring.terms[0])
    assert np.array_equal(sub.pod_scoring.members, p.pod_scoring.members[:, [3, 0]])
    assert p.replace(nodes=list(p.nodes)).pod_scoring is None  # other nodes: not this data


def _doc():
    return {"resources": ["cpu", "memory"], "domains": [{"name": "d"}],
            "nodes": [{"name": n, "domain": "d", "capacity": {"cpu": 8000, "memory": 8192}} for n in ("a", "b")],
            "workloads": [{"name": "p", "requests": {"cpu": 100, "memory": 100}}]}


@pytest.mark.parametrize(("change", "path", "text"), [
    (lambda d: d["workloads"][0].update(soft_pod_terms=[{"kind": "spread", "group": "g", "topology": "t", "max_skew": 1}]),
     "workloads[0].soft_pod_terms", "needs the top-level pod_scoring"),
    (lambda d: d["workloads"][0].update(soft_pod_terms=[{"kind": "spread", "group": "nope", "topology": "t", "max_skew": 1}]),
     "workloads[0].soft_pod_terms[0].group", "unknown group 'nope'"),
    (lambda d: d["workloads"][0].update(soft_pod_terms=[{"kind": "affinity", "group": "g", "topology": "t", "weight": 101}]),
     "workloads[0].soft_pod_terms[0].weight", "must be 1..100"),
    (lambda d: d["workloads"][0].update(soft_pod_terms=[{"kind": "spread", "group": "g", "topology": "t", "weight": 3}]),
     "workloads[0].soft_pod_terms[0].weight", "not for kind spread"),
    (lambda d: d["workloads"][0].update(soft_pod_terms=[{"kind": "near", "group": "g", "topology": "t", "weight": 3}]),
     "workloads[0].soft_pod_terms[0].kind", "must be one of"),
    (lambda d: d["workloads"][0].update(pod_groups=["g", "g"]), "workloads[0].pod_groups[1]", "repeated"),
    (lambda d: d["pod_scoring"]["topologies"][0]["domains"].update(c=1), "pod_scoring.topologies[0].domains.c", "unknown node"),
    (lambda d: d["pod_scoring"]["groups"][0]["counts"].update(a=-1), "pod_scoring.groups[0].counts.a", "expected an integer"),
    (lambda d: d["pod_scoring"]["groups"].append({"name": "g"}), "pod_scoring.groups[1].name", "duplicate name"),
])
def test_pod_scoring_errors_name_the_field(change, path, text):
    doc = _doc()
    if "soft_pod_terms" not in text and path != "workloads[0].soft_pod_terms":
        doc["pod_scoring"] = {"topologies": [{"name": "t", "key": HOST, "domains": {"a": 0, "b": 1}}],
                              "groups": [{"name": "g", "counts": {"a": 2}}]}
    change(doc)
    with pytest.raises(ProblemValidationError) as exc:
        problem_from_dict(doc)
    assert any(p == path and text in m for p, m in exc.value.errors), exc.value.errors


def test_a_hand_written_pod_scoring_scores():
    doc = _doc()
    doc["pod_scoring"] = {"topologies": [{"name": "host", "key": HOST, "domains": {"a": 0, "b": 1}}],
                          "groups": [{"name": "web", "counts": {"a": 3}}]}
    doc["workloads"][0]["soft_pod_terms"] = [{"kind": "anti_affinity", "group": "web", "topology": "host", "weight": 50}]
    s = solvers.make("kube-default", seed=1)
    p = problem_from_dict(doc)
    s.reset(p)
    scores = s.plugin_scores(ClusterState(p), 0, np.array([0, 1]))
    assert scores["InterPodAffinity"].tolist() == [0, 100]


# --- a randomized differential test against kube-scheduler's two plugins ---------------------


def _labels(obj):
    return obj["metadata"].get("labels") or {}


def _term_matches(term, ns_of_holder, pod_):
    namespaces = term.get("namespaces") or [ns_of_holder]
    if pod_["metadata"]["namespace"] not in namespaces:
        return False
    want = term["labelSelector"].get("matchLabels", {})
    return all(_labels(pod_).get(k) == v for k, v in want.items())


def _owner(p):
    refs = p["metadata"].get("ownerReferences") or []
    return refs[0]["uid"] if refs else None


def _go_round(x):
    return int(Decimal(repr(x)).quantize(Decimal(1), rounding=ROUND_HALF_UP))


def _untolerated(taints, p):
    """v1helper.FindMatchingUntoleratedTaint with DoNotScheduleTaintsFilterFunc (NoSchedule, NoExecute)."""
    def tolerates(tol, t):
        if tol.get("effect") and tol["effect"] != t["effect"]:
            return False
        if tol.get("key") and tol["key"] != t["key"]:
            return False
        return tol.get("operator") == "Exists" or tol.get("value", "") == t.get("value", "")
    return any(t["effect"] in ("NoSchedule", "NoExecute") and not any(tolerates(tol, t) for tol in p["spec"].get("tolerations") or [])
               for t in taints)


def ref_spread(p, nodes, placed, filtered):
    """podtopologyspread/scoring.go (PreScore, Score, NormalizeScore), transcribed on the objects."""
    explicit = p["spec"].get("topologySpreadConstraints") or []
    if explicit:
        def selects(q, c):  # the labelSelector and matchLabelKeys (the pod's values of those keys)
            want = {**c["labelSelector"]["matchLabels"], **{k: _labels(p)[k] for k in c.get("matchLabelKeys", []) if k in _labels(p)}}
            return all(_labels(q).get(k) == v for k, v in want.items())
        cons = [(c["topologyKey"], c["maxSkew"], lambda q, c=c: selects(q, c),
                 c.get("nodeAffinityPolicy", "Honor"), c.get("nodeTaintsPolicy", "Ignore"))
                for c in explicit if c["whenUnsatisfiable"] == "ScheduleAnyway"]
        require_all = True
    elif _owner(p):
        cons = [(HOST, 3, lambda q: _owner(q) == _owner(p), "Honor", "Ignore"),
                (ZONE, 5, lambda q: _owner(q) == _owner(p), "Honor", "Ignore")]
        require_all = False
    else:
        return None
    if not cons:
        return None

    def count(n, sel):
        return sum(1 for q in placed[n] if q["metadata"]["namespace"] == p["metadata"]["namespace"]
                   and not q["metadata"].get("deletionTimestamp") and sel(q))

    lab = {n["metadata"]["name"]: n["metadata"]["labels"] for n in nodes}
    taints = {n["metadata"]["name"]: n["spec"].get("taints") or [] for n in nodes}
    ignored = set()
    tp_counts = [{} for _ in cons]
    for n in filtered:
        if require_all and not all(k in lab[n] for k, *_ in cons):
            ignored.add(n)
            continue
        for i, (k, *_) in enumerate(cons):
            if k != HOST:
                tp_counts[i].setdefault(lab[n].get(k, ""), 0)
    weights = [math.log((len(filtered) - len(ignored) if k == HOST else len(tp_counts[i])) + 2) for i, (k, *_) in enumerate(cons)]
    selector = p["spec"].get("nodeSelector") or {}
    for n in lab:
        if require_all and not all(k in lab[n] for k, *_ in cons):
            continue
        for i, (k, _, sel, affinity_policy, taints_policy) in enumerate(cons):
            # matchNodeInclusionPolicies: each policy on its own
            if affinity_policy == "Honor" and not all(lab[n].get(k2) == v for k2, v in selector.items()):
                continue
            if taints_policy == "Honor" and _untolerated(taints[n], p):
                continue
            v = lab[n].get(k, "")
            if v in tp_counts[i]:
                tp_counts[i][v] += count(n, sel)
    raw = {}
    for n in filtered:
        if n in ignored:
            continue
        s = 0.0
        for i, (k, skew, sel, *_) in enumerate(cons):
            if k in lab[n]:
                cnt = count(n, sel) if k == HOST else tp_counts[i][lab[n][k]]
                s += float(cnt) * weights[i] + float(skew - 1)
        raw[n] = _go_round(s)
    lo, hi = min(raw.values(), default=0), max(raw.values(), default=0)
    return {n: (0 if n in ignored else 100 if hi == 0 else 100 * (hi + lo - raw[n]) // hi) for n in filtered}


def ref_interpod(p, nodes, placed, filtered):
    """interpodaffinity/scoring.go, transcribed on the objects."""
    lab = {n["metadata"]["name"]: n["metadata"]["labels"] for n in nodes}
    aff = p["spec"].get("affinity") or {}
    mine = [(t["weight"], t["podAffinityTerm"], s) for kind, s in (("podAffinity", 1), ("podAntiAffinity", -1))
            for t in (aff.get(kind) or {}).get("preferredDuringSchedulingIgnoredDuringExecution", [])]
    ns = p["metadata"]["namespace"]
    ts: dict[tuple[str, str], int] = {}
    for n, pods in placed.items():
        for e in pods:
            eaff = e["spec"].get("affinity") or {}
            eterms = [(t["weight"], t["podAffinityTerm"], s) for kind, s in (("podAffinity", 1), ("podAntiAffinity", -1))
                      for t in (eaff.get(kind) or {}).get("preferredDuringSchedulingIgnoredDuringExecution", [])]
            eterms += [(1, t, 1) for t in (eaff.get("podAffinity") or {}).get("requiredDuringSchedulingIgnoredDuringExecution", [])]
            for w, t, s in mine:
                if _term_matches(t, ns, e) and t["topologyKey"] in lab[n]:
                    key = (t["topologyKey"], lab[n][t["topologyKey"]])
                    ts[key] = ts.get(key, 0) + w * s
            for w, t, s in eterms:
                if _term_matches(t, e["metadata"]["namespace"], p) and t["topologyKey"] in lab[n]:
                    key = (t["topologyKey"], lab[n][t["topologyKey"]])
                    ts[key] = ts.get(key, 0) + w * s
    if not ts:
        return None
    keys = {k for k, _ in ts}
    raw = {n: sum(ts.get((k, lab[n][k]), 0) for k in keys if k in lab[n]) for n in filtered}
    lo, hi = min(raw.values()), max(raw.values())
    return {n: int(100.0 * ((raw[n] - lo) / (hi - lo))) if hi > lo else 0 for n in filtered}


def _random_case(rng):
    n_nodes = rng.randint(2, 6)
    nodes = []
    for i in range(n_nodes):
        labels = {}
        if rng.random() < 0.8:
            labels[ZONE] = rng.choice(["za", "zb", "zc"])
        if rng.random() < 0.6:
            labels["rack"] = rng.choice(["r1", "r2"])
        if rng.random() < 0.5:
            labels["disk"] = "ssd"
        nodes.append(node(f"n{i}", rng.choice(["4", "8", "16", "32"]), labels=labels))
        if rng.random() < 0.5:
            nodes[-1]["spec"]["taints"] = [{"key": "x", "value": rng.choice(["y", "z"]),
                                            "effect": rng.choice(["NoSchedule", "NoExecute"])}]
    apps = ["web", "db", "cache"]

    def pod_terms():
        aff = {}
        for kind in ("podAffinity", "podAntiAffinity"):
            if rng.random() < 0.35:
                aff[kind] = {"preferredDuringSchedulingIgnoredDuringExecution": [
                    {"weight": rng.randint(1, 100), "podAffinityTerm": {"labelSelector": {"matchLabels": {"app": rng.choice(apps)}},
                                                                        "topologyKey": rng.choice([HOST, ZONE, "rack"]),
                                                                        **({"namespaces": ["other"]} if rng.random() < 0.2 else {})}}
                    for _ in range(rng.randint(1, 2))]}
        return aff

    def ident():  # namespace and labels
        labels = {"app": rng.choice(apps), **({"tier": rng.choice(["t1", "t2"])} if rng.random() < 0.5 else {})}
        return {"ns": "other" if rng.random() < 0.2 else "default", "labels": labels}

    bound = []
    for j in range(rng.randint(0, 8)):
        aff = pod_terms()
        if rng.random() < 0.2:
            aff.setdefault("podAffinity", {})["requiredDuringSchedulingIgnoredDuringExecution"] = [
                {"labelSelector": {"matchLabels": {"app": rng.choice(apps)}}, "topologyKey": rng.choice([HOST, ZONE])}]
        b = pod(f"b{j}", rng.choice(["100m", "500m"]), "256Mi", node_name=f"n{rng.randrange(n_nodes)}",
                affinity=aff or None, owner=rng.choice([None, "rs-web", "rs-db"]), **ident())
        if rng.random() < 0.1:
            b["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
        bound.append(b)
    pending = []
    for j in range(rng.randint(1, 5)):
        spread = None
        if rng.random() < 0.5:
            spread = [{"maxSkew": rng.randint(1, 3), "topologyKey": rng.choice([HOST, ZONE, "rack"]),
                       "whenUnsatisfiable": "ScheduleAnyway", "labelSelector": {"matchLabels": {"app": rng.choice(apps)}},
                       **({"matchLabelKeys": ["tier"]} if rng.random() < 0.3 else {}),
                       **({"nodeAffinityPolicy": rng.choice(["Honor", "Ignore"])} if rng.random() < 0.6 else {}),
                       **({"nodeTaintsPolicy": rng.choice(["Honor", "Honor", "Ignore"])} if rng.random() < 0.7 else {})}
                      for _ in range(rng.randint(1, 2))]
        pending.append(pod(f"p{j}", rng.choice(["100m", "500m", "1"]), rng.choice(["128Mi", "1Gi"]),
                           **ident(), affinity=pod_terms() or None, spread=spread,
                           owner=rng.choice([None, "rs-web", "rs-db"]), selector={"disk": "ssd"} if rng.random() < 0.15 else None))
        if rng.random() < 0.5:
            pending[-1]["spec"]["tolerations"] = [rng.choice([{"key": "x", "operator": "Exists"},
                                                              {"key": "x", "operator": "Equal", "value": "y"},
                                                              {"key": "x", "operator": "Exists", "effect": "NoSchedule"}])]
    return nodes, bound, pending


def _ref_fit(nodes, placed, p):
    """NodeResourcesFit + BalancedAllocation on explicit requests (as the auditor's diff2.py)."""
    def req(q):
        r = q["spec"]["containers"][0]["resources"]["requests"]
        cpu = int(r["cpu"][:-1]) if r["cpu"].endswith("m") else int(r["cpu"]) * 1000
        mem = int(r["memory"][:-2]) * (1024 if r["memory"].endswith("Gi") else 1) * MIB
        return cpu, mem
    out = {}
    pc, pm = req(p)
    for n in nodes:
        name = n["metadata"]["name"]
        if not all(n["metadata"]["labels"].get(k) == v for k, v in (p["spec"].get("nodeSelector") or {}).items()):
            continue
        if _untolerated(n["spec"].get("taints") or [], p):  # TaintToleration's Filter
            continue
        ac, am = int(n["status"]["allocatable"]["cpu"]) * 1000, 64 * 1024 * MIB
        rc, rm = sum(req(q)[0] for q in placed[name]), sum(req(q)[1] for q in placed[name])
        if rc + pc > ac or rm + pm > am:
            continue
        fit = ((ac - rc - pc) * 100 // ac + (am - rm - pm) * 100 // am) // 2
        bal = int((1 - abs((min((rc + pc) / ac, 1.0) - min((rm + pm) / am, 1.0)) / 2)) * 100)
        out[name] = fit + bal
    return out


def test_randomized_against_kube_schedulers_scoring():
    rng = random.Random(7)
    checked = 0
    for trial in range(150):
        nodes, bound, pending = _random_case(rng)
        snap = build_snapshot(nodes, bound, pending)
        p = snap.problem
        s = solvers.make("kube-default", seed=trial)
        s.reset(p)
        state = ClusterState(p)
        placed = {n["metadata"]["name"]: [b for b in bound if b["spec"]["nodeName"] == n["metadata"]["name"]] for n in nodes}
        for w in [int(x) for x in s.pod_order(p)]:
            cand = s.candidates(state, w)
            filtered = [p.nodes[i].name for i in cand]
            base = _ref_fit(nodes, placed, pending[w])
            assert sorted(base) == sorted(filtered), (trial, w)
            if not filtered:
                continue
            got = s.plugin_scores(state, w, cand)
            spread = ref_spread(pending[w], nodes, placed, filtered)
            interpod = ref_interpod(pending[w], nodes, placed, filtered)
            mine_spread = dict(zip(filtered, got.get("PodTopologySpread", np.zeros(len(cand))).tolist(), strict=True))
            mine_inter = dict(zip(filtered, got.get("InterPodAffinity", np.zeros(len(cand))).tolist(), strict=True))
            assert mine_spread == (spread or dict.fromkeys(filtered, 0)), (trial, w)
            assert mine_inter == (interpod or dict.fromkeys(filtered, 0)), (trial, w)
            total = {n: 300 + base[n] + 2 * mine_spread[n] + 2 * mine_inter[n] for n in filtered}
            decision = s.decide(state, w)
            chosen = p.nodes[decision.node].name
            assert total[chosen] == max(total.values()), (trial, w)
            state.place(w, decision.node, decision.cards)
            placed[chosen].append(pending[w])  # the next pod of the batch sees it (kube's assumed pod)
            checked += 1
    assert checked > 300


def test_the_model_of_a_scheduler_batch_carries_pod_scoring():
    nodes, bound, pending = _mixed_cluster()
    model = ClusterModel(nodes, bound, None, pending=pending)
    assert model.with_pods(pending).problem.pod_scoring is not None


def test_a_model_built_for_no_pods_widens_for_the_pods_it_is_asked_about():
    # the webhook's cached model (no pending=): for_pods gives the one that checks their resources
    nodes = [node("n1", "64", pods="2"), node("n2", "4", extra={"example.com/fpga": "1"})]
    bound = [pod("b1", "100m", "10Mi", node_name="n1"), pod("b2", "100m", "10Mi", node_name="n1")]
    model = ClusterModel(nodes, bound, None)
    fpga = pod("f", containers=[{"name": "c", "resources": {"requests": {"cpu": "100m", "example.com/fpga": "1"}}}])
    plain = pod("p", "100m", "10Mi")
    assert solve(model.with_pods([plain])) == {"default/p": "n1"}  # the old webhook: a full node
    wide = model.for_pods([plain])
    assert wide is not model and "pods" in wide.config.resources
    assert solve(wide.with_pods([plain])) == {"default/p": "n2"}
    assert model.for_pods([plain]) is wide  # kept for the next pod that needs the same
    assert solve(model.for_pods([fpga]).with_pods([fpga])) == {"default/f": "n2"}
    roomy = ClusterModel([node("a", "4"), node("b", "8")], [], None)
    assert roomy.for_pods([plain]) is roomy  # nothing more to check: the same model


def test_a_bad_preferred_pod_term_names_its_field():
    from iro_fed.k8s.snapshot import PodSpecError

    bad = pod("p", affinity=weighted("podAntiAffinity", 0, {"app": "web"}))
    with pytest.raises(PodSpecError) as exc:
        build_snapshot([node("a", "4")], [], [bad])
    assert "spec.affinity.podAntiAffinity.preferredDuringSchedulingIgnoredDuringExecution[0].weight" in str(exc.value)
    # a bound pod's is left out of scoring with a warning, as kube's API server would not have let it in
    snap = build_snapshot([node("a", "4")], [dict(bad, spec=dict(bad["spec"], nodeName="a"))], [pod("q")])
    assert any("ignored by pod affinity scoring" in w for w in snap.warnings)

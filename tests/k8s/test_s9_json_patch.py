"""RFC 6902 JSON patch in the loopback API server (iro_fed.k8s.testing.json_patch, pods/status PATCH).

The loopback stands in for the real API server, whose evanphx/json-patch refuses what RFC 6901 /
6902 refuse: a lenient applier here would pass a webhook or client patch that a cluster rejects.
``JsonPatchError`` is a ``ValueError``: the unit tests catch ``ValueError`` and match the message
(which names ``patch[i]`` and its field), so each fails on the old applier for its real reason.
"""

from __future__ import annotations

import copy
import http.client
import json
from typing import Any
from urllib.parse import urlsplit

import pytest

from iro_fed.k8s.testing import FakeApiServer, json_patch, make_pod

DOC = {"metadata": {"name": "p", "labels": {"app.kubernetes.io/name": "web", "a~b": "x"}},
       "spec": {"list": [10, 20], "flag": True, "n": 1}}


def apply(ops: list[dict[str, Any]], doc: Any = None) -> Any:
    return json_patch(copy.deepcopy(DOC) if doc is None else doc, ops)


# --- array indices --------------------------------------------------------------------------------


@pytest.mark.parametrize("index", ["3", "4", "100"])
def test_add_past_the_end_of_an_array_is_refused(index):
    # old: list.insert(5, v) appended silently
    with pytest.raises(ValueError, match=rf"patch\[0\]\.path '/spec/list/{index}': index {index} is out of range for an array of 2"):
        apply([{"op": "add", "path": f"/spec/list/{index}", "value": 1}])


def test_add_at_the_length_or_dash_appends_and_inside_inserts():
    assert apply([{"op": "add", "path": "/spec/list/2", "value": 30}])["spec"]["list"] == [10, 20, 30]
    assert apply([{"op": "add", "path": "/spec/list/-", "value": 30}])["spec"]["list"] == [10, 20, 30]
    assert apply([{"op": "add", "path": "/spec/list/0", "value": 5}])["spec"]["list"] == [5, 10, 20]


@pytest.mark.parametrize("op", [{"op": "replace", "value": 0}, {"op": "remove"}, {"op": "test", "value": 20}])
def test_index_equal_to_the_length_names_no_element_but_for_add(op):
    # old: list[2] -> IndexError for replace/remove, not an error naming the operation
    with pytest.raises(ValueError, match=r"patch\[0\]\.path '/spec/list/2': index 2 is out of range for an array of 2"):
        apply([{**op, "path": "/spec/list/2"}])


@pytest.mark.parametrize("token", ["-1", "01", "00", "+1", " 1", "1 ", "1e0", "0x1", "١"])
@pytest.mark.parametrize("op", [{"op": "add", "value": 0}, {"op": "replace", "value": 0}, {"op": "remove"},
                                {"op": "test", "value": 10}])
def test_an_array_index_is_decimal_without_sign_or_leading_zero(op, token):
    # old: int() took "-1" (the last element), "01", "+1", " 1" and the Arabic-Indic digit one
    with pytest.raises(ValueError, match=r"patch\[0\]\.path .*is not an array index"):
        apply([{**op, "path": f"/spec/list/{token}"}])
    # on the way to the target too
    with pytest.raises(ValueError, match=r"is not an array index"):
        apply([{"op": "add", "path": f"/spec/list/{token}/x", "value": 0}], {"spec": {"list": [{}, {}]}})


@pytest.mark.parametrize("op", [{"op": "replace", "value": 0}, {"op": "remove"}, {"op": "test", "value": 20}])
def test_dash_is_only_for_add(op):
    # old: replace /list/- appended a third element; remove raised a bare int() ValueError
    with pytest.raises(ValueError, match=r"patch\[0\]\.path '/spec/list/-': '-' \(past the last element\) names no element"):
        apply([{**op, "path": "/spec/list/-"}])


# --- pointers -------------------------------------------------------------------------------------


def test_the_empty_pointer_is_the_whole_document():
    # old: IndexError (parts[-1] of no parts)
    assert apply([{"op": "add", "path": "", "value": {"new": 1}}]) == {"new": 1}
    assert apply([{"op": "replace", "path": "", "value": [1]}]) == [1]
    assert apply([{"op": "test", "path": "", "value": DOC}]) == DOC
    with pytest.raises(ValueError, match=r"patch\[0\]\.path '': test failed"):
        apply([{"op": "test", "path": "", "value": {}}])
    with pytest.raises(ValueError, match=r"patch\[0\]\.path '': the whole document cannot be removed"):
        apply([{"op": "remove", "path": ""}])


def test_pointer_escapes_are_decoded_and_checked():
    out = apply([{"op": "replace", "path": "/metadata/labels/a~0b", "value": "y"},
                 {"op": "remove", "path": "/metadata/labels/app.kubernetes.io~1name"},
                 {"op": "add", "path": "/metadata/labels/~01", "value": "tilde-one"}])
    assert out["metadata"]["labels"] == {"a~b": "y", "~1": "tilde-one"}
    # old: "~2" and a trailing "~" were taken as literal keys
    for bad in ("/metadata/labels/a~2b", "/metadata/labels/a~"):
        with pytest.raises(ValueError, match=r"patch\[0\]\.path .*'~' must be escaped as '~0'"):
            apply([{"op": "add", "path": bad, "value": "v"}])
    # old: "spec/n" (no leading "/") replaced /n at the top level
    with pytest.raises(ValueError, match=r"patch\[0\]\.path 'spec/n': a JSON pointer is empty or starts with '/'"):
        apply([{"op": "replace", "path": "spec/n", "value": 2}])


def test_a_missing_parent_or_member_names_the_location():
    # old: a bare KeyError('affinity') / KeyError('nope')
    with pytest.raises(ValueError, match=r"patch\[0\]\.path '/spec/affinity/nodeAffinity': /spec/affinity does not exist"):
        apply([{"op": "add", "path": "/spec/affinity/nodeAffinity", "value": {}}])
    with pytest.raises(ValueError, match=r"patch\[1\]\.path '/metadata/nope': /metadata/nope does not exist"):
        apply([{"op": "test", "path": "/spec/n", "value": 1}, {"op": "remove", "path": "/metadata/nope"}])
    with pytest.raises(ValueError, match=r"patch\[0\]\.path '/spec/n/x': /spec/n is integer, not an object or an array"):
        apply([{"op": "add", "path": "/spec/n/x", "value": 1}])


# --- test / move / copy ---------------------------------------------------------------------------


def test_test_compares_json_values():
    # old: "unsupported JSON patch op 'test'"
    assert apply([{"op": "test", "path": "/spec/n", "value": 1.0},  # numbers by value
                  {"op": "test", "path": "/spec/list", "value": [10, 20]},
                  {"op": "test", "path": "/metadata/labels/a~0b", "value": "x"}]) == DOC
    for path, value in (("/spec/n", True), ("/spec/flag", 1), ("/spec/n", "1"), ("/spec/list", [10]),
                        ("/spec/list", [20, 10]), ("/metadata/labels", {"a~b": "x"})):
        with pytest.raises(ValueError, match=rf"patch\[0\]\.path '{path}': test failed"):
            apply([{"op": "test", "path": path, "value": value}])


def test_move_and_copy():
    # old: "unsupported JSON patch op 'move'" / 'copy'
    out = apply([{"op": "move", "from": "/spec/list/0", "path": "/spec/list/-"},
                 {"op": "move", "from": "/spec/n", "path": "/metadata/n"},
                 {"op": "move", "from": "/spec/flag", "path": "/spec/flag"}])
    assert out["spec"] == {"list": [20, 10], "flag": True} and out["metadata"]["n"] == 1
    out = apply([{"op": "copy", "from": "/spec/list", "path": "/spec/copy"},
                 {"op": "add", "path": "/spec/copy/-", "value": 30}])
    assert out["spec"]["list"] == [10, 20] and out["spec"]["copy"] == [10, 20, 30]  # a copy, not the same list
    # the path is read after the from is removed: [10, 20] less its first has no index 2
    with pytest.raises(ValueError, match=r"patch\[0\]\.path '/spec/list/2': index 2 is out of range for an array of 1"):
        apply([{"op": "move", "from": "/spec/list/0", "path": "/spec/list/2"}])
    with pytest.raises(ValueError, match=r"patch\[0\]\.from '/spec': a location cannot be moved into one of its children"):
        apply([{"op": "move", "from": "/spec", "path": "/spec/inner"}])
    with pytest.raises(ValueError, match=r"patch\[0\]\.from '/spec/missing': /spec/missing does not exist"):
        apply([{"op": "copy", "from": "/spec/missing", "path": "/spec/x"}])


@pytest.mark.parametrize("ops, message", [
    ({"op": "add", "path": "/x", "value": 1}, r"patch: expected an array of operations, got object"),
    (["add"], r"patch\[0\]: expected an operation object, got string"),
    ([{"path": "/x", "value": 1}], r"patch\[0\]\.op: expected one of add, remove, replace, move, copy, test, got None"),
    ([{"op": "merge", "path": "/x", "value": 1}], r"patch\[0\]\.op: expected one of .*got 'merge'"),
    ([{"op": "add", "value": 1}], r"patch\[0\]\.path: missing"),
    ([{"op": "add", "path": 3, "value": 1}], r"patch\[0\]\.path: expected a JSON pointer string, got integer"),
    ([{"op": "add", "path": "/x"}], r"patch\[0\]\.value: missing"),
    ([{"op": "test", "path": "/spec/n"}], r"patch\[0\]\.value: missing"),
    ([{"op": "copy", "path": "/x"}], r"patch\[0\]\.from: missing"),
])
def test_a_malformed_operation_names_its_field(ops, message):
    with pytest.raises(ValueError, match=message):
        apply(ops)


def test_null_is_a_value():
    assert apply([{"op": "add", "path": "/spec/x", "value": None}])["spec"]["x"] is None


# --- atomicity --------------------------------------------------------------------------------------


def test_a_failing_patch_changes_nothing_and_a_good_one_returns_a_new_document():
    doc = copy.deepcopy(DOC)
    ops = [{"op": "add", "path": "/spec/added", "value": {"k": [1]}},
           {"op": "remove", "path": "/spec/list/0"},
           {"op": "test", "path": "/spec/n", "value": 2}]
    with pytest.raises(ValueError) as failed:
        json_patch(doc, ops)
    assert doc == DOC  # old: /spec/added added and /spec/list/0 removed in place
    assert type(failed.value).__name__ == "JsonPatchError"
    assert str(failed.value) == "patch[2].path '/spec/n': test failed: the value there is not patch[2].value"
    out = json_patch(doc, ops[:2])
    assert doc == DOC and out["spec"] == {"list": [20], "flag": True, "n": 1, "added": {"k": [1]}}
    out["spec"]["added"]["k"].append(2)
    assert ops[0]["value"] == {"k": [1]}  # the patch's value is copied in, not shared


# --- the loopback server ----------------------------------------------------------------------------


NOT_APPLIED = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
               "message": "the server rejected our request due to an error in our request",
               "reason": "Invalid", "details": {}, "code": 422}


def patch_status(api: FakeApiServer, body: Any, name: str = "p",
                 content_type: str = "application/json-patch+json") -> tuple[int, dict[str, Any]]:
    url = urlsplit(api.url)
    conn = http.client.HTTPConnection(url.hostname, url.port, timeout=10)
    try:
        conn.request("PATCH", f"/api/v1/namespaces/default/pods/{name}/status", body=json.dumps(body).encode(),
                     headers={"Content-Type": content_type})
        resp = conn.getresponse()
        return resp.status, json.loads(resp.read())
    finally:
        conn.close()


@pytest.fixture
def pod(api: FakeApiServer) -> dict[str, Any]:
    return api.add_pod(make_pod("p"))


@pytest.mark.parametrize("ops", [
    [{"op": "add", "path": "/status/conditions", "value": []},
     {"op": "add", "path": "/status/conditions/1", "value": {"type": "PodScheduled"}}],  # past the end
    [{"op": "add", "path": "/status/reason", "value": "x"}, {"op": "remove", "path": "/status/nope"}],
    [{"op": "test", "path": "/metadata/resourceVersion", "value": "0"}, {"op": "add", "path": "/status/reason", "value": "x"}],
    [{"op": "replace", "path": "/status/phase/-", "value": "Running"}],
    [{"op": "add", "path": "", "value": {}}],  # RFC 6902 takes it; evanphx/json-patch v4 does not
    [{"op": "copy", "from": "", "path": "/status/self"}],
    [None],
])
def test_server_answers_a_patch_that_does_not_apply_as_the_api_server_and_keeps_the_pod(api, pod, ops):
    status, body = patch_status(api, ops)
    # old: 200 for the index past the end (appended) and the empty path (crashed: 422 "list index out of range"),
    # 422 "cannot apply patch: ..." for the others
    assert (status, body) == (422, NOT_APPLIED)
    assert api.get("pods", "default/p") == pod


@pytest.mark.parametrize("body, message", [
    ({"op": "add", "path": "/status/reason", "value": "x"}, "json: cannot unmarshal object into Go value of type jsonpatch.Patch"),
    ("add", "json: cannot unmarshal string into Go value of type jsonpatch.Patch"),
    ([["add", "/status/reason", "x"]], "json: cannot unmarshal array into Go value of type jsonpatch.Operation"),
])
def test_server_answers_400_for_a_patch_that_is_not_an_array_of_objects(api, pod, body, message):
    status, out = patch_status(api, body)
    assert (status, out["reason"], out["message"]) == (400, "BadRequest", message)  # old: 422 ("string indices ...")
    assert api.get("pods", "default/p") == pod


def test_server_refuses_more_than_10000_operations(api, pod):
    status, out = patch_status(api, [{"op": "test", "path": "/metadata/name", "value": "p"}] * 10001)
    assert (status, out["reason"]) == (413, "RequestEntityTooLarge")
    assert out["message"] == "Request entity too large: The allowed maximum operations in a JSON patch is 10000, got 10001"
    assert api.get("pods", "default/p") == pod


def test_server_applies_a_good_patch_whole(api, pod):
    ops = [{"op": "test", "path": "", "value": pod},  # evanphx v4 tests the whole document
           {"op": "test", "path": "/metadata/resourceVersion", "value": pod["metadata"]["resourceVersion"]},
           {"op": "add", "path": "/status/conditions", "value": [{"type": "PodScheduled", "status": "False"}]},
           {"op": "copy", "from": "/status/conditions/0", "path": "/status/conditions/-"},
           {"op": "replace", "path": "/status/conditions/1/type", "value": "Ready"},
           {"op": "move", "from": "/status/phase", "path": "/status/oldPhase"},
           {"op": "add", "path": "/spec/ignored", "value": 1}]  # the status subresource keeps spec
    status, out = patch_status(api, ops)
    assert status == 200
    assert out["status"] == {"conditions": [{"type": "PodScheduled", "status": "False"}, {"type": "Ready", "status": "False"}],
                             "oldPhase": "Pending"}
    assert out["spec"] == pod["spec"]
    assert api.get("pods", "default/p") == out


@pytest.mark.parametrize("content_type, body, message", [
    ("application/json-patch+json", [{"op": "replace", "path": "/metadata/name", "value": "q"}],
     "the name of the object (q) does not match the name on the URL (p)"),
    ("application/merge-patch+json", {"metadata": {"name": "q"}}, "the name of the object (q) does not match the name on the URL (p)"),
    ("application/json-patch+json", [{"op": "remove", "path": "/metadata/name"}],
     "the name of the object () does not match the name on the URL (p)"),
    ("application/strategic-merge-patch+json", {"metadata": {"namespace": "other"}},
     "the namespace of the provided object does not match the namespace sent on the request"),
])
def test_server_does_not_let_a_patch_rename_the_pod(api, pod, content_type, body, message):
    status, out = patch_status(api, body, content_type=content_type)
    # old: 200, and a second pod stored under the new name (or a 500 for a removed name)
    assert (status, out["reason"], out["message"]) == (400, "BadRequest", message)
    assert [p["metadata"]["name"] for p in api.list("pods")] == ["p"]
    assert api.get("pods", "default/p") == pod


def test_server_keeps_the_namespace_a_patch_removes(api, pod):
    status, out = patch_status(api, [{"op": "remove", "path": "/metadata/namespace"}])
    assert status == 200 and out["metadata"]["namespace"] == "default"
    assert api.get("pods", "default/p")["metadata"]["namespace"] == "default"


@pytest.mark.parametrize("content_type", ["application/strategic-merge-patch+json", "application/merge-patch+json"])
@pytest.mark.parametrize("body, kind", [([{"status": {}}], "array"), ("x", "string"), (None, "null")])
def test_server_answers_400_for_a_merge_patch_that_is_not_an_object(api, pod, content_type, body, kind):
    # old: AttributeError in the handler, the connection closed with no response
    status, out = patch_status(api, body, content_type=content_type)
    assert (status, out["reason"]) == (400, "BadRequest")
    assert out["message"] == f"json: cannot unmarshal {kind} into Go value of type map[string]interface {{}}"
    assert api.get("pods", "default/p") == pod

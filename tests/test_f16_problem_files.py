"""Reading problem files and writing outputs: devices and fifos, repeated keys, YAML 1.2 numbers,
libyaml, text that is not Unicode, and a few messages.

- ``--out`` onto a device or fifo was replaced by a regular file (a temporary file renamed over
  it; as root that replaced /dev/null): such a target is now written directly, as ``>`` does.
- A key repeated in one object was read silently, the last winning: now an error naming the path.
- YAML 1.1 read ``0100`` as octal 64 and ``1:30`` as base-60 90: numbers are YAML 1.2's now.
- A lone surrogate in a name passed validation and crashed the solve: refused, naming the path.
- A device as the problem file was read for ever (/dev/zero); the read is capped.

Every device here is made under tmp_path (mknod; skipped where not allowed), never a real one.
"""

from __future__ import annotations

import json
import os
import socket
import stat
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import yaml

import iro_fed.problem_io as pio
from iro_fed.problem_io import (
    DuplicateKeyError,
    ProblemValidationError,
    load_document,
    load_json,
    load_yaml,
    problem_from_dict,
    write_file_atomic,
    write_json_atomic,
)
from iro_fed.testing import random_problem_doc

NULL_DEVICE = os.makedev(1, 3)  # what /dev/null is on Linux
ZERO_DEVICE = os.makedev(1, 5)  # /dev/zero


def _device(path: Path, device: int) -> Path:
    try:
        os.mknod(path, stat.S_IFCHR | 0o666, device)
    except (PermissionError, AttributeError, OSError) as exc:  # not root, or a container without mknod
        pytest.skip(f"cannot make a device node here: {exc}")
    return path


def _errors(exc: pytest.ExceptionInfo) -> list[tuple[str, str]]:
    return exc.value.errors


def _read_fifo(path: Path, into: list[bytes]) -> threading.Thread:
    def run() -> None:
        with open(path, "rb") as f:
            into.append(f.read())

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


# --- 1. outputs onto devices and fifos ---------------------------------------------------------


def test_json_written_onto_a_device_node_leaves_the_device(tmp_path):
    null = _device(tmp_path / "null", NULL_DEVICE)
    write_json_atomic(null, {"a": 1})
    assert stat.S_ISCHR(os.stat(null).st_mode)  # was a regular file holding the JSON
    assert os.stat(null).st_rdev == NULL_DEVICE
    assert sorted(p.name for p in tmp_path.iterdir()) == ["null"]  # no temporary file left


def test_json_written_onto_a_fifo_goes_to_its_reader(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    got: list[bytes] = []
    reader = _read_fifo(fifo, got)
    write_json_atomic(fifo, {"a": [1, 2]})
    reader.join(timeout=60)
    assert json.loads(got[0]) == {"a": [1, 2]}
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)


def test_a_symlink_to_a_device_writes_into_the_device(tmp_path):
    null = _device(tmp_path / "null", NULL_DEVICE)
    (tmp_path / "out.json").symlink_to(null)
    write_file_atomic(tmp_path / "out.json", lambda tmp: Path(tmp).write_text("x"))
    assert stat.S_ISCHR(os.stat(null).st_mode) and (tmp_path / "out.json").is_symlink()


def test_regular_files_and_new_paths_are_still_replaced_by_rename(tmp_path):
    target = tmp_path / "r.json"
    target.write_text("old")
    inode = target.stat().st_ino
    write_json_atomic(target, {"new": True})
    assert json.loads(target.read_text()) == {"new": True}
    assert target.stat().st_ino != inode  # a new file renamed over the old one
    write_json_atomic(tmp_path / "sub" / "n.json", [1])
    assert json.loads((tmp_path / "sub" / "n.json").read_text()) == [1]


def test_iro_solve_out_onto_a_device_node_keeps_the_device(tmp_path):
    null = _device(tmp_path / "null", NULL_DEVICE)
    (tmp_path / "p.json").write_text(json.dumps(random_problem_doc(3, nodes=3, pods=4)))
    done = subprocess.run(
        [sys.executable, "-m", "iro_fed.cli", "solve", "p.json", "--solver", "best-fit", "--out", str(null)],
        capture_output=True, text=True, timeout=300, cwd=tmp_path, env={**os.environ, "FLWR_TELEMETRY_ENABLED": "0"},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert stat.S_ISCHR(os.stat(null).st_mode) and os.stat(null).st_rdev == NULL_DEVICE


# --- 2. repeated keys ------------------------------------------------------------------------------


def test_a_key_repeated_in_json_is_refused_naming_its_object(tmp_path, small_doc):
    text = json.dumps(small_doc).replace('"requests": {', '"requests": {"cpu": 200, ', 1)
    assert json.loads(text)["workloads"][0]["requests"]["cpu"] != 200  # the old reading: the last one won
    path = tmp_path / "p.json"
    path.write_text(text)
    with pytest.raises(ProblemValidationError) as exc:
        load_document(path)
    assert _errors(exc) == [("workloads[0].requests", "duplicate key 'cpu'")]


def test_json_reports_every_repeated_key_and_the_top_level():
    with pytest.raises(DuplicateKeyError) as exc:
        load_json('{"a": {"x": 1, "x": 2, "y": 0, "y": 1}, "b": [{"z": 1, "z": 1}], "c": {"q": {"w": 1, "w": 2}}}')
    assert sorted(exc.value.errors) == [
        ("a", "duplicate key 'x'"),
        ("a", "duplicate key 'y'"),
        ("b[0]", "duplicate key 'z'"),
        ("c.q", "duplicate key 'w'"),
    ]
    with pytest.raises(DuplicateKeyError) as exc:  # the first a's own repeat went with it: one error
        load_json('{"a": {"x": 1, "x": 2}, "a": 3}')
    assert exc.value.errors == [("", "duplicate key 'a'")]
    assert load_json('{"a": {"x": 1}, "b": {"x": 2}}') == {"a": {"x": 1}, "b": {"x": 2}}


@pytest.fixture(params=["libyaml", "python"])
def yaml_parser(request, monkeypatch) -> str:
    """Each YAML test with both parsers: libyaml's (the default where PyYAML has it) and PyYAML's own."""
    if request.param == "libyaml":
        if not getattr(yaml, "__with_libyaml__", False):
            pytest.skip("PyYAML without libyaml")
        loader = pio._make_yaml_loader()
        assert issubclass(loader, yaml.CSafeLoader)
    else:
        monkeypatch.delattr(yaml, "CSafeLoader", raising=False)
        loader = pio._make_yaml_loader()
        assert not issubclass(loader, getattr(yaml, "CLoader", ())) and issubclass(loader, yaml.SafeLoader)
    monkeypatch.setattr(pio, "_yaml_loader", loader)
    return request.param


def test_the_default_yaml_loader_is_libyamls_where_pyyaml_has_it(monkeypatch):
    monkeypatch.setattr(pio, "_yaml_loader", None)
    if getattr(yaml, "__with_libyaml__", False):
        assert issubclass(pio.yaml_loader(), yaml.CSafeLoader)


YAML_TWO_WORKLOAD_LISTS = """\
resources: [cpu, memory]
domains: [{name: az-1}]
nodes: [{name: n, domain: az-1, capacity: {cpu: 1000, memory: 1000}}]
workloads: [{name: a, requests: {cpu: 1}}]
workloads: [{name: b, requests: {cpu: 2}}]
"""


def test_a_key_repeated_in_yaml_is_refused_naming_its_path(tmp_path, yaml_parser):
    path = tmp_path / "p.yaml"
    path.write_text(YAML_TWO_WORKLOAD_LISTS)
    with pytest.raises(ProblemValidationError) as exc:
        load_document(path)
    assert _errors(exc) == [("", "duplicate key 'workloads' (lines 4 and 5)")]
    path.write_text(
        "domains: [{name: az-1}]\nnodes: []\nworkloads:\n- name: a\n  requests:\n    cpu: 2000\n    memory: 4096\n"
        "    cpu: 200\n"
    )
    with pytest.raises(ProblemValidationError) as exc:
        load_document(path)
    assert _errors(exc) == [("workloads[0].requests", "duplicate key 'cpu' (lines 6 and 8)")]


def test_yaml_merges_may_still_be_overridden_but_explicit_keys_not_twice(yaml_parser):
    text = """\
caps: &c {cpu: 1000, memory: 1000}
nodes:
- {name: n-1, capacity: *c}
- {name: n-2, capacity: {<<: *c, cpu: 2000}}
"""
    doc = load_yaml(text)
    assert doc["nodes"][0]["capacity"] == {"cpu": 1000, "memory": 1000}
    assert doc["nodes"][1]["capacity"] == {"cpu": 2000, "memory": 1000}
    with pytest.raises(DuplicateKeyError) as exc:
        load_yaml(text.replace("cpu: 2000}", "cpu: 2000, cpu: 3000}"))
    assert exc.value.errors == [("nodes[1].capacity", "duplicate key 'cpu' (line 4)")]
    # 1 and 01 are one key (the int 1) in YAML 1.2; "1" is another (a string)
    with pytest.raises(DuplicateKeyError):
        load_yaml("a: {1: x, 01: y}")
    assert load_yaml('a: {1: x, "1": y}') == {"a": {1: "x", "1": "y"}}


def test_a_key_repeated_in_the_agent_config_is_refused(tmp_path, small_doc, yaml_parser):
    from edge_agent.config import ConfigError, load_config

    site_file = tmp_path / "site.json"
    site_file.write_text(json.dumps(small_doc))
    site = small_doc["domains"][0]["name"]
    path = tmp_path / "agent.yaml"
    path.write_text(f"problem: {site_file}\nsite: {site}\nlisten:\n  port: 9000\n")
    assert load_config(path, env={}).listen.port == 9000
    path.write_text(f"problem: {site_file}\nsite: {site}\nlisten:\n  port: 9000\n  port: 9100\n")
    with pytest.raises(ConfigError) as exc:
        load_config(path, env={})
    assert exc.value.errors == [("listen", "duplicate key 'port' (lines 4 and 5)")]


# --- 3. YAML 1.2 numbers ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("0100", 100),  # YAML 1.1: octal 64
        ("-0100", -100),
        ("0o17", 15),
        ("0x1f", 31),
        ("1e3", 1000.0),  # YAML 1.1 (PyYAML): the string '1e3'
        ("2.5", 2.5),
        ("-.5", -0.5),
        ("1:30", "1:30"),  # YAML 1.1: base 60, 90
        ("1_000", "1_000"),  # YAML 1.1: 1000
        ("0b11", "0b11"),  # YAML 1.1: 3
        ("017_0", "017_0"),
        ("'0100'", "0100"),
        ("!!int 0100", 100),
        ("!!float 3", 3.0),
        ("true", True),
        ("~", None),
    ],
)
def test_yaml_numbers_are_read_as_yaml_1_2(text, value, yaml_parser):
    got = load_yaml(f"v: {text}")["v"]
    assert got == value and type(got) is type(value)


def test_yaml_infinity_and_nan_are_read(yaml_parser):
    doc = load_yaml("a: .inf\nb: -.Inf\nc: .nan")
    assert doc["a"] == float("inf") and doc["b"] == float("-inf") and doc["c"] != doc["c"]


def test_an_explicit_int_tag_on_other_text_is_a_yaml_error(yaml_parser):
    for text in ("1:30", "1_000", "0b11"):
        with pytest.raises(yaml.YAMLError, match="not a YAML 1.2 integer"):
            load_yaml(f"v: !!int {text}")


def test_octal_and_sexagesimal_capacities_are_no_longer_misread(tmp_path, yaml_parser):
    path = tmp_path / "p.yaml"
    path.write_text("domains: [{name: az-1}]\nnodes: [{name: n, domain: az-1, capacity: {cpu: 0100, memory: 1:30}}]\n")
    with pytest.raises(ProblemValidationError) as exc:
        pio.load_problem(path)
    assert _errors(exc) == [("nodes[0].capacity.memory", "expected a finite number, got string '1:30'")]
    path.write_text("domains: [{name: az-1}]\nnodes: [{name: n, domain: az-1, capacity: {cpu: 0100, memory: 10}}]\n")
    assert pio.load_problem(path).capacity[0, 0] == 100


# --- 5. text that is not Unicode -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("edit", "where"),
    [
        (lambda d: d["workloads"][0].update(name="shop/\ud800a"), "workloads[0].name"),
        (lambda d: d["nodes"][0].update(name="n-\udfff"), "nodes[0].name"),
        (lambda d: d["nodes"][0].update(labels={"zone": "a\ud800"}), "nodes[0].labels.zone"),
        (lambda d: d["nodes"][0].update(labels={"z\ud800": "a"}), "nodes[0].labels"),
        (lambda d: d["workloads"][0].update(node_selector={"k": "\udc80"}), "workloads[0].node_selector.k"),
        (lambda d: d["domains"][0].update(carbon_zone="\ud800"), "domains[0].carbon_zone"),
        (lambda d: d["latency_ms"].update({"r\ud800": {}}), "latency_ms"),
    ],
)
def test_a_lone_surrogate_is_refused_naming_the_field(tmp_path, small_doc, edit, where):
    edit(small_doc)
    path = tmp_path / "p.json"
    path.write_text(json.dumps(small_doc))  # ensure_ascii: "\ud800", as such a file holds it
    with pytest.raises(ProblemValidationError) as exc:
        pio.load_problem(path)
    assert [p for p, _ in _errors(exc)] == [where]
    assert "lone surrogate" in _errors(exc)[0][1]


def test_a_surrogate_pair_is_one_character_and_valid(small_doc):
    small_doc["workloads"][0]["name"] = "shop/\U0001f600"
    problem = problem_from_dict(json.loads(json.dumps(small_doc)))
    assert problem.workloads[0].name == "shop/\U0001f600"


# --- 6. problem files that are not files -----------------------------------------------------------


def test_a_character_device_is_refused_without_reading_it(tmp_path):
    zero = _device(tmp_path / "zero.json", ZERO_DEVICE)
    with pytest.raises(ProblemValidationError) as exc:
        load_document(zero)
    assert exc.value.source == str(zero)
    assert _errors(exc) == [("", "is a character device, not a file (give a problem file, or a pipe)")]


def test_a_socket_is_refused(tmp_path):
    path = tmp_path / "s.json"
    sock = socket.socket(socket.AF_UNIX)
    try:
        sock.bind(str(path))
        with pytest.raises(ProblemValidationError, match="is a socket, not a file"):
            load_document(path)
    finally:
        sock.close()


def test_a_pipe_from_process_substitution_is_read(small_doc):
    read_end, write_end = os.pipe()
    try:
        os.write(write_end, json.dumps(small_doc).encode())
        os.close(write_end)
        assert load_document(f"/dev/fd/{read_end}") == small_doc  # what <(cat p.json) passes
    finally:
        os.close(read_end)


def test_a_fifo_with_a_writer_is_read(tmp_path, small_doc):
    fifo = tmp_path / "p.json"
    os.mkfifo(fifo)

    def write() -> None:
        with open(fifo, "w") as f:
            f.write(json.dumps(small_doc))

    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    assert load_document(fifo) == small_doc
    writer.join(timeout=60)


def test_a_file_over_the_cap_is_refused(tmp_path, small_doc, monkeypatch):
    monkeypatch.setattr(pio, "MAX_DOCUMENT_BYTES", 100)
    path = tmp_path / "p.json"
    path.write_text(json.dumps(small_doc))
    with pytest.raises(ProblemValidationError, match="larger than 100 bytes"):
        load_document(path)
    read_end, write_end = os.pipe()
    try:
        os.write(write_end, b" " * 200)  # an endless stream stops at the cap the same way
        os.close(write_end)
        with pytest.raises(ProblemValidationError, match="larger than 100 bytes"):
            load_document(f"/dev/fd/{read_end}")
    finally:
        os.close(read_end)


# --- 7. small ones ---------------------------------------------------------------------------------


def test_a_blank_taint_key_is_refused(small_doc):
    small_doc["nodes"][0]["taints"] = [{"key": "  ", "value": "x"}]
    with pytest.raises(ProblemValidationError) as exc:
        problem_from_dict(small_doc)
    assert exc.value.errors == [("nodes[0].taints[0].key", "must not be empty")]


@pytest.mark.parametrize("domains", [["az-1"], [{"name": "az-1"}, 7], "az-1", None])
def test_a_mistyped_domain_list_gives_only_its_own_error(small_doc, domains):
    small_doc["domains"] = domains
    for w in small_doc["workloads"]:
        w["allowed_domains"] = ["az-1"]
    with pytest.raises(ProblemValidationError) as exc:
        problem_from_dict(small_doc)
    assert len(exc.value.errors) == 1 and exc.value.errors[0][0] in ("domains[0]", "domains[1]", "domains")


def test_unknown_domains_are_still_reported_when_the_domains_are_valid(small_doc):
    small_doc["nodes"][0]["domain"] = "nowhere"
    with pytest.raises(ProblemValidationError) as exc:
        problem_from_dict(small_doc)
    assert [p for p, _ in exc.value.errors] == ["nodes[0].domain"]

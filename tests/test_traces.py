"""openb trace loaders and the FGD paper's arrival sequence."""

from __future__ import annotations

import pytest

from iro_fed.traces.openb import (
    TraceFormatError,
    arrival_sequence,
    build_problem,
    gpu_capacity,
    load_nodes,
    load_pods,
)

NODES = "sn,cpu_milli,memory_mib,gpu,model\nn0,64000,262144,2,P100\nn1,32000,131072,0,\nn2,96000,393216,8,G2\n"
PODS = (
    "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos\n"
    "p2,4000,8192,1,500,,LS\n"
    "p0,12000,16384,1,1000,,LS\n"
    "p1,2000,4096,0,0,,BE\n"
    "p3,8000,30000,2,1000,G2|P100,LS\n"
    "p4,1000,1024,1,1200,T4,LS\n"
)


def write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    return path


def test_loads_nodes_and_pods(tmp_path):
    nodes = load_nodes(write(tmp_path, "n.csv", NODES))
    assert [(n.name, n.gpus, n.model) for n in nodes] == [("n0", 2, "P100"), ("n1", 0, ""), ("n2", 8, "G2")]
    assert gpu_capacity(nodes) == 10_000
    pods = {p.name: p for p in load_pods(write(tmp_path, "p.csv", PODS))}
    assert (pods["p2"].num_gpu, pods["p2"].gpu_milli, pods["p2"].gpu_total) == (1, 500, 500)  # a share
    assert (pods["p0"].num_gpu, pods["p0"].gpu_milli) == (1, 1000)  # one whole card
    assert (pods["p1"].num_gpu, pods["p1"].gpu_total) == (0, 0)  # CPU only
    assert (pods["p3"].gpu_total, pods["p3"].gpu_spec) == (2000, ("G2", "P100"))
    assert pods["p4"].gpu_milli == 1000  # above 1000 counts as 1000


def test_pod_list_without_gpu_spec_column(tmp_path):
    pods = load_pods(write(tmp_path, "p.csv", "name,cpu_milli,memory_mib,num_gpu,gpu_milli\na,1000,100,1,300\n"))
    assert pods[0].gpu_spec == () and pods[0].gpu_milli == 300


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("name,cpu_milli,memory_mib,num_gpu\na,1,1,0\n", "missing column(s) gpu_milli"),
        ("name,cpu_milli,memory_mib,num_gpu,gpu_milli\na,lots,1,0,0\n", "line 2: cpu_milli: expected an integer, got 'lots'"),
        ("name,cpu_milli,memory_mib,num_gpu,gpu_milli\na,1,1,0,0\na,1,1,0,0\n", "line 3: name: duplicate pod 'a' (also line 2)"),
        ("name,cpu_milli,memory_mib,num_gpu,gpu_milli\na,1,1,2,500\n", "line 2: gpu_milli: a pod with num_gpu=2 takes whole cards"),
        ("name,cpu_milli,memory_mib,num_gpu,gpu_milli\na,-5,1,0,0\n", "line 2: cpu_milli: must be >= 0, got -5"),
        ("name,cpu_milli,memory_mib,num_gpu,gpu_milli\n,1,1,0,0\n", "line 2: name: missing pod name"),
        ("name,cpu_milli,memory_mib,num_gpu,gpu_milli\n", "no pods"),
    ],
)
def test_malformed_pod_rows(tmp_path, text, message):
    with pytest.raises(TraceFormatError, match=message.replace("(", r"\(").replace(")", r"\)")):
        load_pods(write(tmp_path, "bad.csv", text))


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("sn,cpu_milli,memory_mib,gpu\nn,1,1,0\n", "missing column(s) model"),
        ("sn,cpu_milli,memory_mib,gpu,model\nn,0,1,0,\n", "line 2: cpu_milli: must be >= 1, got 0"),
        ("sn,cpu_milli,memory_mib,gpu,model\nn,1,1,2,\n", "line 2: model: a node with 2 GPU(s) needs a GPU model"),
        ("sn,cpu_milli,memory_mib,gpu,model\nn,1,1,0,\nn,1,1,0,\n", "duplicate node 'n'"),
    ],
)
def test_malformed_node_rows(tmp_path, text, message):
    with pytest.raises(TraceFormatError, match=message.replace("(", r"\(").replace(")", r"\)")):
        load_nodes(write(tmp_path, "bad.csv", text))


def test_missing_file(tmp_path):
    with pytest.raises(TraceFormatError, match="cannot read file"):
        load_pods(tmp_path / "nope.csv")


def make_pods(milli_list):
    from iro_fed.traces.openb import OpenbPod

    return [OpenbPod(f"p{i:02d}", 1000, 1000, 1 if m else 0, m) for i, m in enumerate(milli_list)]


def test_sequence_is_a_seeded_shuffle_of_the_name_sorted_pods():
    pods = make_pods([500] * 10)
    a = arrival_sequence(list(reversed(pods)), seed=7, capacity_milli=5000, target=1.0)
    b = arrival_sequence(pods, seed=7, capacity_milli=5000, target=1.0)
    assert [p.name for p in a] == [p.name for p in b]  # input order does not matter
    assert sorted(p.name for p in a) == [p.name for p in pods]
    c = arrival_sequence(pods, seed=8, capacity_milli=5000, target=1.0)
    assert [p.name for p in a] != [p.name for p in c]


def test_sequence_is_tuned_up_with_copies_until_the_next_draw_would_overshoot():
    pods = make_pods([300, 300, 0])  # 600 milli; target 1.3 x 1000 = 1300
    seq = arrival_sequence(pods, seed=1, capacity_milli=1000)
    total = sum(p.gpu_total for p in seq)
    assert total <= 1300 and total >= 1300 - 300
    copies = [p for p in seq if "#copy" in p.name]
    assert copies and [p.name for p in seq[: len(pods)]] != [p.name for p in copies]
    assert len({p.name for p in seq}) == len(seq)  # copies get unique names


def test_sequence_is_tuned_down_by_removing_random_pods():
    pods = make_pods([1000] * 10)  # 10,000 milli; target 1.3 x 5000 = 6500
    seq = arrival_sequence(pods, seed=3, capacity_milli=5000)
    assert sum(p.gpu_total for p in seq) == 6000


def test_build_problem_maps_gpus(tmp_path):
    nodes = load_nodes(write(tmp_path, "n.csv", NODES))
    pods = load_pods(write(tmp_path, "p.csv", PODS))
    problem = build_problem(nodes, pods)
    assert problem.gpu_count.tolist() == [2, 0, 8]
    assert problem.gpu_free[0].tolist()[:2] == [1000, 1000] and problem.gpu_free[1].tolist() == [-1] * 8
    assert problem.wl_gpu_count.tolist() == [1, 1, 0, 2, 1]
    assert problem.wl_gpu_milli.tolist() == [500, 1000, 0, 1000, 1000]
    assert problem.workloads[3].gpu_models == ("G2", "P100")


def test_the_real_trace_builds_the_papers_sequence():
    from pathlib import Path

    data = Path(__file__).resolve().parents[2] / "shared" / "data" / "alibaba-openb-2023"
    if not data.exists():
        pytest.skip("shared/data not present")
    nodes = load_nodes(data / "openb_node_list_gpu_node.csv")
    pods = load_pods(data / "openb_pod_list_default.csv")
    assert len(nodes) == 1213 and gpu_capacity(nodes) == 6_212_000 and len(pods) == 8152
    seq = arrival_sequence(pods, 42, gpu_capacity(nodes))
    assert 10_500 < len(seq) < 11_300  # "about 10,800 arrivals" (10,825 for seed 42)
    assert sum(p.gpu_total for p in seq) <= 1.3 * 6_212_000


# --- bad input: every kind names the file, line and column --------------------------------

POD_HEADER = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec\n"


@pytest.mark.parametrize(
    ("row", "message"),
    [
        # GPU columns that contradict each other are a broken row, not a CPU-only pod
        ("a,1,1,1,0,", "line 2: gpu_milli: a pod with num_gpu=1 needs gpu_milli 1..1000, got 0"),
        ("a,1,1,0,500,", "line 2: num_gpu: a pod with gpu_milli=500 needs num_gpu >= 1, got 0"),
        ("a,1,1,0,0,T4|P100", "line 2: gpu_spec: a pod without GPUs (num_gpu=0) names GPU models 'T4|P100'"),
        # numbers beyond the bounds (1e10, 1024 GPUs) and non-finite ones
        ("a,1e300,1,0,0,", "line 2: cpu_milli: must be at most 10,000,000,000, got '1e300'"),
        ("a,1,10000000001,0,0,", "line 2: memory_mib: must be at most 10,000,000,000, got 10000000001"),
        ("a,1,1,1025,1000,", "line 2: num_gpu: must be at most 1,024, got 1025"),
        ("a,1,1,99999999999999999999,1000,", "line 2: num_gpu: must be at most 1,024, got '99999999999999999999'"),
        ("a,inf,1,0,0,", "line 2: cpu_milli: expected an integer, got 'inf'"),
        ("a,1,nan,0,0,", "line 2: memory_mib: expected an integer, got 'nan'"),
        ("a,1,1,1,1e999,", "line 2: gpu_milli: expected an integer, got '1e999'"),
        ("a,1," + "9" * 5000 + ",0,0,", "line 2: memory_mib: expected an integer, got '99999999999999999999999999999999999...'"),
    ],
)
def test_malformed_gpu_columns_and_numbers(tmp_path, row, message):
    with pytest.raises(TraceFormatError) as info:
        load_pods(write(tmp_path, "bad.csv", POD_HEADER + "z,1,1,0,0,\n" + row + "\n"))
    assert str(info.value) == f"{tmp_path / 'bad.csv'} {message.replace('line 2', 'line 3')}"


def test_node_with_too_many_gpus(tmp_path):
    with pytest.raises(TraceFormatError, match=r"line 2: gpu: must be at most 1,024, got 100000$"):
        load_nodes(write(tmp_path, "n.csv", "sn,cpu_milli,memory_mib,gpu,model\nn,1,1,100000,G2\n"))


@pytest.mark.parametrize("loader", [load_pods, load_nodes])
def test_file_that_is_not_utf8(tmp_path, loader):
    header = POD_HEADER if loader is load_pods else "sn,cpu_milli,memory_mib,gpu,model\n"
    row = "p,1,1,0,0," if loader is load_pods else "n,1,1,0,"
    path = tmp_path / "latin1.csv"
    path.write_bytes((header + row + "\n" + "caf").encode() + b"\xe9" + row[1:].encode() + b"\n")
    with pytest.raises(TraceFormatError) as info:
        loader(path)
    at = len(header) + len(row) + 1 + len("caf")
    assert str(info.value) == f"{path}: not UTF-8 text: byte 0xe9 at offset {at} (line 3)"


def test_file_with_a_byte_order_mark_loads(tmp_path):
    path = tmp_path / "bom.csv"
    path.write_bytes(b"\xef\xbb\xbf" + (POD_HEADER + "a,1,1,1,500,T4\n").encode())
    assert [(p.name, p.gpu_milli, p.gpu_spec) for p in load_pods(path)] == [("a", 500, ("T4",))]


def test_row_count_is_capped(tmp_path, monkeypatch):
    from iro_fed.traces import openb

    monkeypatch.setattr(openb, "MAX_TRACE_ROWS", 3)
    rows = "".join(f"p{i},1,1,0,0,\n" for i in range(3))
    assert len(load_pods(write(tmp_path, "three.csv", POD_HEADER + rows))) == 3
    with pytest.raises(TraceFormatError, match=r"four\.csv line 5: more than 3 rows$"):
        load_pods(write(tmp_path, "four.csv", POD_HEADER + rows + "p3,1,1,0,0,\n"))


def test_arrival_count_is_capped(monkeypatch):
    # 1-milli pods tuned to 130 % of 1000 milli would need 1300 arrivals (of 6.2M milli: 8M)
    from iro_fed.traces import openb

    monkeypatch.setattr(openb, "MAX_ARRIVALS", 1000)
    pods = make_pods([1, 1])
    assert len(arrival_sequence(pods, seed=1, capacity_milli=700)) == 910  # 1.3 x 700: within the cap
    assert len(arrival_sequence(pods, seed=1, capacity_milli=1000, target=1.0)) == 1000  # exactly the cap
    with pytest.raises(TraceFormatError, match=r"would take more than 1,000 arrivals"):
        arrival_sequence(pods, seed=1, capacity_milli=1000)


def test_pod_list_without_gpu_pods_cannot_be_tuned(monkeypatch):
    # Copies of CPU-only pods add no GPU milli: tuning up would never end.
    from iro_fed.traces import openb

    monkeypatch.setattr(openb, "MAX_ARRIVALS", 1000)  # (before the fix: the loop would not end)
    with pytest.raises(TraceFormatError, match=r"no GPU pods, so it cannot be tuned to 1\.3 x the cluster's 1,000 GPU milli"):
        arrival_sequence(make_pods([0, 0, 0]), seed=1, capacity_milli=1000)
    assert len(arrival_sequence(make_pods([0, 0, 0]), seed=1, capacity_milli=0)) == 3  # no GPUs to tune to


def test_replay_command_exits_2_on_a_file_that_is_not_utf8(tmp_path):
    import subprocess
    import sys

    nodes = write(tmp_path, "n.csv", NODES)
    pods = tmp_path / "p.csv"
    pods.write_bytes(POD_HEADER.encode() + b"caf\xe9,1,1,0,0,\n")
    cmd = [sys.executable, "-m", "iro_fed.cli", "replay", "--nodes", str(nodes), "--pods", str(pods), "--policy", "best-fit"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert f"--pods: {pods}: not UTF-8 text: byte 0xe9 at offset {len(POD_HEADER) + 3} (line 2)" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_every_real_list_loads():
    from pathlib import Path

    data = Path(__file__).resolve().parents[2] / "shared" / "data" / "alibaba-openb-2023"
    if not data.exists():
        pytest.skip("shared/data not present")
    assert [len(load_nodes(data / f"openb_node_list_{k}.csv")) for k in ("all_node", "gpu_node")] == [1523, 1213]
    counts = {k: len(load_pods(data / f"openb_pod_list_{k}.csv")) for k in ("default", "gpushare40", "multigpu50", "gpuspec10", "cpu250")}
    assert counts["default"] == 8152 and min(counts.values()) > 0


# --- rows the csv module skips or splits: the line named is the file's own ------------------


def test_error_names_the_files_line_after_a_blank_line_and_a_quoted_line_break(tmp_path):
    # Blank lines are skipped by the reader and a quoted field may span lines: counting rows named
    # line 3 (the line before) for the bad row on line 4.
    text = POD_HEADER + "a,1,1,0,0,\n\nb,lots,1,0,0,\n"
    with pytest.raises(TraceFormatError, match=r"line 4: cpu_milli: expected an integer, got 'lots'$"):
        load_pods(write(tmp_path, "blank.csv", text))
    text = POD_HEADER + '"a\nb",1,1,0,0,\nc,1,1,0,q,\n'
    with pytest.raises(TraceFormatError, match=r"line 4: gpu_milli: expected an integer, got 'q'$"):
        load_pods(write(tmp_path, "quoted.csv", text))


def test_row_with_more_fields_than_the_header_is_refused(tmp_path):
    # Without a gpu_spec column, a sixth field "T4" was silently dropped: the pod lost its GPU model
    # constraint. A shifted or over-long row is broken, not data to drop.
    path = write(tmp_path, "extra.csv", "name,cpu_milli,memory_mib,num_gpu,gpu_milli\na,1,1,0,0\nb,1000,1024,1,500,T4\n")
    with pytest.raises(TraceFormatError) as info:
        load_pods(path)
    assert str(info.value) == f"{path} line 3: 6 fields, the header has 5 (name, cpu_milli, memory_mib, num_gpu, gpu_milli)"
    nodes = write(tmp_path, "n.csv", "sn,cpu_milli,memory_mib,gpu,model\nn,1,1,2,T4,8\n")
    with pytest.raises(TraceFormatError, match=r"line 2: 6 fields, the header has 5"):
        load_nodes(nodes)


def test_replay_command_exits_2_on_a_row_with_extra_fields(tmp_path, capsys):
    from iro_fed.cli import main

    nodes = write(tmp_path, "n.csv", NODES)
    pods = write(tmp_path, "p.csv", "name,cpu_milli,memory_mib,num_gpu,gpu_milli\na,1000,1024,1,500,T4\n")
    assert main(["replay", "--nodes", str(nodes), "--pods", str(pods), "--policy", "fgd"]) == 2
    assert f"--pods: {pods} line 2: 6 fields, the header has 5" in capsys.readouterr().err

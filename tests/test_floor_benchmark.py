"""benchmarks/fragmentation.py --floor on a small slice of the openb trace: the any-policy floor sits
at or below the share-packing bound and below what the policies reach."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
OPENB = REPO.parent / "shared" / "data" / "alibaba-openb-2023"
pytest.importorskip("ortools")
needs_openb = pytest.mark.skipif(not (OPENB / "openb_pod_list_default.csv").is_file(), reason="openb trace missing")


@needs_openb
def test_fragmentation_floor_row(load_benchmark, tmp_path: Path) -> None:
    data = tmp_path / "openb"
    data.mkdir()
    nodes = (OPENB / "openb_node_list_gpu_node.csv").read_text().splitlines()
    # 40 nodes of 8-card models and 1,000 pods without a GPU model: a small cluster with share packing to do
    eight = [line for line in nodes[1:] if line.split(",")[3] == "8"][:40]
    (data / "openb_node_list_gpu_node.csv").write_text("\n".join([nodes[0], *eight]) + "\n")
    pods = (OPENB / "openb_pod_list_default.csv").read_text().splitlines()
    (data / "openb_pod_list_default.csv").write_text("\n".join([pods[0], *[p for p in pods[1:] if p.split(",")[5] == ""][:1000]]) + "\n")
    module = load_benchmark("fragmentation", "fragmentation_floor")
    out = tmp_path / "f.json"
    assert module.main(["--data", str(data), "--pod-lists", "default", "--policies", "fgd-bestfit,iro-frag", "--seeds", "42",
                        "--workers", "1", "--floor", "--out", str(out), "--plot", str(tmp_path / "f.png")]) == 0
    doc = json.loads(out.read_text())
    floor = doc["any_policy_floor"]["median_pct"]["default"]
    bound = doc["share_packing_bound"]["median_pct"]["default"]
    assert doc["any_policy_floor"]["runs"][0]["optimal"]
    assert 0 <= floor <= bound
    for policy in ("fgd-bestfit", "iro-frag"):
        assert floor <= doc["median_unallocated_gpu_pct_at_100"]["default"][policy]


@needs_openb
def test_floor_without_ortools_exits_2_before_any_replay(load_benchmark, monkeypatch, tmp_path: Path, capsys) -> None:
    import importlib.util

    module = load_benchmark("fragmentation", "fragmentation_floor_no_ortools")
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "ortools" else real(name, *a))
    monkeypatch.setattr(module, "_run", lambda *_: (_ for _ in ()).throw(AssertionError("a replay ran")))
    with pytest.raises(SystemExit) as exit_info:
        module.main(["--pod-lists", "default", "--policies", "fgd", "--seeds", "42", "--workers", "1", "--floor",
                     "--out", str(tmp_path / "f.json"), "--plot", str(tmp_path / "f.png")])
    assert exit_info.value.code == 2
    assert "--floor: the floor row needs OR-Tools" in capsys.readouterr().err
    assert not list(tmp_path.iterdir())

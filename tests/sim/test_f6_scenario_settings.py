"""Scenario settings: the bank's ``carbon_*`` sources in any spelling and errors that name the
setting; openb's ``nodes`` bounded by its node file, ``time_scale``/``nodes`` reported as run,
and ``pods_file``/``nodes_file`` read from the working directory first.

Was: ``carbon_de=es`` failed (the 2022 calendar-year reading compared case-sensitively) while
``ES`` worked; ``const:abc`` said "scenario 'bank': could not convert string to float" naming no
setting; openb ``nodes=5000`` ran on the file's 1213 nodes and reported 5000, and ``time_scale``
0.0 instead of the compression used; a relative ``pods_file`` was looked up in the data folder
only, even when the file was in the working directory.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from iro_fed.cli import main
from iro_fed.sim import simulate
from iro_fed.sim.engine import SimConfigError
from iro_fed.sim.scenarios import build_scenario

from .helpers import needs_data

pytestmark = needs_data

NODES_CSV = "sn,cpu_milli,memory_mib,gpu,model\n" + "".join(f"n{i},64000,262144,2,T4\n" for i in range(6))
PODS_CSV = (
    "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time\n"
    + "".join(f"p{i},4000,8192,1,500,,LS,Running,{600 * i},{600 * i + 3600},{600 * i}\n" for i in range(12))
)


@pytest.mark.parametrize(("given", "canonical"), [("es", "ES"), (" no ", "NO"), ("de", "DE"), ("CONST:7", "const:7")])
def test_carbon_source_in_any_case_reads_the_same_series(given, canonical):
    mine = build_scenario("bank", hours=1, carbon_de=given)
    same = build_scenario("bank", hours=1, carbon_de=canonical)
    assert np.array_equal(mine.carbon["zone-a"], same.carbon["zone-a"])
    assert mine.params["carbon_de"] == canonical  # the report names one spelling


@pytest.mark.parametrize(
    ("value", "why"),
    [
        ("const:abc", "const: expected a carbon intensity in gCO2/kWh (e.g. const:120), got 'abc'"),
        ("const:", "const: expected a carbon intensity in gCO2/kWh"),
        ("const:-5", "carbon intensity must be finite and >= 0, got -5.0"),
        ("const:nan", "carbon intensity must be finite"),
        ("xx", "no carbon series for zone 'XX' (known: DE, GB, FR, ES, NO; or const:GRAMS_PER_KWH, codecarbon:ISO3)"),
    ],
)
def test_a_bad_carbon_source_names_its_setting(value, why):
    with pytest.raises(SimConfigError) as err:
        build_scenario("bank", hours=1, carbon_gb=value)
    assert str(err.value) == f"scenario 'bank': setting 'carbon_gb': {why}" or why in str(err.value)
    assert str(err.value).startswith("scenario 'bank': setting 'carbon_gb': ")


def test_the_command_line_reports_it_as_the_set_key(tmp_path, capsys):
    out = tmp_path / "r.json"
    argv = ["simulate", "--scenario", "bank", "--solver", "best-fit", "--hours", "1", "--out", str(out)]
    assert main([*argv, "--set", "carbon_de=const:abc"]) == 2
    assert "iro simulate: error: --set carbon_de: const: expected a carbon intensity" in capsys.readouterr().err
    assert not out.exists()
    assert main([*argv, "--set", "carbon_de=es"]) == 0
    assert json.loads(out.read_text())["scenario_params"]["carbon_de"] == "ES"


def test_a_users_file_for_a_lower_case_zone_is_named_as_given(tmp_path, capsys):
    own = tmp_path / "es.csv"
    own.write_text("Time,Carbon Intensity\n2023-02-28 00:00:00,100\n2023-02-28 01:00:00,101\n")
    argv = ["simulate", "--scenario", "bank", "--solver", "best-fit", "--hours", "1", "--out", str(tmp_path / "r.json")]
    assert main([*argv, "--set", "carbon_de=es", "--set", f"carbon.es={own}"]) == 2
    assert f"iro simulate: error: --set carbon.es: {own} covers 2023-02-28" in capsys.readouterr().err


@pytest.fixture
def own_trace(tmp_path, monkeypatch):
    """A 6-node, 12-pod openb trace in the working directory."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "nodes.csv").write_text(NODES_CSV)
    (tmp_path / "pods.csv").write_text(PODS_CSV)
    return {"nodes_file": "nodes.csv", "pods_file": "pods.csv"}


def test_openb_reads_files_of_the_working_directory(own_trace):
    sc = build_scenario("openb", hours=2, nodes=0, **own_trace)
    assert sum(pool.count for pool in sc.pools) == 6 and len(sc.pods) == 12


def test_openb_prefers_the_working_directory_over_the_data_folder(own_trace, tmp_path):
    (tmp_path / "openb_node_list_gpu_node.csv").write_text(NODES_CSV)  # the shipped file's name
    sc = build_scenario("openb", hours=2, pods_file="pods.csv")
    # not the data folder's first 200; the default 200 of a 6-row file takes the 6
    assert sum(pool.count for pool in sc.pools) == 6 and sc.params["nodes"] == 6


def test_openb_missing_or_bad_files_name_the_setting(own_trace, tmp_path):
    with pytest.raises(
        SimConfigError,
        match=r"setting 'pods_file': no such file 'nope.csv' \(looked in the working "
        r"directory .* and in .*alibaba-openb-2023\)",
    ):
        build_scenario("openb", hours=2, pods_file="nope.csv", nodes_file="nodes.csv")
    (tmp_path / "bad.csv").write_text("name,cpux\na,1\n")
    with pytest.raises(SimConfigError, match=r"^scenario 'openb': setting 'nodes_file': bad.csv: missing column"):
        build_scenario("openb", hours=2, nodes_file="bad.csv", pods_file="pods.csv")
    # the shipped name still reads the data folder when the working directory has no such file
    assert len(build_scenario("openb", hours=2, nodes=3, pods_file="pods.csv").pools) >= 1


def test_openb_refuses_more_nodes_than_its_file_has(own_trace, tmp_path):
    files = {key: str(tmp_path / name) for key, name in own_trace.items()}  # absolute: the old code read them too
    with pytest.raises(SimConfigError, match=r"setting 'nodes': must be at most 6 \(rows in .*nodes.csv\), got 7"):
        build_scenario("openb", hours=2, nodes=7, **files)
    assert sum(pool.count for pool in build_scenario("openb", hours=2, nodes=6, **files).pools) == 6


def test_openb_report_has_the_time_scale_and_node_count_as_run(own_trace, tmp_path):
    files = {key: str(tmp_path / name) for key, name in own_trace.items()}
    report = simulate("openb", "best-fit", hours=2, settings={"nodes": 0, **files}).report()
    params = report["scenario_params"]
    # creation times span 11 x 600 s: fit into 2 h, the compression is 6600 / 7200
    assert params["time_scale"] == pytest.approx(6600 / 7200) and params["nodes"] == 6
    given = simulate("openb", "best-fit", hours=2, settings={"nodes": 4, "time_scale": 2.0, **files}).report()
    assert given["scenario_params"]["time_scale"] == 2.0 and given["scenario_params"]["nodes"] == 4

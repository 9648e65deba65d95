"""openb's replay window, pod lists without times, and ``carbon.ZONE=~/FILE``.

Was: the default fit mapped the pod list's whole creation span (149.3 days, set by 33 pods
created before the trace's window, which starts at day 115.3) onto the run, so 99.6 % of the
pods of a 24 h run arrived in its last 6 h; a pod list without ``creation_time`` /
``deletion_time`` (openb_pod_list_multigpu50.csv) ran as "every pod at step 0, none leaves",
exit 0; ``--set carbon.DE=~/de.csv`` looked for a folder named ``~``.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from iro_fed.cli import main
from iro_fed.sim.engine import SimConfigError
from iro_fed.sim.scenarios import build_scenario
from iro_fed.sim.scenarios.openb import window_start
from iro_fed.sim.signals import data_dir
from iro_fed.traces.openb import OpenbPod, load_pods

from .helpers import needs_data

pytestmark = needs_data

OPENB = data_dir() / "alibaba-openb-2023"
needs_openb = pytest.mark.skipif(not (OPENB / "openb_pod_list_default.csv").is_file(), reason="openb trace not found")

NODES_CSV = "sn,cpu_milli,memory_mib,gpu,model\n" + "".join(f"n{i},64000,262144,2,T4\n" for i in range(6))
HEADER = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time\n"


def pod_row(name: str, created: int, deleted: int) -> str:
    return f"{name},4000,8192,1,500,,LS,Running,{created},{deleted},{created}\n"


#: A trace of the pods alive from t=100,000 s on: one pod of the days before, still running, then
#: 60 pods every 500 s from the window's start, each living 100 s (first departure: 100,100).
TRUNCATED_CSV = HEADER + pod_row("old", 0, 200_000) + "".join(
    pod_row(f"w{i}", 100_000 + 500 * i, 100_000 + 500 * i + 100) for i in range(60)
)


@pytest.fixture
def files(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "nodes.csv").write_text(NODES_CSV)
    (tmp_path / "pods.csv").write_text(TRUNCATED_CSV)
    return {"nodes_file": "nodes.csv", "pods_file": "pods.csv", "nodes": 0}


def test_a_truncated_trace_fits_its_window_and_the_old_pod_is_there_at_step_0(files):
    sc = build_scenario("openb", hours=1, **files)  # 60 steps of 60 s
    by_name = {p.name: p for p in sc.pods}
    # the window (100,100 .. 129,500 s) fits the hour: 29,400 s / 3,600 s
    assert sc.params["time_scale"] == pytest.approx(29_400 / 3_600)
    assert by_name["old"].arrival == 0
    # it has 99,900 s left at the window's start: past the run (the old fit gave it 200,000 s
    # from a start at t=0 and squeezed every other pod into the run's last 20 minutes)
    assert by_name["old"].departure == -1
    arrivals = np.array([p.arrival for p in sc.pods if p.name != "old"])
    assert arrivals.min() == 0 and arrivals.max() == sc.steps - 1
    assert np.sum(arrivals < sc.steps // 2) >= 25  # evenly spread: ~half in the first half-hour


def test_a_truncated_trace_with_a_time_scale_starts_at_the_window(files):
    sc = build_scenario("openb", hours=1, time_scale=10.0, **files)
    by_name = {p.name: p for p in sc.pods}
    # w1 is created 400 s after the window's start (100,100): 40 s at time_scale 10, step 0;
    # w2, 900 s after: step 1 (the old code counted from t=0: w0 at step 166, past the run)
    assert by_name["w1"].arrival == 0 and by_name["w2"].arrival == 1
    assert by_name["w59"].arrival == 49  # 29,400 s after the start
    assert by_name["old"].arrival == by_name["w0"].arrival == 0 and len(sc.pods) == 61


def test_window_start_keeps_the_first_creation_of_a_full_trace():
    def pod(i: int, created: int, deleted: int) -> OpenbPod:
        return OpenbPod(f"p{i}", 1000, 1000, 0, 0, creation_time=created, deletion_time=deleted)

    # pods every 600 s living 3,600 s: half are created before the first departure, at the
    # same rate as after it (test_f6_scenario_settings' own trace): not a truncated trace
    full = [pod(i, 600 * i, 600 * i + 3600) for i in range(12)]
    assert window_start(full) == 0
    assert window_start([pod(0, 5, -1), pod(1, 50, -1)]) == 5  # no departures
    assert window_start([pod(0, 5, 100), pod(1, 50, 60)]) == 5  # the first departure after the last creation


@needs_openb
def test_the_production_list_starts_at_its_first_departure():
    trace = load_pods(OPENB / "openb_pod_list_default.csv")
    start = window_start(trace)
    assert start == min(p.deletion_time for p in trace if p.deletion_time >= 0)
    assert start / 86400 == pytest.approx(115.335, abs=0.001)
    assert sum(p.creation_time < start for p in trace) == 33


@needs_openb
def test_openb_spreads_the_production_list_over_the_day():
    sc = build_scenario("openb", seed=1, hours=24, nodes=3)
    per_hour = np.bincount(np.array([p.arrival for p in sc.pods]) * int(sc.step_s) // 3600, minlength=24)
    assert per_hour.sum() == 8152
    # was [2, 0, 1, 0, 0, 5, ..., 494, 1551, 1259, 1272, 1431, 2123]: 99.6 % in the last 6 h
    assert per_hour[-6:].sum() < 0.4 * 8152
    assert per_hour.min() >= 50  # every hour has arrivals (was: 12 hours had none)
    assert sc.params["time_scale"] == pytest.approx((149.3259375 - 115.33532407407408) * 86400 / (24 * 3600))


def test_a_pod_list_without_times_is_refused(tmp_path, capsys):
    out = tmp_path / "r.json"
    (tmp_path / "untimed.csv").write_text("name,cpu_milli,memory_mib,num_gpu,gpu_milli\na,1000,1024,1,500\n")
    (tmp_path / "half.csv").write_text("name,cpu_milli,memory_mib,num_gpu,gpu_milli,creation_time\na,1000,1024,1,500,7\n")
    base = ["simulate", "--scenario", "openb", "--solver", "best-fit", "--hours", "1", "--out", str(out),
            "--set", "nodes=3"]
    assert main([*base, "--set", f"pods_file={tmp_path / 'untimed.csv'}"]) == 2
    err = capsys.readouterr().err
    assert "iro simulate: error: --set pods_file: " in err and "missing column(s) creation_time, deletion_time" in err
    assert main([*base, "--set", f"pods_file={tmp_path / 'half.csv'}", "--set", "time_scale=1"]) == 2
    err = capsys.readouterr().err
    assert "--set pods_file: " in err and "missing column(s) deletion_time" in err
    assert not out.exists()


@needs_openb
def test_the_shipped_multigpu_list_is_refused_by_the_simulator_only():
    with pytest.raises(SimConfigError, match=r"setting 'pods_file': .*openb_pod_list_multigpu50.csv: missing column\(s\) "
                                             r"creation_time, deletion_time"):
        build_scenario("openb", hours=1, nodes=3, pods_file="openb_pod_list_multigpu50.csv")
    assert len(load_pods(OPENB / "openb_pod_list_multigpu50.csv")) == 9061  # the FGD replay still reads it


def test_a_users_carbon_file_under_home(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("HOME", str(tmp_path))
    # bank's default start 2020-03-02 00:00 UTC reads a day of history before it
    t0 = np.datetime64("2020-03-01T00:00:00", "s").astype(np.int64)
    rows = "".join(f"{np.datetime_as_string(np.datetime64(int(t0 + 3600 * h), 's')).replace('T', ' ')},123\n"
                   for h in range(48))
    (tmp_path / "de.csv").write_text("Time,Carbon Intensity\n" + rows)
    sc = build_scenario("bank", hours=2, **{"carbon.DE": "~/de.csv"})
    assert sc.notes["carbon_files"] == {"DE": "~/de.csv"}
    assert any(np.allclose(series, 123.0) for series in sc.carbon.values())
    out = tmp_path / "r.json"
    assert main(["simulate", "--scenario", "bank", "--solver", "best-fit", "--hours", "1", "--out", str(out),
                 "--set", "carbon.DE=~/de.csv"]) == 0, capsys.readouterr().err
    assert json.loads(out.read_text())["scenario_params"]["carbon_files"] == {"DE": "~/de.csv"}

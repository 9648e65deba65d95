"""``iro scheduler`` and the feedback loop's fine-tunes (f10): the dqn solver follows its policy
registry's ``latest`` (the fine-tunes it publishes), the action folders are made only once every
flag is accepted, and fine-tunes too short to learn are refused."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

import pytest

from iro_fed.cli import main
from iro_fed.k8s.testing import FakeApiServer, make_node, make_pod
from tests.k8s.helpers import Clock, make_scheduler


def _publish(reg: Path, version: int, *, broken: bool = False) -> str:
    """Version ``version`` of a policy registry by hand (a copy of the shipped policy), then ``latest`` pointed at it; ``broken``: a checkpoint that cannot load."""
    from solvers.dqn.solver import DEFAULT_POLICY

    folder = reg / f"v{version:04d}"
    folder.mkdir(parents=True)
    if broken:
        (folder / "policy.pt").write_bytes(b"not a checkpoint")
    else:
        shutil.copy(DEFAULT_POLICY, folder / "policy.pt")
        shutil.copy(DEFAULT_POLICY.with_suffix(".json"), folder / "policy.json")
    pointer = f"v{version:04d}/policy.pt"
    (reg / "latest").write_text(pointer + "\n")
    return pointer


def _version(sched) -> int:
    """The registry version the scheduler's dqn solver has loaded (from its checkpoint's folder)."""
    return int(Path(sched.solver._primary.loaded.path).parent.name[1:])


@pytest.fixture
def cluster(api: FakeApiServer) -> FakeApiServer:
    api.add_node(make_node("n0", cpu="4"))
    api.add_pod(make_pod("web", cpu="1", scheduler="iro"))
    return api


def test_the_dqn_solver_follows_the_registry_latest_and_keeps_the_last_good_version(
    cluster, kubeconfig, tmp_path, caplog
):
    """--solver dqn --solver-set policy=REGISTRY kept binding with the policy it started with,
    while the fine-tunes it published moved ``latest`` (docs: "the DQN solver ... load latest")."""
    pytest.importorskip("torch")
    reg = tmp_path / "reg"
    first = _publish(reg, 1)
    sched = make_scheduler(kubeconfig, Clock(), solver="dqn", solver_params={"policy": str(reg)})
    try:
        assert _version(sched) == 1
        second = _publish(reg, 2)  # a fine-tune published the next version
        pods = sched.ready_pods()
        assert [p["metadata"]["name"] for p in pods] == ["web"]
        sched.schedule_batch(pods)  # the next batch is solved with the new version
        assert _version(sched) == 2
        assert cluster.get("pods", "default/web")["spec"].get("nodeName") == "n0"
        assert sched.policy_registry == reg and sched.policy_version == second and first != second
        assert not sched.refresh_policy()  # nothing new
        # a version that cannot load: logged once, the last good policy stays
        good = sched.solver
        _publish(reg, 3, broken=True)
        with caplog.at_level(logging.WARNING, logger="iro_fed.k8s.scheduler"):
            assert not sched.refresh_policy() and not sched.refresh_policy()
        assert sched.solver is good and sched.policy_version == second and _version(sched) == 2
        assert len([r for r in caplog.records if "cannot be loaded" in r.getMessage()]) == 1
        _publish(reg, 4)  # the next good one is taken
        assert sched.refresh_policy() and _version(sched) == 4
    finally:
        sched.stop()


def test_a_policy_file_or_another_solver_is_not_polled(kubeconfig, tmp_path):
    sched = make_scheduler(kubeconfig, Clock())
    try:
        assert sched.policy_registry is None and not sched.refresh_policy()
    finally:
        sched.stop()
    (tmp_path / "policy.pt").write_bytes(b"")
    sched = make_scheduler(kubeconfig, Clock(), solver="dqn", solver_params={"policy": str(tmp_path / "policy.pt")})
    try:
        assert sched.policy_registry is None
    finally:
        sched.stop()


def test_a_registry_made_after_the_scheduler_started_is_followed(kubeconfig, tmp_path):
    """--fine-tune-registry DIR is made once every flag is accepted, after the scheduler is built:
    its first published version is loaded."""
    pytest.importorskip("torch")
    reg = tmp_path / "reg"
    sched = make_scheduler(kubeconfig, Clock(), solver="dqn", solver_params={"policy": str(reg)})
    try:
        assert sched.policy_registry == reg and sched.policy_version is None and not sched.refresh_policy()
        _publish(reg, 1)
        assert sched.refresh_policy() and _version(sched) == 1
    finally:
        sched.stop()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        # fewer decisions make no gradient update: the "fine-tuned" version was the starting policy
        (["--fine-tune-registry", "reg", "--fine-tune-steps", "65"], "--fine-tune-steps: must be at least 66"),
        (["--round-request", ""], "--round-request: expected a folder, got ''"),
        (["--fine-tune-registry", ""], "--fine-tune-registry: expected a folder, got ''"),
    ],
)
def test_scheduler_refuses_fine_tune_flags(tmp_path, monkeypatch, capsys, args, message):
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.chdir(tmp_path)
    assert main(["scheduler", "--kubeconfig", __file__, "--feedback-threshold", "0.1", *args]) == 2
    assert message in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_scheduler_makes_no_action_folder_when_a_later_flag_is_refused(tmp_path, monkeypatch, capsys):
    """The folders were made while the actions were checked, then the bad kubeconfig exited 2."""
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "kubeconfig").write_text("not: [a kubeconfig")
    argv = [
        "scheduler",
        "--kubeconfig",
        "kubeconfig",
        "--feedback-threshold",
        "0.1",
        "--fine-tune-registry",
        "out/reg",
        "--round-request",
        "out/rr",
    ]
    assert main(argv) == 2
    assert "--kubeconfig" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kubeconfig"]

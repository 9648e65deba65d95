"""Batch jobs due at the run's last step boundary count as due (they are decided by then)."""

from __future__ import annotations

import solvers
from iro_fed.sim import SimConfig, Simulator
from iro_fed.sim.model import PodSpec
from tests.sim.helpers import tiny_scenario


def totals(pods: list[PodSpec], steps: int = 8) -> dict:
    sc = tiny_scenario(steps=steps, pods=pods, own_nodes=1, cloud_nodes=0)
    return Simulator(sc, solvers.make("first-fit"), SimConfig(deferral="none")).run().totals


def test_a_job_that_cannot_run_and_is_due_at_the_runs_end_is_a_miss():
    # 8 steps: the run ends at boundary 8. "stuck" fits no node and is due at 8; by the end of
    # the run its deadline has come and it has not finished. Before, deadline < steps left it
    # out: 0 jobs, 0 misses.
    t = totals([PodSpec("stuck", "batch", 9000, 1024, arrival=0, duration=2, deadline=8)])
    assert (t["batch_jobs"], t["batch_completed"], t["deadline_misses"]) == (1, 0, 1)


def test_a_job_that_finishes_in_the_last_step_and_is_due_then_is_on_time():
    # 4 steps of work from step 4: done at the end of step 7 (finished = 8 = its deadline).
    t = totals([PodSpec("last", "batch", 1000, 1024, arrival=4, duration=4, deadline=8)])
    assert (t["batch_jobs"], t["batch_completed"], t["deadline_misses"]) == (1, 1, 0)
    assert t["batch_completion_min"] == 4.0


def test_a_job_due_after_the_run_is_still_left_out():
    t = totals([PodSpec("later", "batch", 9000, 1024, arrival=0, duration=2, deadline=9)])
    assert (t["batch_jobs"], t["deadline_misses"]) == (0, 0)

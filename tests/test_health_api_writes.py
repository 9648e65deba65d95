"""The scheduler's /healthz: a batch of unschedulable pods whose status patches and Events are
slow (each answered within the API timeout) is progress, not a wedged loop."""

import threading

import pytest

pytest.importorskip("kubernetes")
from iro_fed.k8s.testing import FakeApiServer, make_node, make_pod  # noqa: E402
from tests.k8s.helpers import Clock, cycle, make_scheduler  # noqa: E402


def test_slow_failedscheduling_writes_are_progress(tmp_path) -> None:
    api = FakeApiServer().start()
    try:
        api.add_node(make_node("n0", cpu="2"))
        for i in range(3):
            api.add_pod(make_pod(f"big{i}", cpu="64", scheduler="iro"))
        clock = Clock()
        s = make_scheduler(str(api.write_kubeconfig(tmp_path / "k.yaml")), clock)
        assert s.stall_s < 3 * 2 * 20.0  # three pods: two writes of 20 s each pass the limit
        stop = threading.Event()
        s._thread = threading.Thread(target=stop.wait, daemon=True)  # the loop, alive
        s._thread.start()
        seen = []
        for name in ("patch_pod_status", "create_event"):
            real = getattr(s.kube, name)
            def slow(*a, _real=real, _name=name, **k):
                clock.advance(20.0)  # each write answered after 20 s (a slow API server; timeout 30 s)
                seen.append((_name, s.health()))
                return _real(*a, **k)
            setattr(s.kube, name, slow)
        s._progress_at = clock()  # a pass begins
        batch = cycle(s)
        assert [o.status for o in batch.pods] == ["unschedulable"] * 3
        assert len(seen) == 6
        stop.set()
        assert all(ok for _, (ok, _) in seen), seen
    finally:
        api.stop()

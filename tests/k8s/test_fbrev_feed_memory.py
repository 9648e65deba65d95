"""NodeMetricsFeed keeps per-node state only for the nodes its loop keeps (feedback review)."""

from __future__ import annotations

from iro_fed.k8s.feedback import FeedbackLoop, NodeMetricsFeed

T0 = 1_796_000_000.0


def test_the_feed_forgets_the_nodes_its_loop_forgot(api, kube):
    """The loop keeps per-node state for at most ``max_nodes`` nodes so that the names of nodes
    long gone (autoscaling, renames) do not pile up in a long-running scheduler; the feed kept
    the last timestamp of every node it ever fed, for good."""
    loop = FeedbackLoop(threshold=0.1, calibration=0, clock=lambda: T0 - 60, max_nodes=3)
    feed = NodeMetricsFeed(kube, loop, interval_s=3600)
    for gen in range(10):  # each poll: a new node that scaled up, the oldest gone for good
        node = f"pool-{gen}"
        loop.predict(f"ns/p{gen}", node, 2000.0, 8000.0)
        api.set_node_metrics(node, "2", at=T0 + gen)
        with api._lock:
            api.node_metrics.pop(f"pool-{gen - 3}", None)
        assert feed.poll() == 1  # the new node's scrape is fed
    assert len(loop.latest) == 3
    assert set(feed._fed_at) <= set(loop.latest)  # was all 10 names ever fed
    assert loop.observations == 10
    # The nodes it still keeps are deduplicated as before.
    repeats = feed.repeats
    assert feed.poll() == 0 and feed.repeats == repeats + 3 and loop.observations == 10


def test_a_node_forgotten_and_decided_on_again_is_judged_only_by_newer_scrapes(api, kube):
    """Dropping a forgotten node's last timestamp cannot feed its old scrape again: the loop's
    new decision on it is newer than that scrape."""
    clock = {"now": T0 - 60}
    loop = FeedbackLoop(threshold=0.1, calibration=0, clock=lambda: clock["now"], max_nodes=1)
    feed = NodeMetricsFeed(kube, loop, interval_s=3600)
    loop.predict("ns/a", "a", 2000.0, 8000.0)
    api.set_node_metrics("a", "2", at=T0)
    assert feed.poll() == 1
    clock["now"] = T0 + 30
    loop.predict("ns/b", "b", 2000.0, 8000.0)  # a is forgotten (max_nodes=1)
    assert feed.poll() == 0 and "a" not in feed._fed_at
    clock["now"] = T0 + 40
    loop.predict("ns/a2", "a", 4000.0, 8000.0)  # a again, after its last scrape
    assert feed.poll() == 0 and loop.observations == 1  # its scrape at T0 cannot show ns/a2
    api.set_node_metrics("a", "4", at=T0 + 60)
    assert feed.poll() == 1 and loop.observations == 2
    assert loop.by_key["ns/a2"].observed_util == 0.5

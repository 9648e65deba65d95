"""Two consumers of one round-request folder (review finding): a request is consumed once, and
the consumer that comes second neither crashes nor files the request as rejected."""

from __future__ import annotations

from pathlib import Path

from iro_fed.federated.round_requests import RoundRequestQueue


class _Overtaken(RoundRequestQueue):
    """A consumer that another consumer overtakes between listing ``requests/`` and reading a file
    (real files and moves, the order forced)."""

    def pending(self) -> list[Path]:
        listed = super().pending()
        self.other = RoundRequestQueue(self.root).claim()
        return listed


def test_a_request_another_consumer_claimed_first_is_skipped(tmp_path, write_round_request):
    write_round_request(tmp_path, "edge-madrid")
    second = _Overtaken(tmp_path)
    claimed, rejected = second.claim()  # was: FileNotFoundError moving the vanished file to rejected/
    assert (claimed, rejected) == ([], [])
    first_claimed, first_rejected = second.other
    assert [r.site for r in first_claimed] == ["edge-madrid"] and first_rejected == []
    assert list((tmp_path / "rounds" / "rejected").iterdir()) == []
    assert [p.name for p in (tmp_path / "rounds" / "running").iterdir()] == [first_claimed[0].path.name]

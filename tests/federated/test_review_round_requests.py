"""Two consumers of one round-request folder (review findings): a request is consumed once; a
second consumer is refused while the first lives, and a request that vanishes between the listing
and the move is skipped, not filed as rejected."""

from __future__ import annotations

from pathlib import Path

import pytest

from iro_fed.federated.round_requests import ConsumerBusyError, RoundRequestQueue


class _Overtaken(RoundRequestQueue):
    """A consumer whose listed request is taken away between listing ``requests/`` and reading the
    file (real files and moves, the order forced): first another consumer tries to claim it, then
    someone moves it out of the folder by hand."""

    def pending(self) -> list[Path]:
        listed = super().pending()
        with pytest.raises(ConsumerBusyError):  # a second consumer cannot claim beside this one
            RoundRequestQueue(self.root).claim()
        for path in listed:
            path.rename(self.root / path.name)
        return listed


def test_a_request_that_vanishes_before_the_claim_is_skipped(tmp_path, write_round_request):
    path = Path(write_round_request(tmp_path, "edge-madrid"))
    second = _Overtaken(tmp_path)
    claimed, rejected = second.claim()  # was: FileNotFoundError moving the vanished file to rejected/
    assert (claimed, rejected) == ([], [])
    assert list((tmp_path / "rounds" / "rejected").iterdir()) == []
    assert list((tmp_path / "rounds" / "running").iterdir()) == []
    assert (tmp_path / path.name).is_file()

"""The agent's structured logs: JSON lines on stderr, robust to stderr being swapped and closed."""

from __future__ import annotations

import io
import json
import logging
import sys

from edge_agent.logs import LOGGER_NAME, event, setup_logging


def _restore(saved: tuple[list[logging.Handler], int, bool]) -> None:
    log = logging.getLogger(LOGGER_NAME)
    log.handlers[:], log.level, log.propagate = saved


def _save() -> tuple[list[logging.Handler], int, bool]:
    log = logging.getLogger(LOGGER_NAME)
    return log.handlers[:], log.level, log.propagate


def test_lines_are_json_with_the_event_fields():
    saved, out = _save(), io.StringIO()
    try:
        log = setup_logging("info", stream=out)
        event(log, logging.INFO, "placed", pod="default/a", node="n1")
        log.debug("below the level")
    finally:
        _restore(saved)
    lines = out.getvalue().splitlines()
    assert len(lines) == 1
    doc = json.loads(lines[0])
    assert (doc["level"], doc["logger"], doc["msg"], doc["pod"], doc["node"]) == ("info", LOGGER_NAME, "placed", "default/a", "n1")
    assert doc["ts"].endswith("Z")


def test_default_stream_follows_stderr_after_the_one_it_started_with_is_closed(monkeypatch):
    # edge_agent.cli.main sets up logging on whatever sys.stderr is then: a test's capture, which
    # is closed when the test ends. Later records must go to the stderr of their time, not raise
    # "--- Logging error --- ValueError: I/O operation on closed file".
    saved, first, later = _save(), io.StringIO(), io.StringIO()
    errors: list[BaseException | None] = []
    monkeypatch.setattr(logging.Handler, "handleError", lambda self, record: errors.append(sys.exc_info()[1]))
    try:
        monkeypatch.setattr(sys, "stderr", first)
        log = setup_logging("info")
        log.info("one")
        first.close()
        monkeypatch.setattr(sys, "stderr", later)
        log.info("two")
    finally:
        _restore(saved)
    assert errors == []
    assert [json.loads(line)["msg"] for line in later.getvalue().splitlines()] == ["two"]

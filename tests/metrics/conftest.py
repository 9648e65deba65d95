"""A real Prometheus on 127.0.0.1 (Debian's `prometheus` package; .ci/run installs it)."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
RULES = REPO / "deploy" / "prometheus" / "iro-fed-rules.yaml"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def free_port_factory() -> Callable[[], int]:
    return free_port


class PrometheusProcess:
    def __init__(self, proc: subprocess.Popen, url: str, log: Path) -> None:
        self.proc, self.url, self.log = proc, url, log


@pytest.fixture(scope="module")
def run_prometheus(tmp_path_factory) -> Iterator[Callable[..., PrometheusProcess]]:
    """``run_prometheus(targets, port=None)``: a Prometheus scraping ``targets`` every second
    with the project's recording rules, on a fresh data dir; stopped at the end of the module."""
    binary = shutil.which("prometheus")
    if binary is None:
        pytest.skip("the prometheus binary is not installed (apt-get install prometheus; .ci/run does it)")
    started: list[subprocess.Popen] = []

    def run(targets: list[str], port: int | None = None) -> PrometheusProcess:
        port = port or free_port()
        work = tmp_path_factory.mktemp("prometheus")
        config = {
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s", "scrape_timeout": "900ms"},
            "rule_files": [str(RULES)],
            "scrape_configs": [{"job_name": "edge-agent", "static_configs": [{"targets": targets}]}],
        }
        (work / "prometheus.yml").write_text(yaml.safe_dump(config))
        log = work / "prometheus.log"
        proc = subprocess.Popen(
            [binary, f"--config.file={work / 'prometheus.yml'}", f"--storage.tsdb.path={work / 'data'}",
             f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"],
            stdout=log.open("w"), stderr=subprocess.STDOUT,
        )
        started.append(proc)
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise AssertionError(f"prometheus exited: {log.read_text()}")
            try:
                with urllib.request.urlopen(f"{url}/-/ready", timeout=1) as resp:
                    if resp.status == 200:
                        return PrometheusProcess(proc, url, log)
            except OSError:
                time.sleep(0.1)
        raise AssertionError(f"prometheus not ready: {log.read_text()}")

    yield run
    for proc in started:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

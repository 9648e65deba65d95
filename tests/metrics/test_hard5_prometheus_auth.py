"""PrometheusClient against a real loopback server that requires authentication: user info in the
URL is sent as HTTP Basic auth (it was left in the host and never sent) and its password never
shows; a bearer token file is read for each request; a timeout Prometheus cannot read is refused."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from iro_fed.metrics.prometheus import PrometheusClient, PrometheusQueryError
from tests.metrics.promapi import serve, vector

ANSWER = vector([{"metric": {"node": "n1"}, "value": [1.0, "0.5"]}])
REFUSED = json.dumps({"status": "error", "errorType": "unauthorized", "error": "bad credentials"}).encode()


@dataclass
class Auth:
    """What the server accepts (``expected``: the Authorization header) and what it was sent."""

    expected: str | None = ""
    seen: list[str | None] = field(default_factory=list)


@pytest.fixture
def server() -> Iterator[tuple[int, Auth]]:
    """A loopback Prometheus API that requires ``Auth.expected``: its port, and its Auth."""
    auth = Auth()

    def respond(handler):
        got = handler.headers.get("Authorization")
        auth.seen.append(got)
        return (200, ANSWER) if got == auth.expected else (401, REFUSED)

    with serve(respond) as url:
        yield int(url.rsplit(":", 1)[1]), auth


def basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


def test_user_info_in_the_url_is_sent_as_basic_auth(server) -> None:
    port, handler = server
    handler.expected = basic("prom user", "s3cr:t")
    client = PrometheusClient(f"http://prom%20user:s3cr%3At@127.0.0.1:{port}/", timeout_s=5)
    [s] = client.query("up")
    assert (s.labels, s.value) == ({"node": "n1"}, 0.5)
    assert handler.seen == [handler.expected]
    assert client.base_url == f"http://127.0.0.1:{port}"  # the user info is out of what urllib sees
    assert "s3cr" not in repr(client) and "prom%20user:***@127.0.0.1" in repr(client)


def test_a_refused_password_never_shows_in_the_error(server) -> None:
    port, handler = server
    handler.expected = basic("alice", "right")
    client = PrometheusClient(f"http://alice:wrong-pw@127.0.0.1:{port}", timeout_s=5)
    with pytest.raises(PrometheusQueryError, match="HTTP 401") as info:
        client.query("up")
    assert "wrong-pw" not in str(info.value)
    assert handler.seen == [basic("alice", "wrong-pw")]
    with pytest.raises(ValueError, match=r"prometheus url") as bad:
        PrometheusClient("ftp://alice:wrong-pw@127.0.0.1:9090")
    assert "wrong-pw" not in str(bad.value) and "alice:***@" in str(bad.value)


def test_a_bearer_token_file_is_read_for_each_request(server, tmp_path: Path) -> None:
    port, handler = server
    token = tmp_path / "token"
    token.write_text("first-token\n")
    handler.expected = "Bearer first-token"
    client = PrometheusClient(f"http://127.0.0.1:{port}", timeout_s=5, bearer_token_file=str(token))
    assert client.query("up")[0].value == 0.5
    token.write_text("rotated-token\n")  # as the kubelet rotates a projected token
    handler.expected = "Bearer rotated-token"
    assert client.query("up")[0].value == 0.5
    assert handler.seen == ["Bearer first-token", "Bearer rotated-token"]
    with pytest.raises(ValueError, match="bearer_token_file"):
        PrometheusClient("http://u:p@127.0.0.1:9090", bearer_token_file=str(token))


@pytest.mark.parametrize("kw,name", [({"timeout_s": 1e10}, "timeout_s"), ({"timeout_s": 1e300}, "timeout_s"),
                                     ({"deadline_s": 2e9}, "deadline_s")])
def test_a_timeout_prometheus_cannot_read_is_refused_by_name(kw, name) -> None:
    # Prometheus reads "timeout" as float seconds into int64 nanoseconds: 1e10 s was a 400 on
    # every query (and a socket timeout that large overflows).
    with pytest.raises(ValueError, match=name):
        PrometheusClient("http://127.0.0.1:9090", **kw)


def test_the_largest_timeout_is_sent_as_prometheus_reads_it(server) -> None:
    port, handler = server
    handler.expected = None  # no Authorization header
    client = PrometheusClient(f"http://127.0.0.1:{port}", timeout_s=1e9)
    assert client.query("up")[0].value == 0.5  # "1000000000.0" s: 1e18 ns, within int64

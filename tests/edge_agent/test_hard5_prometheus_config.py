"""The agent's Prometheus auth settings: a bearer token file, and a url's password kept out of errors."""

from __future__ import annotations

import base64

import pytest

from edge_agent.agent import Agent
from edge_agent.config import ConfigError, load_config
from tests.edge_agent.test_config import write
from tests.metrics.promapi import serve, vector


def test_a_bad_url_with_a_password_is_named_without_the_password(tmp_path, site_file):
    path = write(tmp_path, {"problem": str(site_file), "prometheus": {"url": "ftp://alice:s3cret@h:9090"}})
    with pytest.raises(ConfigError) as err:
        load_config(path, env={})
    assert "prometheus.url" in str(err.value) and "alice:***@" in str(err.value)
    assert "s3cret" not in str(err.value)


def test_a_url_the_client_refuses_is_a_config_error_not_a_crash_at_start(tmp_path, site_file):
    # Was: accepted by the config check, then a ValueError when the agent built its client.
    path = write(tmp_path, {"problem": str(site_file), "prometheus": {"url": "http://:9090"}})
    with pytest.raises(ConfigError, match=r"prometheus\.url"):
        load_config(path, env={})


def test_the_token_file_must_exist_need_a_url_and_not_come_with_a_password(tmp_path, site_file):
    token = tmp_path / "token"
    token.write_text("t0k3n\n")
    cases = [
        ({"bearer_token_file": str(tmp_path / "missing")} | {"url": "http://127.0.0.1:9090"}, "no such file"),
        ({"bearer_token_file": str(token)}, "needs prometheus.url"),
        ({"bearer_token_file": str(token), "url": "http://u:p@127.0.0.1:9090"}, "one or the other"),
    ]
    for prom, message in cases:
        with pytest.raises(ConfigError) as err:
            load_config(write(tmp_path, {"problem": str(site_file), "prometheus": prom}), env={})
        assert "prometheus.bearer_token_file" in str(err.value) and message in str(err.value), str(err.value)
    cfg = load_config(write(tmp_path, {"problem": str(site_file), "prometheus": {"url": "http://127.0.0.1:9090"}}),
                      env={"IRO_AGENT_PROMETHEUS_BEARER_TOKEN_FILE": str(token)})
    assert cfg.prometheus.bearer_token_file == token.resolve()


@pytest.mark.parametrize("auth", ["token", "basic"])
def test_the_agents_client_sends_the_configured_credentials(tmp_path, site_file, auth):
    seen: list[str | None] = []

    def respond(handler):
        seen.append(handler.headers.get("Authorization"))
        return 200, vector([])

    with serve(respond) as url:
        host, port = url.removeprefix("http://").split(":")
        token = tmp_path / "token"
        token.write_text("t0k3n\n")
        prom = ({"url": f"http://{host}:{port}", "bearer_token_file": str(token)} if auth == "token"
                else {"url": f"http://alice:s3cret@{host}:{port}"})
        cfg = load_config(write(tmp_path, {"problem": str(site_file), "prometheus": prom}), env={})
        agent = Agent(cfg)
        assert agent.prometheus is not None
        agent.prometheus.query("up")
        expected = "Bearer t0k3n" if auth == "token" else "Basic " + base64.b64encode(b"alice:s3cret").decode()
        assert seen == [expected]
        assert "s3cret" not in repr(agent.prometheus)


def test_a_url_urllib_cannot_split_is_a_config_error(tmp_path, site_file):
    # Was: "ValueError: Invalid IPv6 URL" from urlparse, a traceback out of edge-agent check / run.
    path = write(tmp_path, {"problem": str(site_file), "prometheus": {"url": "http://[::1"}})
    with pytest.raises(ConfigError, match=r"prometheus\.url.*expected http\(s\)://host:port"):
        load_config(path, env={})

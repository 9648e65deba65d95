"""Agent settings: file, environment, --port; every error names its key."""

from __future__ import annotations

import pytest
import yaml

from edge_agent.config import ConfigError, load_config


def write(tmp_path, doc):
    path = tmp_path / "agent.yaml"
    path.write_text(yaml.safe_dump(doc) if not isinstance(doc, str) else doc)
    return path


def test_file_env_and_port_precedence(tmp_path, site_file):
    (tmp_path / "sub").mkdir()
    path = write(tmp_path / "sub", {"problem": "../site.json", "site": "edge-1", "listen": {"port": 9000},
                                    "prometheus": {"url": "http://127.0.0.1:9090", "scoring": "max",
                                                   "queries": {"cpu_used_cores": "my_cpu"}},
                                    "store": {"path": "exp.db"}})
    cfg = load_config(path, env={})
    assert cfg.problem == site_file.resolve() or cfg.problem.resolve() == site_file.resolve()
    assert cfg.listen.port == 9000 and cfg.listen.host == "127.0.0.1"
    assert cfg.store.path == (tmp_path / "sub" / "exp.db").resolve()
    assert cfg.prometheus.queries.cpu_used_cores == "my_cpu"
    assert cfg.prometheus.queries.memory_used_bytes == "node:iro_memory_used_bytes:avg1m"  # default kept
    env = {"IRO_AGENT_PORT": "9100", "IRO_AGENT_HOST": "0.0.0.0", "IRO_AGENT_SCORING": "usage", "NODE_NAME": "n-7"}
    cfg = load_config(path, env=env)
    assert (cfg.listen.port, cfg.listen.host, cfg.prometheus.scoring, cfg.node_name) == (9100, "0.0.0.0", "usage", "n-7")
    assert load_config(path, env=env, port=9200).listen.port == 9200


def test_every_error_names_its_key(tmp_path, site_file):
    path = write(tmp_path, {
        "problem": str(site_file),
        "listen": {"port": "eighty", "colour": "blue"},
        "recommend": {"k": 0, "solver": "no-such"},
        "prometheus": {"scoring": "usage", "timeout_s": -1, "queries": {"cpu": "x"}},
        "store": {"max_rows": 1.5},
        "bogus": 1,
    })
    with pytest.raises(ConfigError) as info:
        load_config(path, env={"IRO_AGENT_PORT": "x", "IRO_AGENT_STORE_MAX_ROWS": "-3"})
    keys = [k for k, _ in info.value.errors]
    for key in ("listen.port", "listen.colour", "recommend.k", "recommend.solver", "prometheus.timeout_s",
                "prometheus.queries", "store.max_rows", "bogus", "listen.port (from IRO_AGENT_PORT)",
                "store.max_rows (from IRO_AGENT_STORE_MAX_ROWS)", "prometheus.scoring"):
        assert key in keys, (key, keys)
    text = str(info.value)
    assert "listen.port: expected an integer, got str 'eighty'" in text
    assert "prometheus.queries: cpu: unknown query" in text
    assert "prometheus.scoring: 'usage' needs prometheus.url" in text
    assert "unknown solver 'no-such'" in text


@pytest.mark.parametrize(
    ("doc", "key", "message"),
    [
        ({}, "problem", "required"),
        ({"problem": "missing.json"}, "problem", "no such file"),
        ({"recommend": {"solver": "cpsat"}}, "recommend.solver", "batch solver"),
        ({"recommend": {"solver": "best-fit", "solver_params": {"speed": 1}}}, "recommend.solver_params", "unknown setting"),
        ({"prometheus": {"url": "localhost:9090"}}, "prometheus.url", "expected http(s)://"),
        ({"backoff": {"initial_s": 5, "max_s": 1}}, "backoff.max_s", "must be >="),
        ({"listen": "9000"}, "listen", "expected a mapping"),
        ({"log_level": "loud"}, "log_level", "must be one of"),
    ],
)
def test_single_errors(tmp_path, site_file, doc, key, message):
    doc = {"problem": str(site_file), **doc} if "problem" not in doc and doc != {} else doc
    with pytest.raises(ConfigError) as info:
        load_config(write(tmp_path, doc), env={})
    assert any(k == key and message in m for k, m in info.value.errors), info.value.errors


def test_unreadable_files(tmp_path):
    with pytest.raises(ConfigError, match="cannot read the config file"):
        load_config(tmp_path / "nope.yaml", env={})
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(write(tmp_path, "listen: [unclosed"), env={})
    with pytest.raises(ConfigError, match="must be a mapping"):
        load_config(write(tmp_path, "- a\n- b\n"), env={})


def test_the_deployed_config_is_valid(tmp_path):
    """deploy/base's ConfigMap settings load, and its site has nodes (the DaemonSet runs with them)."""
    from pathlib import Path

    from edge_agent.recommend import load_site

    path = Path(__file__).resolve().parents[2] / "deploy" / "base" / "edge-agent-config.yaml"
    if not path.is_file():
        pytest.skip("deploy/base/edge-agent-config.yaml is not there")
    cfg = load_config(path, env={"IRO_AGENT_STORE_PATH": str(tmp_path / "exp.db"), "IRO_AGENT_NODE_NAME": "n1"})
    assert load_site(cfg.problem, cfg.site).num_nodes > 0


def test_discovered_nodes_settings(tmp_path):
    with pytest.raises(ConfigError) as info:
        load_config(write(tmp_path, {"prometheus": {"discover_nodes": True}}), env={})
    keys = dict(info.value.errors)
    assert "needs prometheus.url" in keys["prometheus.discover_nodes"] and "site" in keys
    cfg = load_config(write(tmp_path, {"site": "lab", "prometheus": {"url": "http://127.0.0.1:1", "discover_nodes": True}}),
                      env={})
    assert cfg.problem is None and cfg.prometheus.discover_nodes


# --- hostile input: every case below raised a traceback or was accepted before -----------------


@pytest.mark.parametrize(
    ("doc", "key", "message"),
    [
        ({"store": {"path": "."}}, "store.path", "is a folder"),
        ({"store": {"path": "site.json/sub/exp.db"}}, "store.path", "is not a folder"),
        ({"store": {"path": "site.json/exp.db"}}, "store.path", "is not a folder"),
        ({"store": {"path": "site.json"}}, "store.path", "is not an SQLite database"),
        ({"store": {"path": "a\x00b.db"}}, "store.path", "NUL"),
        ({"store": {"path": "~no-such-user-iro/exp.db"}}, "store.path", "home folder"),
        ({"policy": {"registry": "site.json"}}, "policy.registry", "not a folder"),
        ({"federated": {"flwr_home": "site.json"}}, "federated.flwr_home", "not a folder"),
        ({"recommend": {"solver": "best-fit", "solver_params": {1: 2}}}, "recommend.solver_params", "must be strings"),
        ({"federated": {"node_config": {"zone": float("inf")}}}, "federated.node_config.zone", "must be finite"),
        ({"federated": {"enabled": True, "mode": "connect", "superlink": "[]:9092"}}, "federated.superlink",
         "expected HOST:PORT"),
        ({"federated": {"enabled": True, "mode": "connect", "superlink": "::1:9092"}}, "federated.superlink",
         "needs brackets: [::1]:9092"),  # as `iro fed node --superlink` says
    ],
)
def test_hostile_settings_name_their_key(tmp_path, site_file, doc, key, message):
    with pytest.raises(ConfigError) as info:
        load_config(write(tmp_path, {"problem": str(site_file), **doc}), env={})
    assert any(k == key and message in m for k, m in info.value.errors), info.value.errors


def test_a_number_too_large_for_a_float_is_an_error(tmp_path, site_file):
    # YAML reads 400 digits as an int; float() of it raises OverflowError, not ValueError.
    path = write(tmp_path, f"problem: {site_file}\nlisten:\n  request_timeout_s: {'9' * 400}\n")
    with pytest.raises(ConfigError) as info:
        load_config(path, env={})
    assert any(k == "listen.request_timeout_s" and "must be finite" in m for k, m in info.value.errors)


def test_a_config_file_that_is_not_utf8(tmp_path, site_file):
    path = tmp_path / "agent.yaml"
    path.write_bytes(f"problem: {site_file}\nsite: \"".encode() + b"\xff\xfe\"\n")
    with pytest.raises(ConfigError, match=r"not UTF-8 text: byte 0xff at offset \d+ \(line 2\)"):
        load_config(path, env={})
    path.write_bytes(b"\xef\xbb\xbf" + f"problem: {site_file}\n".encode())  # a byte-order mark is fine
    assert load_config(path, env={}).problem == site_file


def test_missing_store_folders_are_fine(tmp_path, site_file):
    """Missing store folders are fine (the store makes them, like mkdir -p): /var/lib/iro-agent/exp.db."""
    cfg = load_config(write(tmp_path, {"problem": str(site_file), "store": {"path": "new/deeper/exp.db"}}), env={})
    assert cfg.store.path == tmp_path.resolve() / "new" / "deeper" / "exp.db"
    assert not (tmp_path / "new").exists()  # checking the config makes nothing
    empty = tmp_path / "empty.db"
    empty.write_bytes(b"")  # an empty file is a database to be
    assert load_config(write(tmp_path, {"problem": str(site_file), "store": {"path": str(empty)}}), env={}).store.path == empty


def test_recommend_k_is_bounded_as_a_request_k_is(tmp_path, site_file):
    # k 5000 passed the check and then made every /recommend without its own k a 400 naming k
    from iro_fed.limits import MAX_TOP_K

    path = tmp_path / "a.yaml"
    path.write_text(yaml.safe_dump({"problem": str(site_file), "recommend": {"k": MAX_TOP_K + 1}}))
    with pytest.raises(ConfigError, match="recommend.k"):
        load_config(path, env={})
    with pytest.raises(ConfigError, match=r"recommend.k \(from IRO_AGENT_K\)"):
        load_config(path, env={"IRO_AGENT_K": "2000"})
    path.write_text(yaml.safe_dump({"problem": str(site_file), "recommend": {"k": MAX_TOP_K}}))
    assert load_config(path, env={}).recommend.k == MAX_TOP_K

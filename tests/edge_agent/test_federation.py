"""Federated participation, the fast parts: the `federated:` settings (every error names its key,
exit 2), the SuperNode command (the same as `iro fed node`), decisions recorded as policy
samples, the ClientApp's training on them (real torch), mode connect against a real
flower-supernode, and leftovers of a killed agent being stopped."""

from __future__ import annotations

import json
import os
import signal
import socket
import sqlite3
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

from edge_agent.config import ConfigError, load_config
from edge_agent.federation import (
    MARKER,
    SuperNodeSupervisor,
    find_flower_bin,
    marked_processes,
    node_config_arg,
    supernode_argv,
)
from edge_agent.store import ExperienceStore, PolicySample, Transition, read_policy_samples, read_transitions

REPO = Path(__file__).resolve().parents[2]
#: Settings with federated.mode start are valid only where flower-supernode is installed (the fed extra).
needs_flower = pytest.mark.skipif(find_flower_bin("flower-supernode") is None, reason="needs the fed extra")


def fed_config(write_config, **federated):
    return write_config(federated={"enabled": True, "superlink": "127.0.0.1:9092", "insecure": True, **federated})


def _pem_ca(folder: Path) -> Path:
    """A real CA certificate, folder/ca.crt: the agent's settings check loads federated.root_certificates."""
    from iro_fed.federated.certs import make_tls

    return make_tls(folder)["ca"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# --- settings --------------------------------------------------------------------------------


@needs_flower
def test_federated_settings_from_file_and_environment(tmp_path, write_config):
    ca = _pem_ca(tmp_path)
    path = write_config(federated={"enabled": True, "superlink": "link.example.org:9092", "site": 3,
                                   "root_certificates": "ca.crt", "node_config": {"zone": "eu", "weight": 2},
                                   "restart_initial_s": 0.5, "restart_max_s": 8})
    cfg = load_config(path, env={})
    fed = cfg.federated
    assert (fed.enabled, fed.mode, fed.superlink, fed.site, fed.insecure) == (True, "start", "link.example.org:9092", 3, False)
    assert fed.root_certificates == ca  # relative to the file
    assert fed.node_config == {"zone": "eu", "weight": 2} and (fed.restart_initial_s, fed.restart_max_s) == (0.5, 8.0)
    env = {"IRO_AGENT_SUPERLINK": "10.0.0.7:9092", "IRO_AGENT_FEDERATED_SITE": "1",
           "IRO_AGENT_FEDERATED_NODE_CONFIG": '{"zone": "us"}', "IRO_AGENT_FEDERATED_MODE": "connect",
           "IRO_AGENT_FEDERATED_CLIENTAPPIO_PORT": "9300"}
    fed = load_config(path, env=env).federated
    assert (fed.superlink, fed.site, fed.node_config, fed.mode, fed.clientappio_port) == (
        "10.0.0.7:9092", 1, {"zone": "us"}, "connect", 9300)
    # disabled (the default): nothing else is required
    assert load_config(write_config(), env={}).federated.enabled is False
    fed = load_config(write_config(), env={"IRO_AGENT_FEDERATED_ENABLED": "true", "IRO_AGENT_SUPERLINK": "h:1",
                                            "IRO_AGENT_FEDERATED_INSECURE": "1"}).federated
    assert fed.enabled and fed.insecure and fed.superlink == "h:1"


@pytest.mark.parametrize(("federated", "env", "key", "message"), [
    ({"superlink": None}, {}, "federated.superlink", "required with federated.mode start"),
    ({"superlink": "no-port"}, {}, "federated.superlink", "expected HOST:PORT"),
    ({"superlink": "h:99999"}, {}, "federated.superlink", "expected HOST:PORT"),
    ({"insecure": False}, {}, "federated.root_certificates", "required for TLS"),
    ({"root_certificates": "agent.yaml"}, {}, "federated.root_certificates", "contradicts federated.insecure"),
    ({"insecure": False, "root_certificates": "missing.crt"}, {}, "federated.root_certificates", "no such file"),
    ({"insecure": False, "root_certificates": "agent.yaml", "auth_key": "nokey"}, {}, "federated.auth_key",
     "no such file"),
    ({"mode": "adopt"}, {}, "federated.mode", "must be one of start, connect"),
    ({"executor": "cold"}, {}, "federated.executor", "must be one of warm, flower"),
    ({}, {"IRO_AGENT_FEDERATED_EXECUTOR": "x"}, "federated.executor (from IRO_AGENT_FEDERATED_EXECUTOR)", "must be one of"),
    ({"site": -1}, {}, "federated.site", "must be >= 0"),
    ({"site": "madrid"}, {}, "federated.site", "expected an integer"),
    ({"node_config": {"site": 2}}, {}, "federated.node_config.site", "set by the agent"),
    ({"node_config": {"experience-db": "x"}}, {}, "federated.node_config.experience-db", "set by the agent"),
    ({"node_config": {"a b": 1}}, {}, "federated.node_config.a b", "letters, digits"),
    ({"node_config": {"zone": [1, 2]}}, {}, "federated.node_config.zone", "expected a string, number"),
    ({"node_config": "zone=eu"}, {}, "federated.node_config", "expected a mapping"),
    ({"restart_initial_s": 5, "restart_max_s": 1}, {}, "federated.restart_max_s", "must be >= federated.restart_initial_s"),
    ({"mode": "connect", "clientappio_port": 0}, {}, "federated.clientappio_port", "port of the running SuperNode"),
    ({"clientappio_port": 70000}, {}, "federated.clientappio_port", "must be <= 65535"),
    ({"colour": "blue"}, {}, "federated.colour", "unknown setting"),
    ({}, {"IRO_AGENT_FEDERATED_ENABLED": "maybe"}, "federated.enabled (from IRO_AGENT_FEDERATED_ENABLED)",
     "expected true or false"),
    ({}, {"IRO_AGENT_FEDERATED_NODE_CONFIG": "zone=eu"}, "federated.node_config (from IRO_AGENT_FEDERATED_NODE_CONFIG)",
     "expected a JSON object"),
])
def test_each_bad_federated_setting_names_its_key(write_config, federated, env, key, message):
    with pytest.raises(ConfigError) as info:
        load_config(fed_config(write_config, **federated), env=env)
    found = dict(info.value.errors)
    assert key in found, info.value.errors
    assert message in found[key]


def test_bad_federated_settings_exit_2(write_config):
    config = fed_config(write_config, insecure=False, site=-2)
    done = subprocess.run([sys.executable, "-m", "edge_agent", "run", "--config", str(config)], capture_output=True,
                          text=True, cwd=REPO, timeout=60)
    assert done.returncode == 2, done.stderr
    assert "federated.root_certificates: required for TLS" in done.stderr
    assert "federated.site: must be >= 0, got -2" in done.stderr


# --- the SuperNode command ---------------------------------------------------------------------


def _fed_node_dry_run(*args: str) -> list[str]:
    """The lines `iro fed node ... --dry-run` prints, from its own process: in this one, main()
    shares stdout (capsys took every thread's writes, e.g. an earlier test's leftover thread) and
    the SIGTERM handler (main's EarlyStop) with the whole test session."""
    done = subprocess.run([sys.executable, "-m", "iro_fed.cli", "fed", "node", *args, "--dry-run"], capture_output=True,
                          text=True, cwd=REPO, timeout=120)
    assert done.returncode == 0, (done.returncode, done.stdout, done.stderr[-3000:])
    return done.stdout.strip().splitlines()


def test_supernode_command_is_the_one_of_iro_fed_node(tmp_path, write_config):
    pytest.importorskip("flwr")

    ca, key = _pem_ca(tmp_path), tmp_path / "node0"
    key.write_text("x")
    cfg = load_config(write_config(federated={"enabled": True, "superlink": "link.example.org:9092", "site": 2,
                                              "root_certificates": str(ca), "auth_key": str(key),
                                              "node_config": {"zone": "eu", "weight": 2}}), env={})
    argv = supernode_argv(cfg.federated, 9123)
    lines = _fed_node_dry_run("--superlink", "link.example.org:9092", "--site", "2", "--port", "9123",
                              "--root-certificates", str(ca), "--auth-key", str(key), "--node-config",
                              'weight=2 zone="eu"')
    assert len(lines) == 2, lines
    node_line, executor_line = lines
    assert " ".join(argv) == node_line and "--isolation process" in node_line  # the warm executor serves it
    assert "iro_fed.federated.executor --runtime-api-address 127.0.0.1:9123" in executor_line
    cfg = load_config(write_config(federated={"enabled": True, "superlink": "10.1.1.1:9092", "insecure": True,
                                              "executor": "flower"}), env={})
    lines = _fed_node_dry_run("--superlink", "10.1.1.1:9092", "--site", "0", "--port", "9094", "--insecure",
                              "--executor", "flower")
    assert lines == [" ".join(supernode_argv(cfg.federated, 9094))]
    # the agent adds its experience store to the node config
    assert node_config_arg(cfg.federated, tmp_path / "exp.db") == f'site=0 experience-db="{tmp_path / "exp.db"}"'


# --- decisions as policy samples -------------------------------------------------------------


def test_decisions_are_recorded_as_policy_samples(start_agent, http, tmp_path):
    from iro_fed.features import CANDIDATE_FEATURES, CONTEXT_FEATURES

    agent, url = start_agent(recommend={"solver": "greedy-objective", "solver_params": {}},
                             federated={"enabled": True, "mode": "connect", "clientappio_port": free_port(),
                                        "observation_k": 8})
    replies = []
    for i in range(6):
        status, reply = http("POST", f"{url}/recommend", {"name": f"w{i}", "requests": {"cpu": 500 * (i + 1),
                                                                                          "memory": 256}})
        assert status == 200 and reply["nodes"]
        replies.append(reply)
    assert agent.store.flush()
    found = read_policy_samples(tmp_path / "exp.db", 8, len(CANDIDATE_FEATURES), len(CONTEXT_FEATURES))
    assert len(found.samples) == 6 and found.without_observation == found.other_shape == found.invalid == 0
    unplaced = agent.view.cluster.weights.unplaced
    for sample, reply in zip(found.samples, replies, strict=True):
        assert sample.obs["candidates"].shape == (8, len(CANDIDATE_FEATURES)) and sample.obs["mask"].shape == (9,)
        assert sample.obs["mask"][sample.action] == 1 and sample.obs["mask"][8] == 0  # no defer at the agent
        # greedy-objective picks the best marginal R: the policy's first candidate slot
        assert sample.action == 0
        assert sample.reward == pytest.approx((reply["nodes"][0]["delta_r"] - unplaced) / unplaced, abs=1e-6)
    # another top-k or feature set is not used, and is counted
    assert read_policy_samples(tmp_path / "exp.db", 4, len(CANDIDATE_FEATURES), len(CONTEXT_FEATURES)).other_shape == 6


def test_a_schema_1_store_gets_the_columns_and_its_rows_stay(tmp_path):
    db = tmp_path / "old.db"
    conn = sqlite3.connect(db)
    conn.executescript("""
        CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
        CREATE TABLE transitions (id INTEGER PRIMARY KEY AUTOINCREMENT, ts REAL NOT NULL,
            decision_id TEXT NOT NULL UNIQUE, workload TEXT NOT NULL, source TEXT NOT NULL, policy_version TEXT,
            state BLOB NOT NULL, state_dim INTEGER NOT NULL, action INTEGER NOT NULL, candidates TEXT NOT NULL,
            reward REAL NOT NULL, next_state BLOB, done INTEGER NOT NULL DEFAULT 1, info TEXT NOT NULL DEFAULT '{}');
        INSERT INTO meta VALUES ('schema_version', '1');
    """)
    conn.execute("INSERT INTO transitions (ts, decision_id, workload, source, state, state_dim, action, candidates,"
                 " reward) VALUES (1.0, 'old', 'w', 'solver', ?, 2, 0, '[]', 0.5)", (np.zeros(2, np.float32).tobytes(),))
    conn.commit()
    conn.close()
    assert read_policy_samples(db, 8, 18, 16).without_observation == 1  # read-only: no columns yet
    store = ExperienceStore(db)
    obs = {"candidates": np.ones((8, 18), np.float32), "context": np.zeros(16, np.float32),
           "mask": np.array([1, 1, 0, 0, 0, 0, 0, 0, 0], np.int8)}
    store.record(Transition("w2", "policy", np.zeros(2, np.float32), 0, ["a"], 1.0,
                            policy_sample=PolicySample(obs, 1, 0.25)))
    store.record(Transition("w3", "policy", np.zeros(2, np.float32), 0, ["a"], 1.0,
                            policy_sample=PolicySample(obs, 5, 0.25)))  # a masked slot: not usable
    store.close()
    assert [r["decision_id"] for r in read_transitions(db)][0] == "old"
    found = read_policy_samples(db, 8, 18, 16)
    assert (len(found.samples), found.without_observation, found.invalid) == (1, 1, 1)
    assert found.samples[0].action == 1 and found.samples[0].reward == 0.25
    assert np.array_equal(found.samples[0].obs["candidates"], obs["candidates"])


# --- the ClientApp's training on the store (real torch) ----------------------------------------


def test_local_training_learns_from_the_stored_decisions(tmp_path):
    pytest.importorskip("torch")
    import torch

    from iro_fed.federated.task import FedConfig, build_agent, feature_sizes, learn_from_experience

    cand_f, ctx_f = feature_sizes()
    rng = np.random.default_rng(0)
    store = ExperienceStore(tmp_path / "exp.db")
    for _ in range(40):
        cand = rng.uniform(0, 1, (8, cand_f)).astype(np.float32)
        cand[:, 0] = 1.0  # every slot valid
        obs = {"candidates": cand, "context": rng.uniform(0, 1, ctx_f).astype(np.float32),
               "mask": np.array([1] * 8 + [0], np.int8)}
        store.record(Transition("w", "policy", np.zeros(2, np.float32), 0, [], 0.0,
                                policy_sample=PolicySample(obs, 3, 4.0)))  # slot 3 was worth +4
    store.close()
    cfg = FedConfig(batch_size=16, learning_rate=0.01, embed_dim=16, hidden_dim=32)
    torch.set_num_threads(1)  # as local_train does: one thread is fastest for this small network
    torch.manual_seed(0)
    agent = build_agent(cfg, seed=0)
    probe = read_policy_samples(tmp_path / "exp.db", 8, cand_f, ctx_f).samples[0].obs
    batch = {k: v[None] for k, v in probe.items()}
    before = agent.q_values(batch)[0]
    metrics = learn_from_experience(agent, tmp_path / "exp.db", cfg, local_steps=400, updates=60, seed=0)
    after = agent.q_values(batch)[0]
    assert metrics["experience-samples"] == 40 and metrics["experience-updates"] == 60
    assert metrics["experience-error"] == 0 and metrics["experience-mean-reward"] == pytest.approx(4.0)
    assert after[3] - before[3] > 1.0  # the stored reward pulled the chosen slot's value up
    # default number of updates: two passes over the samples
    assert learn_from_experience(build_agent(cfg), tmp_path / "exp.db", cfg, 400)["experience-updates"] == 6
    # no store there: nothing learned, said in the metrics
    missing = learn_from_experience(build_agent(cfg), tmp_path / "none.db", cfg, 400)
    assert missing["experience-error"] == 1 and missing["experience-samples"] == 0


def test_clientapp_node_settings_name_the_key():
    pytest.importorskip("flwr")
    from flwr.app import Context, RecordDict

    from iro_fed.federated.client_app import node_experience

    def ctx(node):
        return Context(run_id=1, node_id=1, node_config=node, state=RecordDict(), run_config={})

    assert node_experience(ctx({"site": 0})) == (None, None)
    assert node_experience(ctx({"experience-db": "/x.db", "experience-updates": 7})) == ("/x.db", 7)
    with pytest.raises(ValueError, match="node-config experience-updates: expected >= 0"):
        node_experience(ctx({"experience-updates": -1}))
    with pytest.raises(ValueError, match="node-config experience-db: expected a file path"):
        node_experience(ctx({"experience-db": 3}))


# --- mode connect against a real SuperNode; leftovers of a killed agent ------------------------


def test_connect_mode_reports_an_external_supernode(start_agent, http, tmp_path, wait_for):
    pytest.importorskip("flwr")
    port = free_port()
    agent, url = start_agent(federated={"enabled": True, "mode": "connect", "clientappio_port": port,
                                        "check_interval_s": 0.1})
    doc = wait_for(lambda: (lambda d: d if d["state"] == "down" else None)(http("GET", f"{url}/federation")[1]))
    assert doc["up"] is False and doc["mode"] == "connect"
    status, ready = http("GET", f"{url}/readyz")
    assert status == 200 and ready["ready"] is True  # the agent serves without its SuperNode
    assert f"supernode not reachable on 127.0.0.1:{port}" in " ".join(ready["degraded"])
    assert http("POST", f"{url}/recommend", {"name": "w", "requests": {"cpu": 100}})[0] == 200
    # a real flower-supernode (its SuperLink is not there: it keeps retrying, its runtime API is up)
    exe = str(Path(sys.executable).parent / "flower-supernode")
    node = subprocess.Popen([exe, "--superlink", f"127.0.0.1:{free_port()}", "--insecure", "--port", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
                            env={**os.environ, "FLWR_HOME": str(tmp_path / "home"), "FLWR_TELEMETRY_ENABLED": "0",
                                 "PATH": str(Path(exe).parent) + os.pathsep + os.environ["PATH"]})
    try:
        wait_for(lambda: http("GET", f"{url}/federation")[1]["up"])
        assert "iro_agent_supernode_up 1.0" in http("GET", f"{url}/metrics")[1]
        assert http("GET", f"{url}/healthz")[1]["supernode"]["state"] == "running"
    finally:
        os.killpg(node.pid, signal.SIGKILL)
        node.wait(10)
    wait_for(lambda: not http("GET", f"{url}/federation")[1]["up"])
    assert "iro_agent_supernode_up 0.0" in http("GET", f"{url}/metrics")[1]
    agent.stop()
    assert agent.federation.state == "stopped"


@needs_flower
def test_processes_left_by_a_killed_agent_are_stopped_before_the_first_start(tmp_path, write_config, wait_for):
    """A SuperNode (and what it started) outlives an agent killed with kill -9; the next agent on
    the same FLWR_HOME stops it before starting its own."""
    home = tmp_path / "flwr-home"
    left = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"],
                            env={**os.environ, MARKER: str(home)}, start_new_session=True)
    try:
        wait_for(lambda: left.pid in marked_processes(str(home)))
        cfg = load_config(write_config(federated={"enabled": True, "superlink": "127.0.0.1:9", "insecure": True,
                                                  "flwr_home": str(home)}), env={})
        from edge_agent.metrics import AgentMetrics

        metrics = AgentMetrics("n", "s")
        metrics.add_federated()
        sup = SuperNodeSupervisor(cfg.federated, metrics, tmp_path / "exp.db")
        sup._reap_leftovers()
        assert left.wait(10) == -signal.SIGTERM and sup.reaped_on_start == [left.pid]
        assert marked_processes(str(home)) == []
    finally:
        if left.poll() is None:
            left.kill()
            left.wait()
    assert json.loads(json.dumps(sup.status()))["state"] == "stopped"
    assert yaml  # the fixtures write YAML


def test_a_failing_supernode_is_restarted_with_backoff_while_the_agent_serves(start_agent, http, tmp_path, wait_for):
    """A real flower-supernode that exits at once (its node key is not a key): the agent restarts
    it with growing delays, says so in /readyz, /federation and the metrics, and keeps serving."""
    pytest.importorskip("flwr")
    import logging

    ca, key = _pem_ca(tmp_path), tmp_path / "node.key"  # the CA loads (it is checked before the start)
    key.write_text("not a key")
    records: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = records.append  # type: ignore[method-assign]
    log = logging.getLogger("edge_agent")
    saved = log.handlers[:], log.level  # other tests may have set it up (edge_agent.cli.main)
    log.handlers[:] = [handler]
    log.setLevel(logging.INFO)
    try:
        agent, url = start_agent(federated={
            "enabled": True, "superlink": f"127.0.0.1:{free_port()}", "root_certificates": str(ca),
            "auth_key": str(key), "clientappio_port": 0, "restart_initial_s": 0.3, "restart_max_s": 0.6,
            "flwr_home": str(tmp_path / "home")})
        doc = wait_for(lambda: (lambda d: d if d["restarts"] >= 2 else None)(http("GET", f"{url}/federation")[1]), 60)
        assert doc["last_exit"]["code"] == 1 and doc["connected"] is False
        status, ready = http("GET", f"{url}/readyz")
        assert status == 200 and ready["ready"] is True
        assert any(d.startswith("supernode") for d in ready["degraded"]), ready["degraded"]
        assert http("POST", f"{url}/recommend", {"name": "w", "requests": {"cpu": 100}})[0] == 200
        metrics = http("GET", f"{url}/metrics")[1]
        restarts = float(next(line.split()[1] for line in metrics.splitlines()
                              if line.startswith("iro_agent_supernode_restarts_total ")))
        assert "iro_agent_supernode_connected 0.0" in metrics and restarts >= 2
        agent.stop()
    finally:
        log.handlers[:], level = saved
        log.setLevel(level)
    delays = [r.fields["retry_in_s"] for r in records if r.getMessage() == "supernode exited: restarting"]
    assert delays[0] == pytest.approx(0.3, rel=0.11) and delays[1] == pytest.approx(0.6, rel=0.11)  # x2, capped
    assert all(d <= 0.6 for d in delays)
    assert any("elliptic curve private key" in r.getMessage() for r in records)  # Flower's own reason, in our log
    assert marked_processes(str(tmp_path / "home")) == []


def test_a_choice_outside_the_policys_candidates_takes_the_last_slot(site_file):
    """kube-default's choice is not the best marginal R node: with one candidate slot the sample's
    candidate is the chosen node itself, with the features the policy would compute for it."""
    import solvers
    from edge_agent.federation import policy_sample
    from edge_agent.policy import Ranker
    from edge_agent.recommend import Recommender, load_site
    from iro_fed.features import candidate_features, observation
    from iro_fed.objective import marginal

    site = load_site(site_file, "edge-1")
    rec = Recommender(site, 3).recommend({"name": "w", "requests": {"cpu": 500, "memory": 256}}, site,
                                         Ranker(solvers.make("kube-default"), "solver"), {})
    chosen = int(rec.top[0][0])
    _, slots = observation(rec.state, 0, 1, context={"deferrable": 0.0})
    assert slots.tolist() != [chosen]  # the policy alone would have been shown another node
    sample = policy_sample(rec, 1)
    nodes = np.array([chosen])
    expected = candidate_features(rec.state, 0, nodes, marginal(rec.problem, rec.state, 0, nodes), 1)
    assert sample.action == 0 and sample.obs["mask"].tolist() == [1, 0]
    assert np.allclose(sample.obs["candidates"], expected)
    unplaced = rec.problem.weights.unplaced
    assert sample.reward == pytest.approx((rec.deltas[0] - unplaced) / unplaced)


@needs_flower
def test_check_shows_the_supernode_command(write_config, tmp_path, capsys):
    from edge_agent.cli import main

    config = fed_config(write_config, site=1, clientappio_port=9200)
    assert main(["check", "--config", str(config)]) == 0
    doc = json.loads(capsys.readouterr().out)["federated"]
    assert doc["mode"] == "start" and doc["superlink"] == "127.0.0.1:9092" and doc["site"] == 1
    command = doc["command"]
    assert command[0].endswith("flower-supernode") and command[command.index("--port") + 1] == "9200"
    assert command[command.index("--node-config") + 1] == f'site=1 experience-db="{tmp_path / "exp.db"}"'
    assert "--insecure" in command


def test_a_policy_that_fails_to_rank_costs_no_reply(write_config, http, tmp_path, wait_for):
    """A global policy that raises while ranking (a bug, a feature mismatch after an upgrade): the
    reply comes from the configured solver, says why, and the failure is counted."""
    import solvers
    from edge_agent.agent import Agent

    greedy = type(solvers.make("greedy-objective"))

    class Broken(greedy):  # a real solver whose rank fails for one pod
        def rank(self, state, w, k=16):
            if state.problem.workloads[w].name == "boom":
                raise IndexError("feature 19 out of range")
            return super().rank(state, w, k)

    (tmp_path / "policies" / "v0001").mkdir(parents=True)
    (tmp_path / "policies" / "v0001" / "metadata.json").write_text(json.dumps({"solver": "greedy-objective"}))
    (tmp_path / "policies" / "latest").write_text("v0001")
    cfg = load_config(write_config(policy={"registry": str(tmp_path / "policies"), "poll_interval_s": 0.1}), env={})
    agent = Agent(cfg)
    agent.policy.loader = lambda version_dir, metadata: Broken()
    agent.start()
    try:
        url = f"http://127.0.0.1:{agent.port}"
        wait_for(lambda: http("GET", f"{url}/readyz")[1]["ranking"]["source"] == "policy")
        status, ok = http("POST", f"{url}/recommend", {"name": "fine", "requests": {"cpu": 100}})
        assert status == 200 and ok["source"] == "policy" and "fallback_reason" not in ok
        status, reply = http("POST", f"{url}/recommend", {"name": "boom", "requests": {"cpu": 100}})
        assert status == 200 and reply["nodes"] and reply["source"] == "solver" and reply["solver"] == "kube-default"
        assert reply["fallback_reason"] == "policy v0001 failed to rank: IndexError: feature 19 out of range"
        assert 'iro_agent_dependency_failures_total{dependency="policy"} 1.0' in http("GET", f"{url}/metrics")[1]
    finally:
        agent.stop()

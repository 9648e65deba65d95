"""The experience store's file format and readers are the library's (iro_fed.experience): the
federated ClientApp reads a site's store without importing the edge-agent daemon, and the agent's
writer (edge_agent.store) uses the same, single definition."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np

from edge_agent import store
from iro_fed import experience
from iro_fed.federated.task import FedConfig, feature_sizes

ROOT = Path(__file__).resolve().parents[1]
K = FedConfig().top_k


def test_the_agent_store_uses_the_library_format() -> None:
    for name in ("PolicySample", "PolicySamples", "StoreError", "read_policy_samples", "read_transitions",
                 "SCHEMA_VERSION"):
        assert getattr(store, name) is getattr(experience, name), name


def _write_store(path: Path, n: int) -> None:
    rng = np.random.default_rng(0)
    cand_f, ctx_f = feature_sizes()
    db = store.ExperienceStore(path)
    for i in range(n):
        mask = np.zeros(K + 1, np.int8)
        mask[:2] = 1
        obs = {"candidates": rng.uniform(0, 1, (K, cand_f)).astype(np.float32),
               "context": rng.uniform(0, 1, ctx_f).astype(np.float32), "mask": mask}
        db.record(store.Transition(f"w{i}", "policy", np.zeros(2, np.float32), 0, [], 0.0,
                                   policy_sample=store.PolicySample(obs, i % 2, 0.25)))
    db.close()


# In a fresh interpreter: learn from the store as the ClientApp does, with a stand-in agent, and
# say which daemon modules that loaded.
_LEARN = """
import json, sys
from iro_fed.federated.task import FedConfig, learn_from_experience

class Agent:
    def learn(self, batch):
        return {"loss": 0.5}

out = learn_from_experience(Agent(), sys.argv[1], FedConfig(batch_size=2), local_steps=3, seed=0)
out["daemon"] = sorted(m for m in sys.modules if m == "edge_agent" or m.startswith("edge_agent."))
print(json.dumps(out))
"""


def test_learning_from_a_site_store_does_not_load_the_daemon(tmp_path: Path) -> None:
    db = tmp_path / "exp.db"
    _write_store(db, 4)
    done = subprocess.run([sys.executable, "-c", _LEARN, str(db)], cwd=ROOT, capture_output=True, text=True,
                          timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["experience-samples"] == 4 and out["experience-error"] == 0
    assert out["experience-updates"] == 3 and out["experience-loss"] == 0.5
    assert out["daemon"] == []  # was ['edge_agent', 'edge_agent.backoff', 'edge_agent.logs', 'edge_agent.store']


def test_the_library_reads_what_the_agent_wrote(tmp_path: Path) -> None:
    db = tmp_path / "exp.db"
    _write_store(db, 3)
    found = experience.read_policy_samples(db, K, *feature_sizes())
    assert [s.row_id for s in found.samples] == [1, 2, 3] and [s.action for s in found.samples] == [0, 1, 0]
    assert found.without_observation == found.other_shape == found.invalid == 0
    assert [t["workload"] for t in experience.read_transitions(db)] == ["w0", "w1", "w2"]

"""``solvers.dqn.train`` reads the training-state file (``policy.optim.pt``) through a public
helper of :mod:`solvers.dqn.checkpoint` (:func:`load_training_state`); it called the private
``checkpoint._load_failure``. The messages are those train gave before."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from solvers.dqn import checkpoint  # noqa: E402
from solvers.dqn.checkpoint import CheckpointError, load_training_state  # noqa: E402

TRAIN = Path(checkpoint.__file__).with_name("train.py")


def test_train_uses_only_public_names_of_checkpoint() -> None:
    tree = ast.parse(TRAIN.read_text(encoding="utf-8"))
    private = sorted({node.attr for node in ast.walk(tree) if isinstance(node, ast.Attribute)
                      and isinstance(node.value, ast.Name) and node.value.id == "ckpt" and node.attr.startswith("_")})
    imported = sorted({alias.name for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
                       and (node.module or "").endswith("checkpoint") for alias in node.names
                       if alias.name.startswith("_")})
    assert private == [] and imported == []  # was: ['_load_failure']


def test_a_training_state_loads(tmp_path: Path) -> None:
    path = tmp_path / "policy.optim.pt"
    torch.save({"state": {}, "param_groups": [], checkpoint.SINCE_LEARN: 3}, path)
    assert load_training_state(path) == {"state": {}, "param_groups": [], checkpoint.SINCE_LEARN: 3}


@pytest.mark.parametrize(("content", "why"), [
    (b"not a torch file", "not a readable torch file (not a file torch.save wrote)"),
    (b"", "not a readable torch file (an empty file)"),
    (None, "expected a mapping, got Tensor"),
])
def test_a_damaged_training_state_is_named_as_train_named_it(tmp_path: Path, content: bytes | None, why: str) -> None:
    path = tmp_path / "policy.optim.pt"
    if content is None:
        torch.save(torch.zeros(3), path)
    else:
        path.write_bytes(content)
    with pytest.raises(CheckpointError) as info:
        load_training_state(path)
    assert str(info.value) == f"optimizer state {str(path)!r}: {why}"

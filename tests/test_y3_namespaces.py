"""``iro webhook --namespaces`` keeps every entry: an empty one is refused, not dropped."""

from __future__ import annotations

import pytest

from iro_fed.cli import main


@pytest.mark.parametrize(
    ("namespaces", "message"),
    [
        # before the fix: read as ["a", "b"] / ["a"], the lost namespace's pods never mutated
        ("a,,b", "--namespaces: empty name at position 2 of 3 in 'a,,b'"),
        ("a,", "--namespaces: empty name at position 2 of 2 in 'a,'"),
        (",a", "--namespaces: empty name at position 1 of 2 in ',a'"),
        (",", "--namespaces: empty name at position 1 of 2 in ','"),  # before: [] - every pod mutated
    ],
)
def test_webhook_namespaces_with_an_empty_name_exit_2(namespaces, message, capsys, monkeypatch):
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    argv = ["webhook", "--port", "0", "--tls-cert", __file__, "--tls-key", __file__, "--namespaces", namespaces]
    assert main(argv) == 2
    assert message in capsys.readouterr().err

"""``iro fed certs`` writes each key through a fresh temporary file: a file or a symbolic link
already at the old fixed temporary name (``.ca.key.tmp``) can neither leave a private key
world-readable nor receive it."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

pytest.importorskip("cryptography")

from iro_fed.federated import certs  # noqa: E402
from iro_fed.federated.certs import TLS_FILES, make_node_key, make_tls  # noqa: E402


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_a_world_readable_temp_file_does_not_make_the_keys_readable(tmp_path: Path) -> None:
    """Old code: O_CREAT|O_TRUNC kept the 0644 of the file already there: ca.key and server.key 0644."""
    for name in ("ca.key", "server.key"):
        tmp = tmp_path / f".{name}.tmp"
        tmp.write_bytes(b"")
        os.chmod(tmp, 0o644)
    paths = make_tls(tmp_path)
    assert _mode(paths["ca_key"]) == 0o600
    assert _mode(paths["key"]) == 0o600
    assert _mode(paths["ca"]) == 0o644 and _mode(paths["cert"]) == 0o644


def test_a_symlink_at_the_temp_name_does_not_receive_the_ca_key(tmp_path: Path) -> None:
    """Old code: the CA key was written into the link's target (here victim.txt)."""
    out = tmp_path / "pki"
    out.mkdir()
    victim = tmp_path / "victim.txt"
    victim.write_text("victim\n")
    (out / ".ca.key.tmp").symlink_to(victim)
    paths = make_tls(out)
    assert victim.read_text() == "victim\n"
    assert b"PRIVATE KEY" in paths["ca_key"].read_bytes()
    assert not paths["ca_key"].is_symlink()


def test_a_symlink_at_the_key_itself_is_replaced_not_written_through(tmp_path: Path) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("victim\n")
    (tmp_path / "supernode").symlink_to(victim)
    paths = make_node_key(tmp_path)
    assert victim.read_text() == "victim\n"
    assert not paths["private"].is_symlink() and _mode(paths["private"]) == 0o600
    assert _mode(paths["public"]) == 0o644


def test_no_temporary_file_is_left(tmp_path: Path) -> None:
    make_tls(tmp_path)
    make_node_key(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([*TLS_FILES, "supernode", "supernode.pub"])


def test_a_failed_write_leaves_no_temporary_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def fail(src: str, dst: str) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(certs.os, "replace", fail)
    with pytest.raises(OSError, match="No space"):
        make_tls(tmp_path)
    assert list(tmp_path.iterdir()) == []

"""``write_file_atomic`` through a symbolic link: the link's target gets the new content (written
beside it, then renamed over it), the link stays a link. Was: the rename replaced the link with a
plain file and the file it pointed to kept the old content."""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path

import pytest

from iro_fed.cli import main
from iro_fed.problem_io import write_file_atomic, write_json_atomic
from iro_fed.testing import random_problem_doc


def listing(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


def write_text(text: str):
    return lambda tmp: Path(tmp).write_text(text)


def test_a_symlinked_path_is_written_through_to_its_target(tmp_path):
    real, links = tmp_path / "real", tmp_path / "links"
    real.mkdir()
    links.mkdir()
    (real / "out.json").write_text("old")
    link = links / "out.json"
    link.symlink_to(Path("..") / "real" / "out.json")  # relative, as `ln -s ../real/out.json` makes it

    def half(tmp: str) -> None:
        Path(tmp).write_text("{half")
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError):  # a failed write leaves the target, the link and no temporary
        write_file_atomic(link, half)
    assert link.is_symlink() and (real / "out.json").read_text() == "old" and listing(real) == ["out.json"]
    written = write_file_atomic(link, write_text("new"))
    assert link.is_symlink() and os.readlink(link) == os.path.join("..", "real", "out.json")
    assert (real / "out.json").read_text() == "new" and written == (real / "out.json").resolve()
    assert listing(real) == ["out.json"] and listing(links) == ["out.json"]  # no temporary left


def test_a_chain_of_links_and_a_dangling_link(tmp_path):
    target = tmp_path / "data" / "placement.json"  # its folder does not exist yet
    first, second = tmp_path / "first.json", tmp_path / "second.json"
    second.symlink_to(target)
    first.symlink_to(second)
    write_json_atomic(first, {"a": 1})
    assert first.is_symlink() and second.is_symlink()
    assert json.loads(target.read_text()) == {"a": 1} and json.loads(first.read_text()) == {"a": 1}


def test_a_link_loop_is_an_error_naming_the_path(tmp_path):
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.symlink_to(b)
    b.symlink_to(a)
    with pytest.raises(OSError) as exc:
        write_file_atomic(a, write_text("x"))
    assert exc.value.errno == errno.ELOOP and exc.value.filename == str(a)
    assert a.is_symlink() and b.is_symlink() and listing(tmp_path) == ["a.json", "b.json"]


def test_solve_out_through_a_symlink_keeps_the_link(tmp_path):
    problem = tmp_path / "problem.json"
    problem.write_text(json.dumps(random_problem_doc(7, nodes=4, pods=5)))
    target = tmp_path / "results" / "placement.json"
    target.parent.mkdir()
    target.write_text("{}")
    link = tmp_path / "latest.json"
    link.symlink_to(target)
    assert main(["solve", str(problem), "--solver", "best-fit", "--out", str(link)]) == 0
    assert link.is_symlink()
    assert json.loads(target.read_text())["solver"] == "best-fit"  # the placement, in the link's target

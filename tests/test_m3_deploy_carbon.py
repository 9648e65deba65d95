"""deploy/Dockerfile installs the `carbon` extra (codecarbon), so the federated sites measure their training's
emissions, and deploy/constraints.txt pins codecarbon and everything it pulls in."""

from __future__ import annotations

import re
from importlib.metadata import PackageNotFoundError, distribution, version
from pathlib import Path

import pytest

DEPLOY = Path(__file__).resolve().parents[1] / "deploy"


def _image_extras() -> set[str]:
    (extras,) = re.findall(r'pip install "\.\[([\w,-]+)\]"', (DEPLOY / "Dockerfile").read_text())
    return set(extras.split(","))


def _pins() -> dict[str, str]:
    lines = (DEPLOY / "constraints.txt").read_text().splitlines()
    pairs = [line.split("==", 1) for line in lines if line.strip() and not line.startswith("#")]
    return {re.sub(r"[-_.]+", "-", name).lower(): ver for name, ver in pairs}


def test_image_installs_the_carbon_extra():
    assert "carbon" in _image_extras()


def test_constraints_pin_codecarbon_and_its_dependencies_at_the_venv_versions():
    """codecarbon's direct requirements (this interpreter's markers) are all pinned, each at the tested version."""
    from packaging.requirements import Requirement

    try:
        dist = distribution("codecarbon")
    except PackageNotFoundError:
        pytest.skip("codecarbon is not installed: the environment lacks iro-fed[carbon]")
    pins = _pins()
    names = {"codecarbon"} | {Requirement(r).name for r in dist.requires or []
                               if Requirement(r).marker is None or Requirement(r).marker.evaluate({"extra": ""})}
    for name in names:
        key = re.sub(r"[-_.]+", "-", name).lower()
        assert pins.get(key) == version(name), f"constraints.txt: {key} not pinned at the venv's {version(name)}"


def test_the_venv_is_installed_with_the_images_constraints():
    """`make`'s install takes deploy/constraints.txt, so the venv the tests run in has the image's
    versions: unpinned, a new upstream release (pandas 3.1.2) made a clean clone's venv differ
    from the pins and failed the test above."""
    makefile = (DEPLOY.parent / "Makefile").read_text()
    (install,) = [line for line in makefile.splitlines() if "pip install" in line and "-e '.[" in line]
    assert "-c deploy/constraints.txt" in install
    assert re.search(r"^\$\(STAMP\):.*deploy/constraints\.txt", makefile, re.M), "the venv is not rebuilt when the pins change"

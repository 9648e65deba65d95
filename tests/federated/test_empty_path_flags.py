"""Every path option of every ``iro fed`` subcommand refuses an empty or blank value up front.

Was: ``iro fed certs --out ""`` wrote ca.crt, ca.key, server.crt and server.key into the working
folder (exit 0); ``iro fed rounds --requests ""`` made requests/ and rounds/ there; ``iro fed local
--json ""`` / ``--registry ""`` started the whole federation; ``iro fed server --dry-run --insecure
--database ""`` exited 0 without the flag; ``--app ""``, ``--root-certificates ""``, ``--auth-key ""``
and ``--ssl-* ""`` meant "not given". Now: exit 2, the option named, nothing written, no Flower
process started (the stand-ins below raise if one would be).
"""

from __future__ import annotations

import pytest

pytest.importorskip("flwr")

from iro_fed.cli import main  # noqa: E402
from iro_fed.federated import cli as fed_cli  # noqa: E402
from iro_fed.federated import local as local_module  # noqa: E402


class Started(Exception):
    """What the stand-ins raise: the command got as far as starting Flower."""


@pytest.fixture(autouse=True)
def no_flower(monkeypatch, tmp_path) -> None:
    monkeypatch.setenv("FLWR_TELEMETRY_ENABLED", "0")
    monkeypatch.setenv("FLWR_HOME", str(tmp_path.parent / f"{tmp_path.name}-flwr-home"))  # outside the cwd

    def refuse(*_args, **_kwargs):
        raise Started

    for name in ("LocalFederation", "flwr_run", "check_superlink_connection"):
        monkeypatch.setattr(local_module, name, refuse)
    monkeypatch.setattr(fed_cli, "_supervise", refuse)


TLS = ["--ssl-ca-certfile", "ca.crt", "--ssl-certfile", "server.crt", "--ssl-keyfile", "server.key"]
ROUNDS = ["fed", "rounds", "--federation", "lab", "--once"]

#: (command line before the empty value, the option given it, what follows, what the message calls it)
CASES = [
    (["fed", "local"], "--registry", [], "a folder path"),
    (["fed", "local"], "--workdir", [], "a folder path"),
    (["fed", "local"], "--json", [], "a path"),
    (["fed", "server", "--dry-run", "--insecure"], "--database", [], "a path"),
    (["fed", "server", "--dry-run"], "--ssl-ca-certfile", TLS[2:], "a path"),
    (["fed", "server", "--dry-run", *TLS[:2]], "--ssl-certfile", TLS[4:], "a path"),
    (["fed", "server", "--dry-run", *TLS[:4]], "--ssl-keyfile", [], "a path"),
    (["fed", "node", "--superlink", "127.0.0.1:9092", "--site", "0", "--dry-run"], "--root-certificates", [],
     "a path"),
    (["fed", "node", "--superlink", "127.0.0.1:9092", "--site", "0", "--dry-run", "--root-certificates", "ca.crt"],
     "--auth-key", [], "a path"),
    (ROUNDS, "--requests", [], "a folder path"),
    ([*ROUNDS, "--requests", "req"], "--registry", [], "a folder path"),
    ([*ROUNDS, "--requests", "req"], "--app", [], "a folder path"),
    (["fed", "certs"], "--out", [], "a folder path"),
]


@pytest.mark.parametrize("value", ["", "  "])
@pytest.mark.parametrize(("before", "flag", "after", "what"), CASES, ids=[f"{c[0][1]} {c[1]}" for c in CASES])
def test_an_empty_path_option_exits_2_naming_it(tmp_path, monkeypatch, capsys, before: list[str], flag: str,
                                                after: list[str], what: str, value: str) -> None:
    monkeypatch.chdir(tmp_path)
    assert main([*before, flag, value, *after]) == 2
    out, err = capsys.readouterr()
    command = " ".join(before[:2])
    assert err == f"iro {command}: error: {flag}: expected {what}, got {value!r}\n"
    assert out == ""
    assert not any(tmp_path.iterdir())  # nothing written in the working folder


#: The options of each subcommand that take a value which is not a path.
NOT_PATHS = {
    "local": {"--nodes", "--rounds", "--strategy", "--local-steps", "--set", "--timeout"},
    "server": {"--host", "--port"},
    "node": {"--superlink", "--site", "--port", "--node-config", "--executor"},
    "rounds": {"--federation", "--rounds", "--set", "--poll-s", "--min-interval-s", "--timeout"},
    "certs": {"--host", "--node-keys", "--days"},
}


def test_every_path_option_of_every_subcommand_is_covered() -> None:
    # A new option that takes a value must be sorted: a path goes into CASES (and into its command's
    # refuse_empty_paths call), anything else into NOT_PATHS.
    import argparse

    from iro_fed.cli import build_parser

    def subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
        return next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices

    fed = subcommands(subcommands(build_parser())["fed"])
    assert set(fed) == set(NOT_PATHS)
    taking_values = {f"{name} {action.option_strings[0]}" for name, parser in fed.items()
                     for action in parser._actions if action.option_strings and action.nargs != 0}
    paths = {f"{c[0][1]} {c[1]}" for c in CASES}
    assert not paths & {f"{name} {flag}" for name, flags in NOT_PATHS.items() for flag in flags}
    assert taking_values == paths | {f"{name} {flag}" for name, flags in NOT_PATHS.items() for flag in flags}

"""``iro webhook`` / ``iro scheduler``: flags that collide or do nothing are refused up front.

Each exits 2 naming the flag, before anything listens or a cluster is called:

- the webhook's ``--port`` and ``--metrics-port`` on one port where their addresses overlap (the
  metrics server started, then the webhook's bind failed blaming ``--port`` alone);
- ``iro scheduler --fine-tune-scenario`` / ``--fine-tune-steps`` without ``--fine-tune-registry``
  and ``--metrics-poll-s`` without ``--feedback-threshold`` (the daemon started and ignored them;
  a bad scenario was not even read);
- the webhook's affinity flags (``--top-k``, ``--solver``, ``--set``, ``--kubeconfig``,
  ``--cluster-config``) in scheduler-name mode, ``--scheduler-name`` in affinity mode, and
  ``--namespaces ""`` (read as "any namespace", while ``a,,b`` was refused).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

import pytest

from iro_fed.cli import UsageError, build_parser, main
from iro_fed.k8s import cli as k8s_cli

#: --tls-cert / --tls-key: files that exist; their content is read only when the server is made,
#: after every check here (so none of these commands gets that far).
TLS = ["--tls-cert", __file__, "--tls-key", __file__]
WEBHOOK = ["webhook", "--port", "18443", *TLS]
#: A file that is no kubeconfig: loading it is the scheduler's first step after its flag checks,
#: so "--kubeconfig: cannot load" means every flag was accepted, and nothing was started.
SCHEDULER = ["scheduler", "--kubeconfig", __file__, "--no-leader-elect"]
PASSED_THE_CHECKS = "--kubeconfig: cannot load"


@pytest.fixture(autouse=True)
def _outside_a_cluster(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.chdir(tmp_path)  # relative folders of --fine-tune-registry / --round-request land here


def _refused(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return err


# --- 1. two servers of one command on one port ----------------------------------------------


@pytest.mark.parametrize(
    "extra",
    [
        ["--metrics-port", "18443"],  # the audit's: both on 0.0.0.0 (the defaults)
        ["--host", "127.0.0.1", "--metrics-port", "18443"],  # metrics on every IPv4 address
        ["--metrics-host", "127.0.0.1", "--metrics-port", "18443"],  # the webhook on every IPv4 address
        ["--host", "127.0.0.1", "--metrics-host", "127.0.0.1", "--metrics-port", "18443"],
        ["--host", "localhost", "--metrics-host", "127.0.0.1", "--metrics-port", "18443"],  # one address, two spellings
        ["--host", "::", "--metrics-host", "127.0.0.1", "--metrics-port", "18443"],  # :: is dual stack
    ],
)
def test_webhook_and_metrics_on_one_port_exit_2_naming_both(extra, capsys):
    err = _refused([*WEBHOOK, *extra], capsys)
    assert "--port / --metrics-port: both are port 18443" in err, err
    assert "give --metrics-port another port" in err and "Address already in use" not in err, err


def _flags(host: str, port: int, mhost: str, mport: int) -> tuple[tuple[str, str, str, int], tuple[str, str, str, int]]:
    return ("--host", "--port", host, port), ("--metrics-host", "--metrics-port", mhost, mport)


@pytest.mark.parametrize(
    ("host", "port", "mhost", "mport"),
    [
        ("0.0.0.0", 18443, "0.0.0.0", 9090),  # other ports
        ("0.0.0.0", 0, "0.0.0.0", 9090),  # port 0: any free port, never the other's
        ("127.0.0.1", 18443, "127.0.0.2", 18443),  # one port, two addresses
        ("0.0.0.0", 18443, "::1", 18443),  # IPv4's every address does not cover an IPv6 one
    ],
)
def test_ports_that_do_not_collide_pass_the_check(host, port, mhost, mport):
    k8s_cli._check_distinct_ports(*_flags(host, port, mhost, mport))  # checked directly: main would serve


def test_the_check_covers_an_ipv4_mapped_address():
    with pytest.raises(UsageError, match="--port / --metrics-port: both are port 8443"):
        k8s_cli._check_distinct_ports(*_flags("::ffff:127.0.0.1", 8443, "127.0.0.1", 8443))


def test_only_the_webhook_has_two_listening_ports():
    """The extender and the scheduler listen once each (the scheduler's /healthz is on its
    --metrics-port server): no port of theirs can collide. A second one needs the webhook's check."""
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    ports = {cmd: [s for a in sub.choices[cmd]._actions for s in a.option_strings if s.endswith("port")]
             for cmd in ("extender", "webhook", "scheduler")}
    assert ports == {"extender": ["--port"], "webhook": ["--port", "--metrics-port"], "scheduler": ["--metrics-port"]}


def test_the_audits_command_exits_2_from_the_shell(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "KUBERNETES_SERVICE_HOST"}
    proc = subprocess.run([str(Path(sys.executable).parent / "iro"), *WEBHOOK, "--metrics-port", "18443"],
                          capture_output=True, text=True, cwd=tmp_path, env=env, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert "--port / --metrics-port: both are port 18443" in proc.stderr and "Traceback" not in proc.stderr


# --- 2. the scheduler's fine-tune and feedback flags without what they need -----------------


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--fine-tune-scenario", "nope"], "--fine-tune-scenario: unknown scenario 'nope'"),  # the audit's
        (["--fine-tune-scenario", ""], "--fine-tune-scenario: unknown scenario ''"),
        (["--fine-tune-scenario", "bank"], "--fine-tune-scenario: needs --fine-tune-registry"),
        (["--fine-tune-scenario", "edge-iot"], "--fine-tune-scenario: needs --fine-tune-registry"),  # the default, given
        (["--fine-tune-steps", "100"], "--fine-tune-steps: needs --fine-tune-registry"),
        (["--fine-tune-steps", "10"], "--fine-tune-steps: must be at least 66"),  # the value first, as before
        (["--feedback-threshold", "0.1", "--fine-tune-steps", "100"], "--fine-tune-steps: needs --fine-tune-registry"),
        (["--feedback-threshold", "0.1", "--round-request", "req", "--fine-tune-scenario", "bank"],
         "--fine-tune-scenario: needs --fine-tune-registry"),
        (["--feedback-threshold", "0.1", "--fine-tune-registry", "reg", "--fine-tune-scenario", "nope"],
         "--fine-tune-scenario: unknown scenario 'nope'"),
        (["--metrics-poll-s", "5"], "--metrics-poll-s: needs --feedback-threshold"),
        (["--metrics-poll-s", "30"], "--metrics-poll-s: needs --feedback-threshold"),  # the default, given
        (["--fine-tune-registry", "reg", "--fine-tune-scenario", "bank"], "--fine-tune-registry / --round-request: need --feedback-threshold"),
    ],
)
def test_scheduler_feedback_flags_without_what_they_need_exit_2(extra, message, capsys, tmp_path):
    err = _refused([*SCHEDULER, *extra], capsys)
    assert message in err, err
    assert PASSED_THE_CHECKS not in err
    assert list(tmp_path.iterdir()) == []  # no folder made


@pytest.mark.parametrize(
    "extra",
    [
        [],
        ["--feedback-threshold", "0.1"],
        ["--feedback-threshold", "0.1", "--metrics-poll-s", "5"],
        ["--feedback-threshold", "0.1", "--fine-tune-registry", "reg", "--fine-tune-scenario", "bank",
         "--fine-tune-steps", "100", "--round-request", "req"],
    ],
)
def test_scheduler_feedback_flags_with_what_they_need_pass_the_checks(extra, capsys, tmp_path):
    err = _refused([*SCHEDULER, *extra], capsys)
    assert PASSED_THE_CHECKS in err, err
    assert list(tmp_path.iterdir()) == []


def test_scheduler_defaults_apply_when_the_flags_are_not_given(tmp_path):
    args = build_parser().parse_args(["scheduler", "--name", "iro-edge", "--fine-tune-registry", str(tmp_path / "reg")])
    assert (args.metrics_poll_s, args.fine_tune_scenario, args.fine_tune_steps) == (None, None, None)
    given = k8s_cli._fill_defaults(args, k8s_cli.SCHEDULER_DEFAULTS)
    assert not given & {"metrics_poll_s", "fine_tune_scenario", "fine_tune_steps"}
    (tune,) = k8s_cli._fine_tune_actions(args)
    assert (tune.scenario, tune.steps) == ("edge-iot", 256)
    assert args.metrics_poll_s == 30.0


# --- 3. the webhook's flags of the other mode, and an empty --namespaces ---------------------


@pytest.mark.parametrize(
    ("extra", "flag"),
    [
        (["--top-k", "5"], "--top-k"),  # the audit's
        (["--set", "seed=3"], "--set"),  # the audit's
        (["--solver", "best-fit"], "--solver"),
        (["--solver", "greedy-objective"], "--solver"),  # the default, given
        (["--kubeconfig", __file__], "--kubeconfig"),
        (["--mode", "scheduler-name", "--top-k", "3"], "--top-k"),
    ],
)
def test_webhook_affinity_flags_in_scheduler_name_mode_exit_2(extra, flag, capsys):
    err = _refused([*WEBHOOK, *extra], capsys)
    assert f"{flag}: needs --mode affinity" in err, err


def test_webhook_cluster_config_in_scheduler_name_mode_exits_2(capsys, tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("domains:\n  edge-1: {kind: edge}\n")
    err = _refused([*WEBHOOK, "--cluster-config", str(cfg)], capsys)
    assert "--cluster-config: needs --mode affinity" in err, err


@pytest.mark.parametrize("name", ["iro", "other"])
def test_webhook_scheduler_name_in_affinity_mode_exits_2(name, capsys):
    err = _refused([*WEBHOOK, "--mode", "affinity", "--scheduler-name", name], capsys)
    assert "--scheduler-name: needs --mode scheduler-name" in err, err


def test_webhook_values_are_still_checked_before_the_mode(capsys):
    err = _refused([*WEBHOOK, "--top-k", "0"], capsys)
    assert "--top-k: must be between 1 and 1000, got 0" in err, err
    err = _refused([*WEBHOOK, "--solver", "nope"], capsys)
    assert "unknown solver 'nope'" in err, err


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        # the mode's own flags pass: the next check (no cluster to see) is what refuses
        (["--mode", "affinity", "--top-k", "5", "--solver", "best-fit", "--set", "seed=3"],
         "--mode affinity: needs --kubeconfig"),
        (["--scheduler-name", "other", "--metrics-host", "127.0.0.1"], "--metrics-host: needs --metrics-port"),
    ],
)
def test_webhook_flags_of_their_own_mode_pass_the_check(extra, message, capsys):
    err = _refused([*WEBHOOK, *extra], capsys)
    assert message in err and "needs --mode" not in err.replace(message, ""), err


@pytest.mark.parametrize(
    ("namespaces", "message"),
    [
        ("", "--namespaces: give at least one namespace name, got ''"),
        ("  ", "--namespaces: give at least one namespace name, got '  '"),
        ("a,,b", "--namespaces: empty name at position 2 of 3 in 'a,,b'"),  # as before
    ],
)
def test_webhook_empty_namespaces_exit_2(namespaces, message, capsys):
    err = _refused([*WEBHOOK, "--namespaces", namespaces], capsys)
    assert message in err, err

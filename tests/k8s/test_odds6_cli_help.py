"""``python -m iro_fed.k8s.testing --help`` shows the command's real options (it showed a
``--port`` that the command does not take), run as a real subprocess."""

from __future__ import annotations

import re
import subprocess
import sys


def test_the_usage_names_only_real_options() -> None:
    out = subprocess.run([sys.executable, "-m", "iro_fed.k8s.testing", "--help"], capture_output=True, text=True,
                         timeout=120, check=True).stdout
    usage, _, rest = out.partition("\n\n")
    real = set(re.findall(r"--[a-z][a-z-]*", usage))  # argparse's own usage line: what it takes
    assert real == {"--kubeconfig", "--nodes"}, usage
    # The description repeats the usage: it must name the same options (before: "[--port P]" too).
    assert set(re.findall(r"--[a-z][a-z-]*", rest.split("options:")[0])) == real, out
    bad = subprocess.run([sys.executable, "-m", "iro_fed.k8s.testing", "--port", "8080"], capture_output=True,
                         text=True, timeout=120)
    assert bad.returncode == 2 and "--port" in bad.stderr  # as the help now says: no such option


def test_a_negative_node_count_is_refused_naming_it() -> None:
    # Was: accepted, and the server started with no nodes.
    bad = subprocess.run([sys.executable, "-m", "iro_fed.k8s.testing", "--nodes", "-1"], capture_output=True,
                         text=True, timeout=120)
    assert bad.returncode == 2 and "--nodes: must be >= 0, got -1" in bad.stderr, bad.stderr

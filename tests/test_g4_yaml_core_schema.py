"""YAML's plain scalars as YAML 1.2's core schema reads them, in problem files and the agent config.

Was (YAML 1.1 leftovers in ``problem_io.yaml_loader``; numbers had already moved to 1.2):
- yes / no / on / off were booleans: a domain or node named ``no`` was refused as "boolean False",
  a label key ``on`` became the text "True" silently, and ``enabled: yes`` was accepted as true;
- ``2026-12-03`` was a ``datetime.date`` (a label value refused as "date"), ``=`` a constructor error;
- ``!!bool yes`` was true;
- an integer of more than 4300 digits escaped the agent's config loader as a bare ValueError.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

import iro_fed.problem_io as pio
from iro_fed.problem_io import ProblemValidationError, load_document, load_problem, load_yaml


@pytest.fixture(params=["libyaml", "python"])
def yaml_parser(request, monkeypatch) -> str:
    """Each test with both parsers: libyaml's (the default where PyYAML has it) and PyYAML's own."""
    if request.param == "libyaml":
        if not getattr(yaml, "__with_libyaml__", False):
            pytest.skip("PyYAML without libyaml")
        loader = pio._make_yaml_loader()
        assert issubclass(loader, yaml.CSafeLoader)  # the speed stays: resolvers on the class
    else:
        monkeypatch.delattr(yaml, "CSafeLoader", raising=False)
        loader = pio._make_yaml_loader()
        assert issubclass(loader, yaml.SafeLoader)
    monkeypatch.setattr(pio, "_yaml_loader", loader)
    return request.param


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("true", True),
        ("True", True),
        ("TRUE", True),
        ("false", False),
        ("False", False),
        ("FALSE", False),
        ("yes", "yes"),  # YAML 1.1: True
        ("Yes", "Yes"),
        ("NO", "NO"),
        ("no", "no"),
        ("on", "on"),
        ("Off", "Off"),
        ("y", "y"),
        ("n", "n"),
        ("tRUE", "tRUE"),
        ("2026-12-03", "2026-12-03"),  # YAML 1.1: datetime.date
        ("2026-12-03 10:00:00", "2026-12-03 10:00:00"),  # YAML 1.1: datetime.datetime
        ("2026-12-03T10:00:00Z", "2026-12-03T10:00:00Z"),
        ("=", "="),  # YAML 1.1: the "value" type, which the safe loader could not construct
        ("'yes'", "yes"),
        ("!!bool true", True),
        ("~", None),
        ("null", None),
    ],
)
def test_plain_scalars_are_read_as_yaml_1_2_core(text, value, yaml_parser):
    got = load_yaml(f"v: {text}")["v"]
    assert got == value and type(got) is type(value)


def test_keys_that_look_like_yes_or_no_stay_strings(yaml_parser):
    assert load_yaml("on: 1\noff: 2\nyes: 3\n2026-12-03: 4\n") == {"on": 1, "off": 2, "yes": 3, "2026-12-03": 4}


def test_an_explicit_bool_tag_on_yes_is_a_yaml_error(yaml_parser):
    for text in ("yes", "on", "1"):
        with pytest.raises(yaml.YAMLError, match="not a YAML 1.2 boolean"):
            load_yaml(f"v: !!bool {text}")


def test_a_too_long_integer_is_a_yaml_error_not_a_bare_value_error(yaml_parser):
    with pytest.raises(yaml.YAMLError, match="an integer of 5000 digits is too long"):
        load_yaml("v: " + "9" * 5000)


PROBLEM = """\
domains: [{name: no}, {name: on}]
nodes:
- {name: off, domain: no, capacity: {cpu: 1000, memory: 1000}, labels: {gpu: yes, on: x, since: 2026-12-03}}
- {name: n2, domain: on, capacity: {cpu: 1000, memory: 1000}}
workloads: [{name: yes, requests: {cpu: 1}}]
"""


def test_names_and_labels_that_look_like_booleans_or_dates_are_strings(tmp_path, yaml_parser):
    path = tmp_path / "p.yaml"
    path.write_text(PROBLEM)
    problem = load_problem(path)
    assert [d.name for d in problem.domains] == ["no", "on"]
    assert [(n.name, n.domain) for n in problem.nodes] == [("off", "no"), ("n2", "on")]
    # the label key `on` was the text "True" (no error), the values a bool and a date (refused)
    assert dict(problem.nodes[0].labels) == {"gpu": "yes", "on": "x", "since": "2026-12-03"}
    assert [w.name for w in problem.workloads] == ["yes"]


def test_the_yaml_and_the_json_of_a_problem_read_alike(tmp_path, yaml_parser):
    path = tmp_path / "p.yaml"
    path.write_text(PROBLEM)
    as_json = tmp_path / "p.json"
    as_json.write_text(json.dumps(load_document(path)))
    assert load_document(as_json) == load_document(path)


def _agent_files(tmp_path: Path, extra: str) -> Path:
    site = tmp_path / "site.yaml"
    site.write_text(PROBLEM)
    path = tmp_path / "agent.yaml"
    path.write_text(f"problem: {site}\nsite: no\n{extra}")
    return path


def test_the_agent_config_reads_a_site_named_no(tmp_path, yaml_parser):
    from edge_agent.config import load_config

    cfg = load_config(_agent_files(tmp_path, "recommend:\n  record: false\n"), env={})
    assert cfg.site == "no" and cfg.recommend.record is False


@pytest.mark.parametrize("word", ["yes", "no", "on", "off"])
def test_a_boolean_setting_refuses_yes_naming_the_field(tmp_path, word, yaml_parser):
    from edge_agent.config import ConfigError, load_config

    with pytest.raises(ConfigError) as exc:
        load_config(_agent_files(tmp_path, f"recommend:\n  record: {word}\n"), env={})
    assert exc.value.errors == [("recommend.record", f"expected true or false, got str {word!r}")]


def test_a_problem_file_with_a_date_where_a_number_is_wanted_names_the_field(tmp_path, yaml_parser):
    path = tmp_path / "p.yaml"
    path.write_text(PROBLEM.replace("cpu: 1000, memory: 1000}, labels", "cpu: 2026-12-03, memory: 1000}, labels"))
    with pytest.raises(ProblemValidationError) as exc:
        load_problem(path)
    assert exc.value.errors == [("nodes[0].capacity.cpu", "expected a finite number, got string '2026-12-03'")]

"""Users' own data files (x5): a latency matrix whose header lists the regions in any order, by
zone code or region name; NaN/NA cells as unknown latencies; carbon CSV errors on the file's real
line after a quoted cell that spans lines; a placement file's card list for a pod on an unknown
node reported once, not also as "not placed"."""

from __future__ import annotations

import csv
import random
import shutil
from pathlib import Path

import numpy as np
import pytest

from iro_fed.cli import main
from iro_fed.placement import placement_from_dict
from iro_fed.problem_io import problem_from_dict
from iro_fed.sim.signals import SignalFormatError, data_dir, load_carbon_csv, load_latency_matrix

LATENCY = data_dir() / "latency"
MATRIX, MAPPER = LATENCY / "gcp_latency_matrix.csv", LATENCY / "gcp_dc_zonecode_mapper.json"
needs_latency = pytest.mark.skipif(not MATRIX.exists(), reason="shared data not present")
needs_data = pytest.mark.skipif(
    not (MATRIX.exists() and (data_dir() / "carbon").is_dir()), reason="shared data not present"
)
SHARED = "US-MIDA-PJM"  # us-east4 and us-east5


def _rows() -> list[list[str]]:
    with MATRIX.open(newline="", encoding="utf-8-sig") as f:
        return list(csv.reader(f))


def _write(path: Path, rows: list[list[str]]) -> Path:
    with path.open("w", newline="", encoding="utf-8") as f:
        csv.writer(f).writerows(rows)
    return path


def _permuted(rows: list[list[str]], seed: int) -> list[list[str]]:
    """``rows`` with its data rows and its columns shuffled; the two columns (rows) of the shared
    code keep their relative order, as a code fills its regions in the order it comes."""
    header, *body = rows
    cols, order = list(range(1, len(header))), list(range(len(body)))
    rng = random.Random(seed)
    rng.shuffle(cols)
    rng.shuffle(order)
    for keys, name in ((cols, lambda k: header[k]), (order, lambda k: body[k][0])):
        shared = [k for k in keys if name(k) == SHARED]
        assert len(shared) == 2
        if shared != sorted(shared):
            a, b = keys.index(shared[0]), keys.index(shared[1])
            keys[a], keys[b] = keys[b], keys[a]
    assert cols != sorted(cols) and order != sorted(order)
    return [[r[0]] + [r[k] for k in cols] for r in [header] + [body[k] for k in order]]


# --- latency header in any order ----------------------------------------------------------------


@needs_latency
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_permuted_rows_and_columns_give_the_shipped_matrix(tmp_path: Path, seed: int) -> None:
    shipped = load_latency_matrix()
    m = load_latency_matrix(_write(tmp_path / "perm.csv", _permuted(_rows(), seed)), MAPPER)
    assert m.regions == shipped.regions and m.zones == shipped.zones
    assert np.array_equal(m.rtt_ms, shipped.rtt_ms, equal_nan=True)
    assert m.rtt("us-east4", "us-east5") == shipped.rtt("us-east4", "us-east5") == 18.0


@needs_latency
def test_header_by_region_name_in_any_order(tmp_path: Path) -> None:
    """Named by region, the shared code's columns may come in either order as well."""
    shipped = load_latency_matrix()
    header, *body = _rows()
    named = [["origin", *shipped.regions]] + [[region] + row[1:] for region, row in zip(shipped.regions, body, strict=True)]
    cols = list(range(1, len(header)))
    random.Random(5).shuffle(cols)
    east4, east5 = 1 + shipped.regions.index("us-east4"), 1 + shipped.regions.index("us-east5")
    if cols.index(east4) < cols.index(east5):  # make us-east5's column come first
        a, b = cols.index(east4), cols.index(east5)
        cols[a], cols[b] = cols[b], cols[a]
    rows = [[r[0]] + [r[k] for k in cols] for r in named]
    m = load_latency_matrix(_write(tmp_path / "by_region.csv", rows), MAPPER)
    assert np.array_equal(m.rtt_ms, shipped.rtt_ms, equal_nan=True)


@pytest.mark.parametrize(
    ("cols", "col_regions", "origins", "row_regions"),
    [
        (["r3", "S", "A"], ["r3", "r2", "r1"], ["r3", "S", "A"], ["r3", "r2", "r1"]),
        (["S", "r3", "A"], ["r2", "r3", "r1"], ["S", "r2", "A"], ["r3", "r2", "r1"]),
        (["A", "S", "r2"], ["r1", "r3", "r2"], ["A", "S", "S"], ["r1", "r2", "r3"]),
        (["r2", "A", "S"], ["r2", "r1", "r3"], ["S", "A", "r3"], ["r2", "r1", "r3"]),
    ],
)
def test_a_shared_code_fills_the_regions_not_named(tmp_path: Path, cols, col_regions, origins, row_regions) -> None:
    """r2 and r3 share code S: a header (or the rows) naming one of them and the code gives the
    code to the other, whichever comes first; codes alone fill the regions in mapper order."""
    (tmp_path / "map.json").write_text('{"r1": "A", "r2": "S", "r3": "S"}')
    index = {"r1": 0, "r2": 1, "r3": 2}
    true = np.arange(1.0, 10.0).reshape(3, 3)  # true[origin, destination] in mapper order
    body = "".join(f"{o},{','.join(f'{true[index[r], index[c]]:g}' for c in col_regions)}\n"
                   for o, r in zip(origins, row_regions, strict=True))
    (tmp_path / "m.csv").write_text("origin," + ",".join(cols) + "\n" + body)
    m = load_latency_matrix(tmp_path / "m.csv", tmp_path / "map.json")
    assert m.regions == ("r1", "r2", "r3") and np.array_equal(m.rtt_ms, true)


@pytest.mark.parametrize(
    ("header", "match"),
    [
        ("origin,B,A,B", r"line 1: column 4: duplicate column for 'B' \(already in column 2\)"),
        ("origin,r2,A,B", r"line 1: column 4: duplicate column for 'B' \(already in column 2\)"),
        ("origin,S,S,S,A", r"line 1: column 4: duplicate column for 'S' \(already in column 2, 3\)"),
        ("origin,A,C,B", r"line 1: column 3: unknown 'C' \(not a zone code or region name of map.json\)"),
        ("origin,A,B,", r"line 1: column 4: unknown '' \(not a zone code or region name of map.json\)"),
        ("origin,B", r"line 1: no column for 'A' \(r1\)"),
        ("origin,S", r"line 1: no column for 'A' \(r1\), 'S' \(r3\)"),
    ],
)
def test_header_errors_name_the_column(tmp_path: Path, header: str, match: str) -> None:
    mapper = '{"r1": "A", "r2": "B"}' if "S" not in header else '{"r1": "A", "r2": "S", "r3": "S"}'
    (tmp_path / "map.json").write_text(mapper)
    (tmp_path / "m.csv").write_text(header + "\nA,1,2\n")
    with pytest.raises(SignalFormatError, match=match) as info:
        load_latency_matrix(tmp_path / "m.csv", tmp_path / "map.json")
    assert str(tmp_path / "m.csv") in str(info.value)


@pytest.mark.parametrize(
    ("body", "match"),
    [  # row errors name the cell by its header name, wherever that column is
        ("B,5,x\nA,7,5\n", r"line 2: column 'A': expected a number, got 'x'"),
        ("B,5,1\nA,-1,5\n", r"line 3: column 'B': must be finite and >= 0, got '-1'"),
    ],
)
def test_cell_errors_in_a_permuted_header_name_their_column(tmp_path: Path, body: str, match: str) -> None:
    (tmp_path / "map.json").write_text('{"r1": "A", "r2": "B"}')
    (tmp_path / "m.csv").write_text("origin,B,A\n" + body)
    with pytest.raises(SignalFormatError, match=match):
        load_latency_matrix(tmp_path / "m.csv", tmp_path / "map.json")


@needs_data
def test_simulate_exits_2_on_a_bad_matrix_header(tmp_path: Path, monkeypatch, capsys) -> None:
    header, *body = _rows()
    header[header.index("DE")] = "FR"  # FR twice, DE missing
    data = tmp_path / "data"
    (data / "latency").mkdir(parents=True)
    (data / "carbon").symlink_to(data_dir() / "carbon")
    bad = _write(data / "latency" / MATRIX.name, [header] + body)
    shutil.copy(MAPPER, data / "latency" / MAPPER.name)
    monkeypatch.setenv("IRO_DATA_DIR", str(data))
    out = tmp_path / "report.json"
    code = main(["simulate", "--scenario", "bank", "--solver", "greedy-objective", "--hours", "1", "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 2, err
    column = 1 + _rows()[0].index("FR")
    assert f"{bad} line 1: column {column}: duplicate column for 'FR'" in err
    assert not out.exists()


# --- NaN and NA cells are unknown latencies -----------------------------------------------------


@pytest.mark.parametrize("cell", ["NaN", "nan", "NA", "N/A", "n/a", " NaN "])
def test_nan_and_na_cells_read_as_unknown(tmp_path: Path, cell: str) -> None:
    (tmp_path / "map.json").write_text('{"r1": "A", "r2": "B"}')
    (tmp_path / "m.csv").write_text(f"origin,A,B\nA,5,{cell}\nB,7,5\n")
    m = load_latency_matrix(tmp_path / "m.csv", tmp_path / "map.json")
    assert np.isnan(m.rtt("A", "B")) and m.rtt_ms[[0, 1, 1], [0, 0, 1]].tolist() == [5.0, 7.0, 5.0]


@needs_latency
def test_a_pandas_style_file_with_nan_cells_loads_as_unknown(tmp_path: Path) -> None:
    """As written by ``DataFrame.to_csv(na_rep="NaN")``: the same matrix as with empty cells."""
    rows = _rows()
    de, fr = next(k for k, r in enumerate(rows) if r[0] == "DE"), rows[0].index("FR")
    rows[de][fr] = ""
    empty = load_latency_matrix(_write(tmp_path / "empty.csv", rows), MAPPER)
    rows[de][fr] = "NaN"
    nan = load_latency_matrix(_write(tmp_path / "nan.csv", rows), MAPPER)
    assert np.isnan(nan.rtt("DE", "FR")) and not np.isnan(nan.rtt("FR", "DE"))
    assert np.array_equal(nan.rtt_ms, empty.rtt_ms, equal_nan=True)


@pytest.mark.parametrize(
    ("cell", "match"),
    [
        ("-1", r"must be finite and >= 0, got '-1'"),
        ("inf", r"must be finite and >= 0, got 'inf'"),
        ("-nan", r"must be finite and >= 0, got '-nan'"),
        ("None", r"expected a number, got 'None'"),
        ("?", r"expected a number, got '\?'"),
    ],
)
def test_other_text_and_negatives_are_still_refused(tmp_path: Path, cell: str, match: str) -> None:
    (tmp_path / "map.json").write_text('{"r1": "A", "r2": "B"}')
    (tmp_path / "m.csv").write_text(f"origin,A,B\nA,5,{cell}\nB,7,5\n")
    with pytest.raises(SignalFormatError, match=r"m.csv line 2: column 'B': " + match):
        load_latency_matrix(tmp_path / "m.csv", tmp_path / "map.json")


# --- carbon CSV: the real line after a cell spanning lines --------------------------------------

NOTE = '2020-03-02 00:00:00,100,"first line\nsecond line\nthird line"\n'  # lines 2-4


@pytest.mark.parametrize(
    ("after", "match"),
    [
        ("2020-03-02 01:00:00,110,\n2020-03-02 02:00:00,x,\n", r"line 6: Carbon Intensity: expected a number, got 'x'"),
        ("2020-03-02 01:00:00,-5,\n", r"line 5: Carbon Intensity: must be finite and >= 0"),
        ("\n2020-03-02 01:00:00,110,\nsoon,1,\n", r"line 7: Time: expected a time like"),
        ("2020-03-02 00:00:00,110,\n", r"line 5: Time: times must increase"),
        ('2020-03-02 01:00:00,x,"a\nb"\n', r"lines 5-6: Carbon Intensity: expected a number, got 'x'"),
    ],
)
def test_carbon_errors_name_the_file_line_after_a_multiline_cell(tmp_path: Path, after: str, match: str) -> None:
    path = tmp_path / "ci.csv"
    path.write_text("Time,Carbon Intensity,note\n" + NOTE + after, encoding="utf-8")
    with pytest.raises(SignalFormatError, match=match) as info:
        load_carbon_csv(path)
    assert str(info.value).startswith(f"{path} line")


def test_a_multiline_cell_itself_loads(tmp_path: Path) -> None:
    path = tmp_path / "ci.csv"
    path.write_text("Time,Carbon Intensity,note\n" + NOTE + "2020-03-02 01:00:00,110,\n", encoding="utf-8")
    assert load_carbon_csv(path).values.tolist() == [100.0, 110.0]


@needs_data
def test_simulate_exits_2_naming_the_real_line_of_a_user_carbon_file(tmp_path: Path, capsys) -> None:
    path = tmp_path / "de.csv"
    path.write_text("Time,Carbon Intensity,note\n" + NOTE + "2020-03-02 01:00:00,x,\n", encoding="utf-8")
    out = tmp_path / "report.json"
    code = main(["simulate", "--scenario", "bank", "--solver", "greedy-objective", "--hours", "1",
                 "--set", f"carbon.DE={path}", "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 2, err
    assert f"{path} line 5: Carbon Intensity: expected a number, got 'x'" in err
    assert not out.exists()


# --- placement file: one error for a card list on an unknown node -------------------------------


@pytest.fixture
def problem():
    return problem_from_dict({
        "domains": [{"name": "d", "kind": "zone", "carbon_intensity": 100,
                     "price_per_hour": {"cpu": 0.03, "memory": 0.004, "gpu": 2.5}}],
        "nodes": [{"name": "g2", "domain": "d", "capacity": {"cpu": 8000, "memory": 8192}, "gpus": 2,
                   "gpu_model": "V100M32", "gpu_free_milli": [1000, 1000]}],
        "workloads": [{"name": "half", "requests": {"cpu": 100, "memory": 100}, "gpu": {"count": 1, "milli": 500}}],
    })


@pytest.mark.parametrize(
    ("node", "cards", "errors"),
    [
        ("g9", [0], ["assignments.half: unknown node 'g9'"]),
        (7, [0], ["assignments.half: expected a node name or null, got int"]),
        ("g9", "0", ["assignments.half: unknown node 'g9'",
                     "gpu_assignments.half: expected a list of card indices, got string"]),
    ],
)
def test_cards_of_a_pod_on_a_bad_node_add_no_false_error(problem, node, cards, errors) -> None:
    with pytest.raises(ValueError) as info:
        placement_from_dict(problem, {"assignments": {"half": node}, "gpu_assignments": {"half": cards}})
    assert str(info.value) == "invalid placement file: " + "; ".join(errors)


def test_cards_of_an_unplaced_pod_are_still_refused(problem) -> None:
    with pytest.raises(ValueError, match=r"^invalid placement file: gpu_assignments\.half: the workload is not placed$"):
        placement_from_dict(problem, {"assignments": {"half": None}, "gpu_assignments": {"half": [0]}})

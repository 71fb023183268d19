"""The label map's one reader: what features writes reads back as written, a map written before
the chart's fields existed reads with their defaults, and a file that is no label map is refused
naming it."""

import ast
import json
import re
from pathlib import Path

import pytest

import account_tax
from account_tax.data.label_map import LabelMap
from account_tax.errors import DataError

PACKAGE = Path(account_tax.__file__).parent
REPO = PACKAGE.parents[1]

CHARTED = LabelMap(
    label_column="account",
    labels=["4000", "4400", "6300", "1200"],
    counts={"4000": 0, "4400": 7, "6300": 2, "1200": 0},
    names=["Revenue", "Sales", None, "Bank"],
    descriptions=[None, "Sales of goods", None, None],
    parents=[None, "4000", None, None],
    postable=[False, True, True, True],
)


def test_a_written_label_map_reads_back_as_written(tmp_path):
    path = tmp_path / "label_map.json"
    CHARTED.write(path)
    assert LabelMap.read(path) == CHARTED
    assert list(json.loads(path.read_text())) == [
        "label_column",
        "labels",
        "counts",
        "names",
        "descriptions",
        "parents",
        "postable",
    ]


def test_what_a_label_map_says_of_its_classes():
    assert CHARTED.class_texts() == ["Revenue", "Sales: Sales of goods", "6300", "Bank"]
    assert CHARTED.named
    assert CHARTED.postable_mask().tolist() == [False, True, True, True]
    assert CHARTED.hierarchy() == [None, "4000", None, None]
    assert CHARTED.with_samples() == {"4400", "6300"}


def test_a_label_map_from_before_the_chart_names_nothing_and_every_account_takes_postings(
    tmp_path,
):
    path = tmp_path / "label_map.json"
    path.write_text(
        json.dumps({"label_column": "account", "labels": ["a", "b"], "counts": {"a": 3, "b": 0}})
    )
    old = LabelMap.read(path)
    assert old.names == old.descriptions == old.parents == [None, None]
    assert old.postable == [True, True]
    assert old.class_texts() == ["a", "b"]
    assert not old.named
    assert old.hierarchy() is None
    assert old.with_samples() == {"a"}


@pytest.mark.parametrize(
    "text",
    ["{not json", '{"labels": ["a"]}', '["a", "b"]'],
    ids=["not JSON", "no counts or label column", "a list"],
)
def test_a_file_that_is_no_label_map_is_refused_naming_it(tmp_path, text):
    path = tmp_path / "label_map.json"
    path.write_text(text)
    with pytest.raises(DataError, match=r"label_map\.json: not a label map this workflow wrote"):
        LabelMap.read(path)


def label_map_reads(root: Path) -> list[str]:
    """Each `json.load(s)` below `root` whose argument names a label map, as `file:line`."""
    found = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (
                isinstance(node, ast.Call)
                and ast.unparse(node.func) in ("json.loads", "json.load")
                and re.search("label_map|LABEL_MAP", ast.unparse(node))
            ):
                found.append(f"{path.relative_to(root)}:{node.lineno}")
    return found


def test_the_product_reads_a_label_map_only_through_its_reader():
    """A manifest has one reader: the product never parses label_map.json itself."""
    assert label_map_reads(PACKAGE) == []
    assert label_map_reads(REPO / "scripts") == []


def test_the_check_sees_a_label_map_read_by_hand(tmp_path):
    (tmp_path / "job.py").write_text(
        "import json\nlabels = json.loads((model / LABEL_MAP).read_text())['labels']\n"
    )
    assert label_map_reads(tmp_path) == ["job.py:2"]

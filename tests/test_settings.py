"""The config schema is the one source of every default; each section reaches stage code through
its typed view."""

import json
import re
from dataclasses import MISSING, fields, is_dataclass
from pathlib import Path
from typing import get_type_hints

import jsonschema
import pytest
import yaml

from account_tax.backtest.periods import BacktestSettings
from account_tax.data.clean import CleanSettings
from account_tax.data.features import FeatureSettings
from account_tax.data.serialize import SerializeSettings
from account_tax.data.spec import ChartColumns, DataSpec
from account_tax.data.split import SplitSettings
from account_tax.errors import DataError
from account_tax.evaluation.assessment import ReviewSettings
from account_tax.evaluation.baseline import BaselineSettings
from account_tax.evaluation.prediction_parts import PredictSettings
from account_tax.settings import (
    SCHEMA_PATH,
    EvaluateSettings,
    complete,
    config_schema,
    load_settings,
    plain,
)
from account_tax.storage.retention import RetainSettings
from account_tax.storage.s3 import UploadSettings
from account_tax.tracking.champion import RegisterSettings
from account_tax.training.settings import TrainSettings
from account_tax.training.sweep import SweepSettings
from account_tax.workflow_run import TrackingSettings

REPO = Path(__file__).resolve().parents[1]

VIEWS = {
    "clean": CleanSettings,
    "features": FeatureSettings,
    "split": SplitSettings,
    "serialize": SerializeSettings,
    "baseline": BaselineSettings,
    "train": TrainSettings,
    "review": ReviewSettings,
    "evaluate": EvaluateSettings,
    "predict": PredictSettings,
    "register": RegisterSettings,
    "upload": UploadSettings,
    "retain": RetainSettings,
    "tracking": TrackingSettings,
    "sweep": SweepSettings,
    "backtest": BacktestSettings,
}
# Required keys without a default, the least a section needs to be built.
REQUIRED = {"serialize": {"fields": [{"column": "memo"}]}}
MINIMAL_DATA = {"path": "ledger.csv", "columns": {"label": "account"}}


def schema_keys(schema, prefix=""):
    """Every key of a section, dotted, with its default where the schema gives one."""
    for name, spec in schema["properties"].items():
        yield prefix + name, spec.get("default", "<none>")
        if "properties" in spec:
            yield from schema_keys(spec, f"{prefix}{name}.")


def view_keys(view, prefix=""):
    for field in fields(view):
        value = getattr(view, field.name)
        yield prefix + field.name, plain(value)
        if is_dataclass(value):
            yield from view_keys(value, f"{prefix}{field.name}.")


def test_the_schema_is_valid_and_the_one_file_the_workflow_validates_against():
    jsonschema.Draft202012Validator.check_schema(config_schema())
    common = (REPO / "workflow" / "rules" / "common.smk").read_text()
    assert "config.update(complete(config, whole=True))" in common
    assert SCHEMA_PATH.parent.name == "account_tax"  # shipped in the package, read by containers
    # Hidden folders hold copies a parallel test makes (.cache/apptainer builds), and .venv.
    schemas = [
        path
        for path in REPO.rglob("*.schema.yaml")
        if not any(part.startswith(".") for part in path.relative_to(REPO).parts)
    ]
    assert schemas == [SCHEMA_PATH]


def no_defaults(cls) -> list[str]:
    """Fields of a view (and of the views inside it) that carry a default of their own."""
    found = [f.name for f in fields(cls) if f.default is not MISSING]
    found += [f.name for f in fields(cls) if f.default_factory is not MISSING]
    for hint in get_type_hints(cls).values():
        if isinstance(hint, type) and is_dataclass(hint):
            found += no_defaults(hint)
    return found


@pytest.mark.parametrize("section", sorted(VIEWS))
def test_every_schema_key_reaches_its_typed_view_with_its_default(section):
    assert no_defaults(VIEWS[section]) == []  # the schema's default is the only one
    view = VIEWS[section].of(REQUIRED.get(section, {}))
    schema = config_schema()["properties"][section]
    expected = dict(schema_keys(schema))
    got = dict(view_keys(view))
    assert set(got) == set(expected)
    for key, default in expected.items():
        if default != "<none>" and not isinstance(default, dict):
            assert got[key] == default, key


def test_every_data_key_reaches_the_data_spec(tmp_path):
    """The spec has the column roles at its top and reads `classes` with `chart_columns` into
    its chart; every other key is a field of its own."""
    schema = config_schema()["properties"]["data"]["properties"]
    roles = schema["columns"]["properties"]
    assert {f.name for f in fields(DataSpec)} == (
        set(schema) - {"columns", "chart_columns"} | set(roles) | {"chart"}
    )
    assert no_defaults(DataSpec) == [] and no_defaults(ChartColumns) == []
    spec = DataSpec.from_config({"data": MINIMAL_DATA})
    for key, value in [*schema.items(), *roles.items()]:
        if "default" in value and key != "chart_columns":
            assert plain(getattr(spec, key)) == value["default"], key
    chart = tmp_path / "chart.csv"
    chart.write_text("nr,title\n4930,Office supplies\n4210,Rent\n")
    data = MINIMAL_DATA | {"classes": str(chart), "chart_columns": {"code": "nr", "name": "title"}}
    spec = DataSpec.from_config({"data": data})
    assert spec.classes == ("4930", "4210")
    assert spec.chart.names == ("Office supplies", "Rent")


def test_every_section_has_a_view_but_the_launch_resources_the_snakefile_reads():
    sections = set(config_schema()["properties"])
    assert sections - set(VIEWS) == {"data", "train_resources"}
    common = (REPO / "workflow" / "rules" / "common.smk").read_text()
    for key in config_schema()["properties"]["train_resources"]["properties"]:
        assert f'launch["{key}"]' in common, key


def test_no_stage_code_writes_a_config_default_again():
    """`.get("key", <default>)` on a config section would be a second copy of a default."""
    pattern = re.compile(r"""\b(options|settings|config|section|data|columns)\.get\(["']\w+["'],""")
    found = [
        f"{path.relative_to(REPO)}:{n}"
        for path in [*(REPO / "src").rglob("*.py"), *(REPO / "scripts").glob("*.py")]
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if pattern.search(line)
    ]
    assert not found, found


def test_views_read_lists_as_tuples_and_nested_sections_as_views():
    settings = TrainSettings.of(epochs=1, lora={"r": 2, "target_modules": ["q_proj"]})
    assert settings.lora.r == 2 and settings.lora.target_modules == ("q_proj",)
    assert (
        settings.lora.alpha
        == config_schema()["properties"]["train"]["properties"]["lora"]["properties"]["alpha"][
            "default"
        ]
    )
    assert TrainSettings.of(settings.to_dict()) == settings
    assert BaselineSettings.of(char_ngram_range=[3, 4]).char_ngram_range == (3, 4)


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (
            lambda: TrainSettings.of(epoch=1),
            r"config `train`: unknown key 'epoch'; allowed keys: backend, .*, epochs, ",
        ),
        (lambda: TrainSettings.of(lora={"rank": 4}), r"config `train.lora`: .*'rank'"),
        (lambda: TrainSettings.of(precision="bf17"), r"`train.precision`: 'bf17' is not one of"),
        (lambda: BaselineSettings.of(class_weight="inverse"), r"`baseline.class_weight`"),
        (lambda: SplitSettings.of(strategy="by-month"), r"`split.strategy`: 'by-month'"),
        (lambda: UploadSettings.of(bucket=""), r"`upload.bucket`: '' is too short"),
        (lambda: RetainSettings.of(keep_last=0), r"`retain.keep_last`: 0 is less than"),
        (
            lambda: complete({"trian": {}}),
            r"config `top level`: unknown key 'trian'; allowed .*train",
        ),
        (lambda: complete({}, whole=True), r"config `top level`: 'data' is a required property"),
    ],
)
def test_unknown_keys_and_bad_values_are_errors_that_name_the_key(build, message):
    with pytest.raises(DataError, match=message):
        build()


def test_a_rule_between_keys_is_checked_by_the_view():
    with pytest.raises(ValueError, match="merge_adapter needs"):
        TrainSettings.of(lora={"enabled": False}, merge_adapter=True)


def test_completing_fills_defaults_without_sharing_the_schema_objects():
    first = complete({})
    first["features"]["date_parts"].append("quarter")
    first["tracking"]["experiment"] = "changed"
    again = complete({})
    assert again["features"]["date_parts"] == ["year", "month", "weekday"]
    assert again["tracking"]["experiment"] == "account-tax"
    assert "data" not in again  # a script is handed only the sections it reads


def test_settings_from_a_config_file_and_from_json_are_completed_the_same_way(tmp_path):
    path = tmp_path / "config.yaml"
    raw = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    path.write_text(yaml.safe_dump(raw))
    from_file = load_settings(str(path))
    from_json = load_settings(json.dumps(raw))
    assert from_file == from_json
    assert (
        from_file["upload"]["multipart_threshold_mb"] == UploadSettings.of().multipart_threshold_mb
    )
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(raw | {"train": {"epochz": 1}}))
    with pytest.raises(DataError, match="unknown key 'epochz'"):
        load_settings(str(bad))


def test_the_bundled_config_holds_overrides_only():
    """config/config.yaml describes the bundled dataset: apart from `data` and `serialize` (the
    dataset itself), every key it sets differs from the schema's default, with a comment above
    it saying why."""
    text = (REPO / "config" / "config.yaml").read_text(encoding="utf-8")
    bundled = yaml.safe_load(text)
    tuned = [section for section in bundled if section not in ("data", "serialize")]
    defaults = complete({section: {} for section in tuned})
    repeated = [
        f"{section}.{key}"
        for section in tuned
        for key, value in bundled[section].items()
        if defaults[section][key] == value
    ]
    assert repeated == []
    lines = text.splitlines()
    for section in tuned:
        for key in bundled[section]:
            number = next(n for n, line in enumerate(lines) if line.startswith(f"  {key}:"))
            assert lines[number - 1].lstrip().startswith("#"), f"{section}.{key} says not why"

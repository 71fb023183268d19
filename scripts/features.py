"""Features: derived fields (date parts, log amounts and amount magnitudes, digit masking) and
the label map with a stable id for every class, including classes without samples, and each
class's name, description and parent from the chart of accounts."""

from pathlib import Path

from account_tax import cli
from account_tax.data.features import FeatureSettings, build_features
from account_tax.data.label_map import LABEL_MAP, LabelMap
from account_tax.data.plots import plot_class_distribution
from account_tax.data.spec import DataSpec
from account_tax.stage_log import log_stage


def main() -> None:
    parser = cli.parser(__doc__)
    parser.add_argument("--input", type=Path, required=True, help="clean records Parquet")
    parser.add_argument("--output", type=Path, required=True, help="records with features")
    parser.add_argument("--label-map", type=Path, required=True, help="label map JSON to write")
    parser.add_argument("--plot", type=Path, required=True, help="class distribution PNG")
    parser.add_argument(
        "--init-model", type=Path, help="the model a warm start begins from: its label ids stay"
    )
    args = parser.parse_args()
    spec = DataSpec.from_config(args.settings)
    options = FeatureSettings.of(args.settings["features"])
    previous = None
    if args.init_model:
        previous = LabelMap.read(args.init_model / LABEL_MAP)
    mapping = build_features(args.input, spec, options, args.output, args.label_map, previous)
    plot_class_distribution(mapping.counts, args.plot, "Classes after cleaning")
    counts = mapping.counts.values()
    metrics = {
        "classes": len(counts),
        "classes_without_samples": sum(1 for n in counts if n == 0),
        "classes_named": sum(1 for name in mapping.names if name is not None),
        "classes_with_parent": sum(1 for parent in mapping.parents if parent is not None),
    }
    log_stage(args.tracking, "features", metrics, [args.label_map, args.plot])


if __name__ == "__main__":
    cli.run(main)

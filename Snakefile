# account-tax: raw accounting records to a fine-tuned classifier of account codes.
# Run from this folder: `snakemake --cores all` (see README.md).
from snakemake.utils import min_version

min_version("9.0")


configfile: "config/config.yaml"


report: "workflow/report/workflow.rst"


include: "workflow/rules/common.smk"
include: "workflow/rules/tracking.smk"
include: "workflow/rules/data.smk"
include: "workflow/rules/train.smk"
include: "workflow/rules/evaluate.smk"
include: "workflow/rules/upload.smk"
include: "workflow/rules/register.smk"
include: "workflow/rules/backtest.smk"
include: "workflow/rules/report.smk"


rule all:
    default_target: True
    input:
        final_outputs(),

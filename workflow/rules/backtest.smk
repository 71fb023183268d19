# The backtest (config section `backtest`), run only when asked for: `snakemake backtest`. Each
# variant replays the whole workflow period by period, one run folder per period under runs/.


rule backtest_variant:
    input:
        raw="results/ingest/records.parquet",
        records=labelled_records(),
    output:
        output="results/backtest/{variant}/periods.tsv",
        runs=directory("results/backtest/{variant}/runs"),
    log:
        "logs/backtest/{variant}.log",
    benchmark:
        "benchmarks/backtest/{variant}.tsv"
    conda:
        "../../envs/train.yaml"
    container:
        "containers/train.sif"
    # Each period's workflow run gets them all: Snakemake caps them at --cores, and a cluster
    # profile sets them (profiles/slurm: set-threads).
    threads: 1024
    params:
        script=script("backtest"),
        code=code_sha256("backtest"),
        tracking=RUN_FILE,
        settings=settings(*config),
        snakefile=workflow.main_snakefile,
        paths=path_options(),
    shell:
        "python {params.script} --settings {params.settings:q} {params.paths}"
        " --variant {wildcards.variant} --snakefile {params.snakefile} --cores {threads}"
        " --tracking {params.tracking} > {log} 2>&1"


rule backtest:
    input:
        variants=expand(
            "results/backtest/{variant}/periods.tsv",
            variant=config["backtest"]["variants"],
        ),
    output:
        table="results/backtest/periods.tsv",
        plot=report(
            "results/backtest/backtest.png",
            caption="../report/backtest.rst",
            category="Backtest",
        ),
    log:
        "logs/backtest/summary.log",
    conda:
        "../../envs/train.yaml"
    container:
        "containers/train.sif"
    params:
        script=script("backtest_summary"),
        code=code_sha256("backtest_summary"),
        tracking=RUN_FILE,
        settings=settings("review"),
        paths=path_options(),
    shell:
        "python {params.script} --settings {params.settings:q} {params.paths}"
        " --tracking {params.tracking} > {log} 2>&1"

rule ingest:
    input:
        input=raw_input(),
    output:
        output="results/ingest/records.parquet",
    log:
        "logs/ingest/ingest.log",
    benchmark:
        "benchmarks/ingest.tsv"
    conda:
        "../../envs/data.yaml"
    container:
        "containers/data.sif"
    threads: 2
    params:
        script=script("ingest"),
        code=code_sha256("ingest"),
        tracking=RUN_FILE,
        settings=settings("data"),
        paths=path_options(),
    shell:
        "POLARS_MAX_THREADS={threads} python {params.script} --settings {params.settings:q}"
        " {params.paths} --tracking {params.tracking} > {log} 2>&1"


rule clean:
    input:
        input="results/ingest/records.parquet",
        classes=classes_file(),
    output:
        output="results/clean/records.parquet",
        rejects="results/clean/rejects.parquet",
        counts="results/clean/counts.json",
        summary=report(
            "results/clean/summary.tsv",
            caption="../report/clean_summary.rst",
            category="Clean",
        ),
    log:
        "logs/clean/clean.log",
    benchmark:
        "benchmarks/clean.tsv"
    conda:
        "../../envs/data.yaml"
    container:
        "containers/data.sif"
    threads: 2
    params:
        script=script("clean"),
        code=code_sha256("clean"),
        tracking=RUN_FILE,
        settings=settings("data", "clean"),
        paths=path_options("classes"),
    shell:
        "POLARS_MAX_THREADS={threads} python {params.script} --settings {params.settings:q}"
        " {params.paths} --tracking {params.tracking} > {log} 2>&1"


rule correct:
    input:
        input="results/clean/records.parquet",
        clean_counts="results/clean/counts.json",
        corrections=config["data"]["corrections"],
        classes=classes_file(),
    output:
        output="results/correct/records.parquet",
        rejects="results/correct/rejects.parquet",
        counts="results/correct/counts.json",
        track_record="results/correct/track_record.parquet",
        summary=report(
            "results/correct/summary.tsv",
            caption="../report/correct_summary.rst",
            category="Clean",
        ),
    log:
        "logs/correct/correct.log",
    benchmark:
        "benchmarks/correct.tsv"
    conda:
        "../../envs/data.yaml"
    container:
        "containers/data.sif"
    threads: 2
    params:
        script=script("correct"),
        code=code_sha256("correct"),
        tracking=RUN_FILE,
        settings=settings("data", "clean"),
        paths=path_options("classes"),
    shell:
        "POLARS_MAX_THREADS={threads} python {params.script} --settings {params.settings:q}"
        " {params.paths} --tracking {params.tracking} > {log} 2>&1"


rule features:
    input:
        **init_model(),
        input=labelled_records(),
        classes=classes_file(),
    output:
        output="results/features/records.parquet",
        label_map="results/features/label_map.json",
        plot=report(
            "results/features/class_distribution.png",
            caption="../report/class_distribution.rst",
            category="Features",
        ),
    log:
        "logs/features/features.log",
    benchmark:
        "benchmarks/features.tsv"
    conda:
        "../../envs/data.yaml"
    container:
        "containers/data.sif"
    threads: 2
    params:
        script=script("features"),
        code=code_sha256("features"),
        tracking=RUN_FILE,
        settings=settings("data", "features"),
        paths=path_options("classes"),
    shell:
        "POLARS_MAX_THREADS={threads} python {params.script} --settings {params.settings:q}"
        " {params.paths} --tracking {params.tracking} > {log} 2>&1"


rule split:
    input:
        **init_model(),
        input="results/features/records.parquet",
    output:
        splits=expand("results/split/{split}.parquet", split=SPLITS),
        report="results/split/split_report.json",
        plot=report(
            "results/split/split_distribution.png",
            caption="../report/split_distribution.rst",
            category="Split",
        ),
        counts_table=report(
            "results/split/split_counts.tsv",
            caption="../report/split_counts.rst",
            category="Split",
        ),
    log:
        "logs/split/split.log",
    benchmark:
        "benchmarks/split.tsv"
    conda:
        "../../envs/data.yaml"
    container:
        "containers/data.sif"
    threads: 2
    params:
        script=script("split"),
        code=code_sha256("split"),
        tracking=RUN_FILE,
        out_dir=lambda wildcards, output: Path(output.report).parent,
        settings=settings("data", "split", "evaluate.holdout_classes"),
        # The splits and the report are written into --out-dir.
        paths=path_options("splits", "report"),
    shell:
        "POLARS_MAX_THREADS={threads} python {params.script} --settings {params.settings:q}"
        " {params.paths} --out-dir {params.out_dir} --tracking {params.tracking} > {log} 2>&1"


rule serialize:
    input:
        input="results/split/{split}.parquet",
        label_map="results/features/label_map.json",
    output:
        output="results/serialize/{split}.parquet",
    log:
        "logs/serialize/{split}.log",
    benchmark:
        "benchmarks/serialize/{split}.tsv"
    conda:
        "../../envs/data.yaml"
    container:
        "containers/data.sif"
    threads: 1
    params:
        script=script("serialize"),
        code=code_sha256("serialize"),
        tracking=RUN_FILE,
        settings=settings("data", "serialize"),
        paths=path_options(),
    shell:
        "POLARS_MAX_THREADS={threads} python {params.script} --settings {params.settings:q}"
        " {params.paths} --split {wildcards.split} --tracking {params.tracking} > {log} 2>&1"

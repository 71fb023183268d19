rule ingest:
    input:
        raw_input(),
    output:
        "results/ingest/records.parquet",
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
    shell:
        "POLARS_MAX_THREADS={threads} python {params.script} --settings {params.settings:q}"
        " --input {input:q} --output {output} --tracking {params.tracking} > {log} 2>&1"


rule clean:
    input:
        records="results/ingest/records.parquet",
        classes=classes_file(),
    output:
        records="results/clean/records.parquet",
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
    shell:
        "POLARS_MAX_THREADS={threads} python {params.script} --settings {params.settings:q}"
        " --input {input.records} --output {output.records} --rejects {output.rejects}"
        " --counts {output.counts} --summary {output.summary}"
        " --tracking {params.tracking} > {log} 2>&1"


rule features:
    input:
        records="results/clean/records.parquet",
        classes=classes_file(),
    output:
        records="results/features/records.parquet",
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
    shell:
        "POLARS_MAX_THREADS={threads} python {params.script} --settings {params.settings:q}"
        " --input {input.records} --output {output.records} --label-map {output.label_map}"
        " --plot {output.plot} --tracking {params.tracking} > {log} 2>&1"


rule split:
    input:
        "results/features/records.parquet",
    output:
        splits=expand("results/split/{split}.parquet", split=SPLITS),
        report="results/split/split_report.json",
        plot=report(
            "results/split/split_distribution.png",
            caption="../report/split_distribution.rst",
            category="Split",
        ),
        counts=report(
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
    shell:
        "POLARS_MAX_THREADS={threads} python {params.script} --settings {params.settings:q}"
        " --input {input} --out-dir {params.out_dir} --plot {output.plot}"
        " --counts-table {output.counts}"
        " --tracking {params.tracking} > {log} 2>&1"


rule serialize:
    input:
        records="results/split/{split}.parquet",
        label_map="results/features/label_map.json",
    output:
        "results/serialize/{split}.parquet",
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
    shell:
        "POLARS_MAX_THREADS={threads} python {params.script} --settings {params.settings:q}"
        " --input {input.records} --label-map {input.label_map} --output {output}"
        " --tracking {params.tracking} > {log} 2>&1"

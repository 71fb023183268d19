rule train_segment:
    input:
        **train_inputs(),
        previous=previous_segment,
    output:
        "results/train/segments/{segment}.json",
    log:
        "logs/train/segment-{segment}.log",
    benchmark:
        "benchmarks/train/segment-{segment}.tsv"
    wildcard_constraints:
        # The last segment is the `train` rule, which also writes the model.
        segment="|".join(str(s) for s in range(1, TRAIN_SEGMENTS)) or "(?!)",
    conda:
        "../../envs/train.yaml"
    container:
        "containers/train.sif"
    threads: train_threads()
    resources:
        **train_resources(),
    params:
        script=script("train"),
        code=code_sha256("train"),
        launcher=train_launcher,
        checkpoint_dir=CHECKPOINT_DIR,
        settings=settings("train"),
    shell:
        "{params.launcher} {params.script} --settings {params.settings:q}"
        " --train {input.train} --validation {input.validation} --label-map {input.label_map}"
        " --checkpoint-dir {params.checkpoint_dir} --segment {wildcards.segment}"
        " --segment-marker {output} > {log} 2>&1"


rule train:
    input:
        **train_inputs(),
        previous=last_segment_before_final(),
    output:
        model=directory("results/train/model"),
        metrics="results/train/metrics.json",
        history="results/train/history.jsonl",
        marker=f"results/train/segments/{TRAIN_SEGMENTS}.json",
    log:
        "logs/train/train.log",
    benchmark:
        "benchmarks/train/train.tsv"
    conda:
        "../../envs/train.yaml"
    container:
        "containers/train.sif"
    threads: train_threads()
    resources:
        **train_resources(),
    params:
        script=script("train"),
        code=code_sha256("train"),
        launcher=train_launcher,
        checkpoint_dir=CHECKPOINT_DIR,
        tracking=RUN_FILE,
        segment=TRAIN_SEGMENTS,
        settings=settings("train"),
    shell:
        "{params.launcher} {params.script} --settings {params.settings:q}"
        " --train {input.train} --validation {input.validation} --label-map {input.label_map}"
        " --checkpoint-dir {params.checkpoint_dir} --segment {params.segment}"
        " --segment-marker {output.marker} --output-dir {output.model}"
        " --metrics {output.metrics} --history {output.history}"
        " --tracking {params.tracking} > {log} 2>&1"

# Training runs in train.segments jobs; segment s resumes from the last checkpoint of segment
# s-1 (in CHECKPOINT_DIR, which is no rule's output). Every segment exports the best model so
# far; the last one's is the trained model (TRAINED).


rule train:
    input:
        **train_inputs(),
        previous=previous_segment,
    output:
        output_dir=directory("results/train/segment-{segment}/model"),
        metrics="results/train/segment-{segment}/metrics.json",
        history="results/train/segment-{segment}/history.jsonl",
        segment_marker="results/train/segment-{segment}/marker.json",
    log:
        "logs/train/segment-{segment}.log",
    benchmark:
        "benchmarks/train/segment-{segment}.tsv"
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
        settings=settings("train"),
        # The DeepSpeed file reaches the script through train.deepspeed_config.
        paths=path_options("deepspeed", "previous"),
    shell:
        "{params.launcher} {params.script} --settings {params.settings:q} {params.paths}"
        " --checkpoint-dir {params.checkpoint_dir} --segment {wildcards.segment}"
        " --tracking {params.tracking} > {log} 2>&1"

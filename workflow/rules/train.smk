# Training runs in train.segments jobs; segment s resumes from the last checkpoint of segment
# s-1 (in CHECKPOINT_DIR, which is no rule's output). Every segment exports the best model so
# far; the last one's is the trained model (TRAINED).
#
# With a sweep, each trial trains first (train_trial, to its end); choose_trial picks the best
# on validation and the train rule runs with its settings: the same checkpoint folder (it is
# named by the settings), so it resumes the finished trial and trains nothing again.


rule init_model:
    output:
        output=directory(INIT_MODEL),
    log:
        "logs/init_model.log",
    conda:
        "../../envs/train.yaml"
    container:
        "containers/train.sif"
    params:
        script=script("init_model"),
        code=code_sha256("init_model"),
        tracking=RUN_FILE,
        settings=settings("register"),
        paths=path_options(),
        champion=champion_version,
    shell:
        "python {params.script} --settings {params.settings:q} {params.paths}"
        " --tracking {params.tracking} > {log} 2>&1"


rule train:
    input:
        **train_inputs(),
        **sweep_choice(),
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
        settings=train_settings(),
        # The DeepSpeed file reaches the script through train.deepspeed_config.
        paths=path_options("deepspeed", "previous", "sweep_choice"),
    shell:
        "{params.launcher} {params.script} --settings {params.settings:q} {params.paths}"
        " --checkpoint-dir {params.checkpoint_dir} --segment {wildcards.segment}"
        " --tracking {params.tracking} > {log} 2>&1"


rule train_trial:
    input:
        **train_inputs(),
    output:
        output_dir=directory("results/sweep/{trial}/model"),
        metrics="results/sweep/{trial}/metrics.json",
        history="results/sweep/{trial}/history.jsonl",
    log:
        "logs/sweep/{trial}.log",
    benchmark:
        "benchmarks/sweep/{trial}.tsv"
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
        settings=trial_settings,
        paths=path_options("deepspeed"),
    shell:
        "{params.launcher} {params.script} --settings {params.settings:q} {params.paths}"
        " --checkpoint-dir {params.checkpoint_dir} --trial {wildcards.trial}"
        " --tracking {params.tracking} > {log} 2>&1"


rule choose_trial:
    input:
        trial_metrics=expand("results/sweep/{trial}/metrics.json", trial=TRIALS),
    output:
        selected=SWEEP_CHOICE,
        trials_table=report(
            "results/sweep/trials.tsv",
            caption="../report/sweep_trials.rst",
            category="Train",
        ),
        plot=report(
            "results/sweep/trials.png",
            caption="../report/sweep_trials.rst",
            category="Train",
        ),
    log:
        "logs/sweep/choose_trial.log",
    localrule: True
    conda:
        "../../envs/train.yaml"
    container:
        "containers/train.sif"
    params:
        script=script("choose_trial"),
        code=code_sha256("choose_trial"),
        tracking=RUN_FILE,
        settings=settings("train", "sweep"),
        paths=path_options(),
    shell:
        "python {params.script} --settings {params.settings:q} {params.paths}"
        " --tracking {params.tracking} > {log} 2>&1"

rule baseline:
    input:
        train="results/serialize/train.parquet",
        validation="results/serialize/validation.parquet",
        test="results/serialize/test.parquet",
        label_map="results/features/label_map.json",
    output:
        model_output="results/baseline/model.joblib",
        metrics="results/baseline/metrics.json",
        predictions="results/baseline/test_predictions.parquet",
        evidence=directory("results/baseline/evidence"),
    log:
        "logs/baseline/baseline.log",
    benchmark:
        "benchmarks/baseline.tsv"
    conda:
        "../../envs/train.yaml"
    container:
        "containers/train.sif"
    threads: 2
    params:
        script=script("baseline"),
        code=code_sha256("baseline"),
        tracking=RUN_FILE,
        settings=settings("baseline"),
        paths=path_options(),
    shell:
        "python {params.script} --settings {params.settings:q} {params.paths}"
        " --threads {threads} --tracking {params.tracking} > {log} 2>&1"


rule evaluate:
    input:
        model=f"{TRAINED}/model",
        history=f"{TRAINED}/history.jsonl",
        validation="results/serialize/validation.parquet",
        test="results/serialize/test.parquet",
        train_records="results/split/train.parquet",
        test_records="results/split/test.parquet",
        baseline_model="results/baseline/model.joblib",
        baseline_metrics="results/baseline/metrics.json",
        baseline_evidence="results/baseline/evidence",
        track_record=track_record(),
    output:
        metrics="results/evaluate/metrics.json",
        predictions="results/evaluate/test_predictions.parquet",
        summary=report(
            "results/evaluate/summary.html",
            caption="../report/evaluation_summary.rst",
            category="Evaluate",
        ),
        curves=report(
            "results/evaluate/training_curves.png",
            caption="../report/training_curves.rst",
            category="Train",
        ),
        confusion=report(
            "results/evaluate/confusion_matrix.png",
            caption="../report/confusion_matrix.rst",
            category="Evaluate",
        ),
        f1_support=report(
            "results/evaluate/f1_vs_support.png",
            caption="../report/f1_vs_support.rst",
            category="Evaluate",
        ),
        comparison=report(
            "results/evaluate/baseline_comparison.png",
            caption="../report/baseline_comparison.rst",
            category="Evaluate",
        ),
        reliability=report(
            "results/evaluate/reliability.png",
            caption="../report/reliability.rst",
            category="Evaluate",
        ),
        precision_coverage=report(
            "results/evaluate/precision_coverage.png",
            caption="../report/precision_coverage.rst",
            category="Evaluate",
        ),
    log:
        "logs/evaluate/evaluate.log",
    benchmark:
        "benchmarks/evaluate.tsv"
    conda:
        "../../envs/train.yaml"
    container:
        "containers/train.sif"
    threads: 2
    params:
        script=script("evaluate"),
        code=code_sha256("evaluate"),
        tracking=RUN_FILE,
        settings=settings(
            "review", "evaluate", "split", "predict.top_k", "predict.evidence_k"
        ),
        paths=path_options(),
    shell:
        "OMP_NUM_THREADS={threads} python {params.script} --settings {params.settings:q}"
        " {params.paths} --threads {threads} --tracking {params.tracking} > {log} 2>&1"


rule export_onnx:
    input:
        model=f"{TRAINED}/model",
        validation="results/serialize/validation.parquet",
    output:
        output=directory("results/export_onnx"),
    log:
        "logs/export_onnx.log",
    benchmark:
        "benchmarks/export_onnx.tsv"
    conda:
        "../../envs/train.yaml"
    container:
        "containers/train.sif"
    threads: 2
    params:
        script=script("export_onnx"),
        code=code_sha256("export_onnx"),
        tracking=RUN_FILE,
        settings=settings(
            "predict.runtime",
            "predict.runtime_min_agreement",
            "predict.runtime_max_ece_change",
        ),
        paths=path_options(),
    shell:
        "OMP_NUM_THREADS={threads} python {params.script} --settings {params.settings:q}"
        " {params.paths} --threads {threads} --tracking {params.tracking} > {log} 2>&1"


rule ledger_rules:
    input:
        input=labelled_records(),
    output:
        rules="results/ledger_rules/rules.parquet",
        report="results/ledger_rules/report.json",
    log:
        "logs/ledger_rules.log",
    conda:
        "../../envs/train.yaml"
    container:
        "containers/train.sif"
    threads: 1
    params:
        script=script("ledger_rules"),
        code=code_sha256("ledger_rules"),
        tracking=RUN_FILE,
        settings=settings(
            "data",
            "review.target_precision",
            "review.confidence_level",
            "review.rules",
        ),
        paths=path_options(),
    shell:
        "POLARS_MAX_THREADS={threads} python {params.script} --settings {params.settings:q}"
        " {params.paths} --tracking {params.tracking} > {log} 2>&1"


rule predict_ingest:
    input:
        input=lambda wildcards: config["predict"]["inputs"][wildcards.name],
    output:
        output=temp("results/predict/{name}/records.parquet"),
    log:
        "logs/predict/{name}/ingest.log",
    conda:
        "../../envs/data.yaml"
    container:
        "containers/data.sif"
    threads: 2
    params:
        script=script("ingest"),
        code=code_sha256("ingest"),
        settings=settings("data"),
        paths=path_options(),
    shell:
        "POLARS_MAX_THREADS={threads} python {params.script} --settings {params.settings:q}"
        " {params.paths} --labels-optional > {log} 2>&1"


rule predict_shard:
    input:
        unpack(predict_inputs),
    output:
        predictions=temp("results/predict/{name}/shard-{shard}/predictions.parquet"),
        rejects=temp("results/predict/{name}/shard-{shard}/rejects.parquet"),
        review=temp("results/predict/{name}/shard-{shard}/review.parquet"),
    log:
        "logs/predict/{name}/shard-{shard}.log",
    benchmark:
        "benchmarks/predict/{name}/shard-{shard}.tsv"
    conda:
        "../../envs/train.yaml"
    container:
        "containers/train.sif"
    threads: 2
    params:
        script=script("predict"),
        code=code_sha256("predict"),
        settings=settings(
            "data",
            "clean",
            "features",
            "serialize",
            "predict.top_k",
            "predict.evidence_k",
            "predict.chunk_rows",
        ),
        shards=config["predict"]["shards"],
        paths=path_options(),
    shell:
        "OMP_NUM_THREADS={threads} python {params.script} --settings {params.settings:q}"
        " {params.paths} --shard {wildcards.shard} --shards {params.shards}"
        " --threads {threads} > {log} 2>&1"


rule predict:
    input:
        records="results/predict/{name}/records.parquet",
        model=f"{TRAINED}/model",
        evaluation="results/evaluate/metrics.json",
        predictions_parts=predict_shards("predictions"),
        rejects_parts=predict_shards("rejects"),
        review_parts=predict_shards("review"),
    output:
        output="results/predict/{name}.parquet",
        rejects="results/predict/{name}.rejects.parquet",
        review="results/predict/{name}.review.parquet",
        review_sheet=f"results/predict/{{name}}.review.{config['predict']['review_format']}",
    log:
        "logs/predict/{name}.log",
    benchmark:
        "benchmarks/predict/{name}.tsv"
    conda:
        "../../envs/train.yaml"
    container:
        "containers/train.sif"
    params:
        script=script("predict_gather"),
        code=code_sha256("predict_gather"),
        tracking=RUN_FILE,
        settings=settings(
            "predict.shards",
            "predict.chunk_rows",
            "predict.review_format",
            "predict.review_csv_separator",
        ),
        paths=path_options(),
    shell:
        "python {params.script} --settings {params.settings:q} {params.paths}"
        " --tracking {params.tracking} > {log} 2>&1"

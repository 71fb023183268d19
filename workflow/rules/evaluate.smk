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


rule predict:
    input:
        unpack(predict_inputs),
    output:
        output="results/predict/{name}.parquet",
        rejects="results/predict/{name}.rejects.parquet",
        review="results/predict/{name}.review.parquet",
    log:
        "logs/predict/{name}.log",
    benchmark:
        "benchmarks/predict/{name}.tsv"
    conda:
        "../../envs/train.yaml"
    container:
        "containers/train.sif"
    threads: 2
    params:
        script=script("predict"),
        code=code_sha256("predict"),
        tracking=RUN_FILE,
        settings=settings(
            "data",
            "clean",
            "features",
            "serialize",
            "predict.top_k",
            "predict.evidence_k",
        ),
        paths=path_options(),
    shell:
        "OMP_NUM_THREADS={threads} python {params.script} --settings {params.settings:q}"
        " {params.paths} --threads {threads} --tracking {params.tracking} > {log} 2>&1"

rule register:
    input:
        unpack(register_inputs),
    output:
        record="results/register/model.json",
        summary=report(
            "results/register/summary.html",
            caption="../report/register.rst",
            category="Register",
        ),
    log:
        "logs/register/register.log",
    benchmark:
        "benchmarks/register.tsv"
    conda:
        "../../envs/train.yaml"
    container:
        "containers/train.sif"
    params:
        script=script("register"),
        code=code_sha256("register"),
        tracking=RUN_FILE,
        pyproject=workflow_file("pyproject.toml"),
        receipt=lambda wildcards, input: (
            f"--model-receipt {input.receipt}" if "receipt" in input.keys() else ""
        ),
        settings=settings(
            "data", "clean", "features", "serialize", "predict", "evaluate", "register"
        ),
    shell:
        "python {params.script} --settings {params.settings:q} --model {input.model}"
        " --baseline-model {input.baseline_model} --evaluation {input.evaluation}"
        " --test-predictions {input.test_predictions} --test-records {input.test_records}"
        " {params.receipt} --pyproject {params.pyproject} --output {output.record}"
        " --summary {output.summary} --tracking {params.tracking} > {log} 2>&1"

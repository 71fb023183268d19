rule register:
    input:
        unpack(register_inputs),
    output:
        output="results/register/model.json",
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
        settings=settings(
            "data", "clean", "features", "serialize", "predict", "evaluate", "register"
        ),
        paths=path_options(),
    shell:
        "python {params.script} --settings {params.settings:q} {params.paths}"
        " --pyproject {params.pyproject} --tracking {params.tracking} > {log} 2>&1"

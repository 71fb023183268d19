rule resources:
    input:
        other_outputs(),
    output:
        table=report(
            "results/report/resources.tsv",
            caption="../report/resources.rst",
            category="Resources",
        ),
        plot=report(
            "results/report/resources.png",
            caption="../report/resources.rst",
            category="Resources",
        ),
    log:
        "logs/report/resources.log",
    conda:
        "../../envs/data.yaml"
    container:
        "containers/data.sif"
    params:
        script=script("resources"),
        code=code_sha256("resources"),
        benchmarks="benchmarks",
    shell:
        "python {params.script} --settings '{{}}' --benchmarks {params.benchmarks}"
        " --table {output.table} --plot {output.plot} > {log} 2>&1"

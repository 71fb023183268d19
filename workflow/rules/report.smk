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
        # Its inputs (every other output, unnamed) only order it last: it reads the benchmarks.
        paths=path_options(),
    shell:
        "python {params.script} --settings '{{}}' --benchmarks {params.benchmarks}"
        " {params.paths} > {log} 2>&1"

# Uploads read checkpoints that are not rule outputs (see CHECKPOINT_DIR): each segment's marker
# names them. The upload of segment s runs while segment s+1 trains; retention only acts on
# receipts, so it can never delete a checkpoint whose upload is unproven or still running.
# They are local rules: compute nodes often have no route to S3, and these jobs are light.
# Every receipt is kept in RECEIPTS_DIR, which is no rule's output: Snakemake deletes a job's
# outputs before it re-runs it, and a failed re-upload must not lose the proof of an earlier one.


rule upload_checkpoints:
    input:
        segment_marker="results/train/segment-{segment}/marker.json",
    output:
        index="results/upload/checkpoints/segment-{segment}.json",
    log:
        "logs/upload/checkpoints-{segment}.log",
    benchmark:
        "benchmarks/upload/checkpoints-{segment}.tsv"
    localrule: True
    conda:
        "../../envs/tracking.yaml"
    container:
        "containers/tracking.sif"
    params:
        script=script("upload"),
        code=code_sha256("upload"),
        tracking=RUN_FILE,
        receipts=RECEIPTS_DIR,
        settings=settings("upload"),
        paths=path_options(),
    shell:
        "python {params.script} --settings {params.settings:q} --run-file {params.tracking}"
        " {params.paths} --receipts-dir {params.receipts}"
        " --tracking {params.tracking} > {log} 2>&1"


rule upload_model:
    input:
        source=f"{TRAINED}/model",
    output:
        receipt="results/upload/model.json",
    log:
        "logs/upload/model.log",
    benchmark:
        "benchmarks/upload/model.tsv"
    localrule: True
    conda:
        "../../envs/tracking.yaml"
    container:
        "containers/tracking.sif"
    params:
        script=script("upload"),
        code=code_sha256("upload"),
        tracking=RUN_FILE,
        receipts=RECEIPTS_DIR,
        settings=settings("upload"),
        paths=path_options(),
    shell:
        "python {params.script} --settings {params.settings:q} --run-file {params.tracking}"
        " {params.paths} --name model --receipts-dir {params.receipts}"
        " --tracking {params.tracking} > {log} 2>&1"


rule retain:
    input:
        index="results/upload/checkpoints/segment-{segment}.json",
    output:
        report="results/retain/segment-{segment}.json",
    log:
        "logs/retain/segment-{segment}.log",
    benchmark:
        "benchmarks/retain/segment-{segment}.tsv"
    localrule: True
    conda:
        "../../envs/tracking.yaml"
    container:
        "containers/tracking.sif"
    params:
        script=script("retain"),
        code=code_sha256("retain"),
        tracking=RUN_FILE,
        checkpoint_dir=CHECKPOINT_DIR,
        receipts=RECEIPTS_DIR,
        settings=settings("retain", "upload"),
        # The segment's upload index only orders retention after it.
        paths=path_options("index"),
    shell:
        "python {params.script} --settings {params.settings:q} {params.paths}"
        " --checkpoint-dir {params.checkpoint_dir} --receipts {params.receipts}"
        " --tracking {params.tracking} > {log} 2>&1"

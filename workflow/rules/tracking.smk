# One MLflow run per workflow run. Handlers, not rules: a rule that every job depends on would
# re-run everything after any config change, and marking its output ancient() hides changed raw
# inputs from the rules that read them (Snakemake masks jobs downstream of a job that re-runs).
# onstart runs only when there are jobs to run (never for a dry run or "Nothing to be done").


onstart:
    check_uploads_can_run()
    check_backtest_can_run()
    abandoned = close_abandoned_run(Path(RUN_FILE))
    if abandoned is not None:
        logger.warning(
            f"MLflow run {abandoned['run_id']} was left RUNNING by a killed workflow: closed as KILLED"
        )
    run = start_run(
        config,
        [Path(path) for path in raw_inputs()],
        Path(RUN_FILE),
        repo=WORKFLOW_ROOT,
        command=redact_command(sys.argv),
    )
    logger.info(
        f"MLflow run {run['run_id']} ({run['run_name']}) at {run['tracking_uri']}"
    )


onsuccess:
    run = finish_run(
        Path(RUN_FILE), Path("benchmarks"), "FINISHED", repo=WORKFLOW_ROOT
    )
    logger.info(
        f"MLflow run {run['run_id']} finished; reused outputs of: {run['reused_rules']}"
    )


onerror:
    finish_run(Path(RUN_FILE), Path("benchmarks"), "FAILED", repo=WORKFLOW_ROOT)

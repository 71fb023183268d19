"""Provenance: the workflow's one MLflow run, and the registered prediction model."""

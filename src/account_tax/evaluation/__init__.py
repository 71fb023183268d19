"""Scoring: metrics with error bars, the baseline, calibration, the auto-post threshold, the
assessment that chooses what ships, prediction for new records, and the plots of the report."""

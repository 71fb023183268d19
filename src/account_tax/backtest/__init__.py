"""Backtest: the workflow replayed period by period, with what people decide flowing back."""

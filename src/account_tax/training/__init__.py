"""Training: its settings, the model and its head, batches, the loss, checkpoints, the
processes, precision, and the loop that joins them (`loop.train`)."""

"""Training: config, batches, schedules, checkpoints, distributed glue, the `Trainer` and run directories."""

"""Sweeps: a grid of ordinary `lra run`s (tasks x backends x presets x seeds), each in its own deterministic directory.

`grid` builds and checks the grid and says what each run still needs (nothing, a resume, a start); `local_pool` runs
it as K subprocesses per visible GPU; `cluster` hands it to SLURM (or submitit's local executor) through submitit;
`board` shows the live progress read from each run's files. A sweep killed at any point continues with the same
command: finished runs are skipped, unfinished ones resumed.
"""

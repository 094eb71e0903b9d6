"""The bottom layer: helpers that import nothing else of the project (registry, atomic writes, progress, hashing,
dtype tables, process pools, error types, the run environment). `tasks/` and `attention_impls/` import only this."""

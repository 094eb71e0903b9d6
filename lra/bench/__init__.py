"""Benchmarks: attention kernels, training steps, and the kernel tile tuner."""

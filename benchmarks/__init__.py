"""Benchmarks: each prints its figures and the baseline measured in the same run."""

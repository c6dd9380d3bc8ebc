"""Benchmarks of the training worker; `benches/run` runs them all and prints their figures."""

"""Benchmarks of the training worker and of submission; `benches/run` runs them all and prints their figures."""

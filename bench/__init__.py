"""Benchmarks that compare systems measured side by side in one run (see bench/README.md)."""

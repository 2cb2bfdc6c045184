"""`curvine-py bench`: entry point for the benchmarks kept in the repository's bench/ directory."""

"""The benchmark evaluator."""

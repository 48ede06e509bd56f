"""Executors start and stop a job's learners as real processes (locally or through Ray)."""

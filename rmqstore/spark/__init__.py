"""Spark pipeline (extra `spark`)."""

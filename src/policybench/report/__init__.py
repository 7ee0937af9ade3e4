"""Turning rollout records into results files, tables and statistics."""

"""Fixtures of the deploy checks."""


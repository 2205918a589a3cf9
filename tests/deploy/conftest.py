"""Fixtures of the deploy checks."""

from plugin.testing.pytest_plugin import short_tmp_path as short_tmp_path

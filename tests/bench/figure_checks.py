"""What a test of a benchmark checks about a figure: that it was reported, never how large
it is. A timing or a CPU amount depends on the machine and its load (a CPU time read in a
``--quick`` round can be 0.0 at clock-tick resolution); the targets are ``make bench``'s."""

from __future__ import annotations

import math


def reported(value: object) -> bool:
    """True for a measured figure: a finite int or float (not a bool, not None)."""
    return isinstance(value, int | float) and not isinstance(value, bool) \
        and math.isfinite(value)

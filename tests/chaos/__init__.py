"""Chaos on a real node: a workload of pods with claims, a nemesis that kills and pauses
every component of the node at random moments, and invariants checked against views drakit
does not control (the API server, containerd, the files on disk). See driver.py."""

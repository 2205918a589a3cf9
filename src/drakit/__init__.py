"""drakit: a Python framework for Kubernetes DRA kubelet plugins.

The one top-level import package. Its subpackages live in the repository's top-level
folders (``src/drakit/plugin`` etc. are links to ``plugin/``, ``discovery/``, ``cdi/``):

- :mod:`drakit.discovery`: the device model and the interface a vendor implements;
- :mod:`drakit.cdi`: CDI spec model, versions, validation and store;
- :mod:`drakit.plugin`: the node agent (``drakit.plugin.testing``: the test kit);
- :mod:`drakit.allocator`: DRA allocation and its reasons as the scheduler decides them
  (``drakit explain``, the test kit; never imported by the agent).
"""

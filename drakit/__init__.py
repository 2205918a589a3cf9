"""drakit: a Python framework for Kubernetes DRA kubelet plugins.

The one top-level import package. Its subpackages live in the repository's top-level
folders (``drakit/plugin`` etc. are links to ``plugin/``, ``discovery/``, ``cdi/``):

- :mod:`drakit.discovery`: the device model and the interface a vendor implements;
- :mod:`drakit.cdi`: CDI spec model, versions, validation and store;
- :mod:`drakit.plugin`: the node agent (``drakit.plugin.testing``: the test kit).
"""

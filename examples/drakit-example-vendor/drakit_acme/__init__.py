"""drakit discovery plugin for the ACME accelerator (an example vendor package)."""

from drakit_acme.plugin import AcmeConfig, AcmeDiscovery

__all__ = ["AcmeConfig", "AcmeDiscovery"]

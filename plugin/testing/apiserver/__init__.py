"""The embedded Kubernetes API server (:class:`EmbeddedAPIServer`), by job:

- :mod:`~drakit.plugin.testing.apiserver.server`: the server's lifecycle, kubeconfig, faults and
  request log; :mod:`~drakit.plugin.testing.apiserver.access`: its in-process helpers;
  :mod:`~drakit.plugin.testing.apiserver.cli`: ``drakit apiserver``;
  :mod:`~drakit.plugin.testing.apiserver.fixtures`: its pytest fixtures.
- the object store and watch history (:mod:`~drakit.plugin.testing.apiserver.store`), the
  resources served (:mod:`~drakit.plugin.testing.apiserver.resources`), version conversion
  (:mod:`~drakit.plugin.testing.apiserver.convert`), decoding against the OpenAPI schemas
  (:mod:`~drakit.plugin.testing.apiserver.decode`, :mod:`~drakit.plugin.testing.apiserver.schema`),
  validation and admission (:mod:`~drakit.plugin.testing.apiserver.validation`), the verbs
  (:mod:`~drakit.plugin.testing.apiserver.registry`), patches and server-side apply
  (:mod:`~drakit.plugin.testing.apiserver.patch`, :mod:`~drakit.plugin.testing.apiserver.apply`),
  selectors, errors, faults and the request log;
- the HTTP layer (:mod:`drakit.plugin.testing.apiserver.http`): routes, verbs, watch.
"""

from drakit.plugin.testing.apiserver.claims import AllocatedDevice
from drakit.plugin.testing.apiserver.cli import apiserver_main
from drakit.plugin.testing.apiserver.errors import ApiError
from drakit.plugin.testing.apiserver.faults import FaultPlan
from drakit.plugin.testing.apiserver.requestlog import RequestRecord
from drakit.plugin.testing.apiserver.server import (
    DEFAULT_TOKEN,
    KUBECONFIG_NAME,
    EmbeddedAPIServer,
)

__all__ = [
    "DEFAULT_TOKEN",
    "KUBECONFIG_NAME",
    "AllocatedDevice",
    "ApiError",
    "EmbeddedAPIServer",
    "FaultPlan",
    "RequestRecord",
    "apiserver_main",
]

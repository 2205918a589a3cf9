"""Fixtures for the embedded API server tests: a started server and kubernetes clients
talking to it over a real socket."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from kubernetes import client

from drakit.plugin.testing.apiserver import EmbeddedAPIServer
from drakit.plugin.testing.apiserver.fixtures import (  # noqa: F401 - fixtures
    embedded_apiserver,
    embedded_apiserver_factory,
)


@pytest.fixture
def server(embedded_apiserver: EmbeddedAPIServer) -> EmbeddedAPIServer:  # noqa: F811
    return embedded_apiserver


@pytest.fixture
def api_client(server: EmbeddedAPIServer) -> Iterator[client.ApiClient]:
    api = server.api_client()
    yield api
    api.close()


@pytest.fixture
def resource_api(api_client: client.ApiClient) -> client.ResourceV1Api:
    return client.ResourceV1Api(api_client)


@pytest.fixture
def core_api(api_client: client.ApiClient) -> client.CoreV1Api:
    return client.CoreV1Api(api_client)


@pytest.fixture
def custom_api(api_client: client.ApiClient) -> client.CustomObjectsApi:
    return client.CustomObjectsApi(api_client)

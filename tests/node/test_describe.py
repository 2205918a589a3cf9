"""drakit.plugin.api.retry.describe: one line a claim's error can carry. Connection failures
name the API server's host:port in words, without urllib3's object reprs."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest
import urllib3

from drakit.plugin.api.retry import describe


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A listening socket that never answers."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen()
    yield srv.getsockname()[1]
    srv.close()


def _failure(url: str, retries: object = False) -> BaseException:
    pool = urllib3.PoolManager(retries=retries, timeout=urllib3.Timeout(connect=1, read=0.3))
    with pytest.raises(urllib3.exceptions.HTTPError) as e:
        pool.request("GET", url)
    return e.value


def test_connection_refused_names_the_server() -> None:
    text = describe(_failure("http://127.0.0.1:1/api"))
    assert text == "API server at 127.0.0.1:1: cannot connect (Connection refused)"
    # the same through urllib3's retry wrapper, as the kubernetes client raises it
    assert describe(_failure("http://127.0.0.1:1/api", urllib3.Retry(0))) == text


def test_a_silent_server_is_a_read_timeout(silent_port: int) -> None:
    text = describe(_failure(f"http://127.0.0.1:{silent_port}/api"))
    assert text == f"API server at 127.0.0.1:{silent_port}: no answer before the read timeout"
    assert "object at 0x" not in text


def test_other_errors_keep_their_type_and_text() -> None:
    assert describe(ValueError("bad")) == "ValueError: bad"

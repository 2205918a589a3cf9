"""The API transport's direct connections (drakit.plugin.api.kubeconn on http.client): reuse,
connections the server closed, errors worded as urllib3's, TLS from the kubernetes client's
configuration, and the urllib3 path a proxy needs. Real sockets, real TLS (openssl-made CA
and certificates)."""

from __future__ import annotations

import contextlib
import json
import shutil
import socket
import ssl
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import urllib3
from kubernetes.client import ApiClient, ApiException, Configuration

from drakit.plugin.api.kubeconn import direct_supported
from drakit.plugin.api.kubehttp import Transport
from drakit.plugin.api.retry import ErrorKind, ResponseTooLarge, classify, describe

CLAIM = "/apis/resource.k8s.io/v1/namespaces/ns/resourceclaims/c"


class _Server:
    """An HTTP/1.1 server (TLS with ``tls``) answering JSON; counts the connections it
    accepted and the requests it saw. ``answer(handler)`` may be replaced per test."""

    def __init__(self, tls: ssl.SSLContext | None = None) -> None:
        self.connections = 0
        self.requests: list[str] = []
        self.answer: Callable[[BaseHTTPRequestHandler], None] = _json_answer({"ok": True})
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def setup(self) -> None:
                outer.connections += 1
                super().setup()

            def _any(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                if length:
                    self.rfile.read(length)
                outer.requests.append(f"{self.command} {self.path}")
                with contextlib.suppress(ConnectionError):  # the client hung up
                    outer.answer(self)

            do_GET = do_PATCH = do_POST = do_DELETE = _any

            def log_message(self, *args: object) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        if tls is not None:
            self.httpd.socket = tls.wrap_socket(self.httpd.socket, server_side=True)
        self.port = self.httpd.server_port
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def _json_answer(obj: Any, status: int = 200) -> Callable[[BaseHTTPRequestHandler], None]:
    def answer(h: BaseHTTPRequestHandler) -> None:
        body = json.dumps(obj).encode()
        h.send_response(status)
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", str(len(body)))
        h.end_headers()
        h.wfile.write(body)
    return answer


@contextlib.contextmanager
def _server(tls: ssl.SSLContext | None = None) -> Iterator[_Server]:
    s = _Server(tls)
    try:
        yield s
    finally:
        s.close()


def _transport(host: str, **settings: Any) -> Transport:
    config = Configuration(host=host)
    for key, value in settings.items():
        setattr(config, key, value)
    return Transport(ApiClient(config), request_timeout=5)


def test_requests_share_one_kept_alive_connection() -> None:
    with _server() as s:
        t = _transport(f"http://127.0.0.1:{s.port}")
        assert t._direct() is not None
        for _ in range(5):
            assert t.json("GET", CLAIM) == {"ok": True}
        t.request("PATCH", CLAIM + "/status", body={"status": {}})
        assert s.connections == 1
        assert s.requests[-1] == f"PATCH {CLAIM}/status"
        t.close()


def test_a_connection_the_server_closed_while_idle_is_replaced() -> None:
    """An API server closes idle keep-alive connections (its idle timeout): the next
    request notices and connects again instead of failing on the closed one."""
    with _server() as s:
        inner = s.answer
        idle: list[socket.socket] = []

        def answer_and_remember(h: BaseHTTPRequestHandler) -> None:
            idle.append(h.connection)  # before the answer: the client may be quicker
            inner(h)
        s.answer = answer_and_remember
        t = _transport(f"http://127.0.0.1:{s.port}")
        for _ in range(3):
            assert t.json("GET", CLAIM) == {"ok": True}
            idle.pop().shutdown(socket.SHUT_RDWR)  # the server's idle timeout
            time.sleep(0.05)
        assert s.connections == 3  # no request failed on a closed connection


def test_error_answers_raise_api_exception_with_body_and_headers() -> None:
    with _server() as s:
        def throttled(h: BaseHTTPRequestHandler) -> None:
            body = b'{"kind":"Status","message":"slow down"}'
            h.send_response(429)
            h.send_header("Retry-After", "3")
            h.send_header("Content-Length", str(len(body)))
            h.end_headers()
            h.wfile.write(body)
        s.answer = throttled
        t = _transport(f"http://127.0.0.1:{s.port}")
        with pytest.raises(ApiException) as e:
            t.json("GET", CLAIM)
        assert e.value.status == 429
        assert e.value.headers.get("retry-after") == "3"
        assert describe(e.value) == "HTTP 429 Too Many Requests: slow down"
        s.answer = _json_answer({"ok": 1})
        assert t.json("GET", CLAIM) == {"ok": 1}
        assert s.connections == 1  # the error answer was read whole: the connection stays


@pytest.mark.parametrize("declared", [True, False], ids=["content-length", "chunked"])
def test_an_answer_over_the_limit_is_refused(declared: bool) -> None:
    with _server() as s:
        def big(h: BaseHTTPRequestHandler) -> None:
            h.send_response(200)
            if declared:
                h.send_header("Content-Length", str(10_000))
                h.end_headers()
                h.wfile.write(b" " * 10_000)
            else:
                h.send_header("Transfer-Encoding", "chunked")
                h.end_headers()
                for _ in range(10):
                    h.wfile.write(b"3e8\r\n" + b" " * 1000 + b"\r\n")
                h.wfile.write(b"0\r\n\r\n")
        s.answer = big
        t = _transport(f"http://127.0.0.1:{s.port}")
        with pytest.raises(ResponseTooLarge, match="10000 bytes, more than the 4096 accepted"
                           if declared else "more than the 4096 bytes accepted"):
            t.json("GET", CLAIM, max_bytes=4096)
        s.answer = _json_answer({"ok": 2})
        assert t.json("GET", CLAIM) == {"ok": 2}
        assert s.connections == 2  # the unread answer's connection was dropped


def test_connection_errors_are_worded_and_sorted_as_urllib3s() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    t = _transport(f"http://127.0.0.1:{port}")
    with pytest.raises(urllib3.exceptions.NewConnectionError) as refused:
        t.json("GET", CLAIM)
    assert classify(refused.value) is ErrorKind.RETRYABLE
    assert describe(refused.value) == (
        f"API server at 127.0.0.1:{port}: cannot connect (Connection refused)")

    with _server() as s:
        gate = threading.Event()
        s.answer = lambda h: gate.wait(5)  # never answers in time
        t = _transport(f"http://127.0.0.1:{s.port}")
        with pytest.raises(urllib3.exceptions.ReadTimeoutError) as slow:
            t.json("GET", CLAIM, timeout=(1.0, 0.2))
        gate.set()
        assert classify(slow.value) is ErrorKind.RETRYABLE
        assert describe(slow.value) == (
            f"API server at 127.0.0.1:{s.port}: no answer before the read timeout")

        def cut(h: BaseHTTPRequestHandler) -> None:
            h.wfile.write(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n{\"ok\"")
            h.close_connection = True
        s.answer = cut
        with pytest.raises(urllib3.exceptions.ProtocolError) as broke:
            t.json("GET", CLAIM)
        assert classify(broke.value) is ErrorKind.RETRYABLE
        assert describe(broke.value).startswith("API server: the connection broke")


# ---------------------------------------------------------------------------------------------
# TLS


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A CA, a server certificate for ``apiserver.test`` only and a client certificate,
    made with openssl."""
    if shutil.which("openssl") is None:
        pytest.skip("openssl is not installed (it makes the test certificates)")
    d = tmp_path_factory.mktemp("pki")

    def run(*args: str) -> None:
        subprocess.run(["openssl", *args], cwd=d, check=True, capture_output=True)

    run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=test-ca",
        "-keyout", "ca.key", "-out", "ca.crt")
    for name, ext in (("server", "subjectAltName=DNS:apiserver.test"),
                      ("client", "extendedKeyUsage=clientAuth")):
        run("req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={name}",
            "-keyout", f"{name}.key", "-out", f"{name}.csr")
        (d / f"{name}.ext").write_text(ext + "\n")
        run("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
            "-CAcreateserial", "-days", "2", "-extfile", f"{name}.ext", "-out", f"{name}.crt")
    # a second CA with a server certificate, and a certificate with the name only in its CN
    run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=ca-2",
        "-keyout", "ca2.key", "-out", "ca2.crt")
    for name, ca, ext in (("server2", "ca2", "subjectAltName=DNS:apiserver.test"),
                          ("cn-only", "ca", "basicConstraints=CA:FALSE")):
        subj = "/CN=apiserver.test" if name == "cn-only" else f"/CN={name}"
        run("req", "-newkey", "rsa:2048", "-nodes", "-subj", subj,
            "-keyout", f"{name}.key", "-out", f"{name}.csr")
        (d / f"{name}.ext").write_text(ext + "\n")
        run("x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.crt", "-CAkey", f"{ca}.key",
            "-CAcreateserial", "-days", "2", "-extfile", f"{name}.ext", "-out", f"{name}.crt")
    return d


def _tls_server_context(pki: Path, client_certs: bool, name: str = "server") -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(pki / f"{name}.crt", pki / f"{name}.key")
    if client_certs:
        ctx.verify_mode = ssl.CERT_REQUIRED
        ctx.load_verify_locations(pki / "ca.crt")
    return ctx


def test_tls_checks_the_ca_and_the_server_name(pki: Path) -> None:
    with _server(_tls_server_context(pki, client_certs=False)) as s:
        url = f"https://127.0.0.1:{s.port}"
        ca = str(pki / "ca.crt")
        ok = _transport(url, ssl_ca_cert=ca, tls_server_name="apiserver.test")
        assert ok.json("GET", CLAIM) == {"ok": True}
        assert ok.json("GET", CLAIM) == {"ok": True}
        assert s.connections == 1

        wrong_name = _transport(url, ssl_ca_cert=ca)  # the certificate is not for 127.0.0.1
        with pytest.raises(urllib3.exceptions.SSLError, match=r"127\.0\.0\.1"):
            wrong_name.json("GET", CLAIM)
        unknown_ca = _transport(url, ssl_ca_cert=str(pki / "server.crt"),
                                tls_server_name="apiserver.test")
        with pytest.raises(urllib3.exceptions.SSLError, match="CERTIFICATE_VERIFY_FAILED"):
            unknown_ca.json("GET", CLAIM)
        ca_data = _transport(url, ca_cert_data=(pki / "ca.crt").read_text(),
                             assert_hostname=False)
        assert ca_data.json("GET", CLAIM) == {"ok": True}
        insecure = _transport(url, verify_ssl=False)
        assert insecure.json("GET", CLAIM) == {"ok": True}


def test_tls_client_certificate_is_sent(pki: Path) -> None:
    with _server(_tls_server_context(pki, client_certs=True)) as s:
        url = f"https://127.0.0.1:{s.port}"
        common = {"ssl_ca_cert": str(pki / "ca.crt"), "tls_server_name": "apiserver.test"}
        with_cert = _transport(url, cert_file=str(pki / "client.crt"),
                               key_file=str(pki / "client.key"), **common)
        assert with_cert.json("GET", CLAIM) == {"ok": True}
        without = _transport(url, **common)
        with pytest.raises((urllib3.exceptions.SSLError, urllib3.exceptions.ProtocolError)):
            without.json("GET", CLAIM)


# ---------------------------------------------------------------------------------------------
# settings only urllib3 has


def test_a_proxy_sends_requests_through_urllib3() -> None:
    with _server() as proxy:
        proxy.answer = _json_answer({"via": "proxy"})
        t = _transport("http://apiserver.invalid:6443", proxy=f"http://127.0.0.1:{proxy.port}")
        assert t._direct() is None
        assert t.json("GET", CLAIM) == {"via": "proxy"}
        assert proxy.requests == [f"GET http://apiserver.invalid:6443{CLAIM}"]
        with pytest.raises(ApiException) as e:
            proxy.answer = _json_answer({"message": "no"}, status=403)
            t.request("DELETE", CLAIM)
        assert e.value.status == 403


@pytest.mark.parametrize(("settings", "direct"), [
    ({}, True),
    ({"proxy": "http://proxy:3128"}, False),
    ({"proxy": "http://proxy:3128", "no_proxy": "127.0.0.1"}, True),
    ({"socket_options": [(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)]}, False),
    ({"assert_hostname": "other.name"}, False),
    ({"assert_hostname": False}, True),
])
def test_which_configurations_connect_directly(settings: dict[str, Any], direct: bool) -> None:
    config = Configuration(host="https://127.0.0.1:6443")
    for key, value in settings.items():
        setattr(config, key, value)
    assert direct_supported(config) is direct


def test_a_large_chunked_answer_is_read_in_pieces_and_whole() -> None:
    """A list page without a Content-Length (chunked, as kube-apiserver streams big lists)
    of 3 MiB, more than one read piece, arrives whole and the connection is kept."""
    items = [{"metadata": {"name": f"s-{i}"}, "pad": "x" * 1100} for i in range(3000)]
    body = json.dumps({"items": items}).encode()
    with _server() as s:
        def chunked(h: BaseHTTPRequestHandler) -> None:
            h.send_response(200)
            h.send_header("Transfer-Encoding", "chunked")
            h.end_headers()
            for at in range(0, len(body), 100_000):
                piece = body[at:at + 100_000]
                h.wfile.write(f"{len(piece):x}\r\n".encode() + piece + b"\r\n")
            h.wfile.write(b"0\r\n\r\n")
        s.answer = chunked
        t = _transport(f"http://127.0.0.1:{s.port}")
        assert len(body) > 3 * (1 << 20)
        assert t.json("GET", CLAIM)["items"][-1]["metadata"]["name"] == "s-2999"
        s.answer = _json_answer({"ok": 3})
        assert t.json("GET", CLAIM) == {"ok": 3}
        assert s.connections == 1


def test_a_ca_file_rotated_in_place_is_read_for_the_next_connection(pki: Path,
                                                                     tmp_path: Path) -> None:
    """As urllib3 does, each new connection reads the CA file again: a service account's
    projected ca.crt replaced in place (CA rotation) does not need a restart."""
    ca = tmp_path / "ca.crt"
    ca.write_bytes((pki / "ca.crt").read_bytes())
    t = _transport("https://127.0.0.1:1", ssl_ca_cert=str(ca), tls_server_name="apiserver.test")
    with _server(_tls_server_context(pki, client_certs=False)) as s:
        t.api_client.configuration.host = f"https://127.0.0.1:{s.port}"
        assert t.json("GET", CLAIM) == {"ok": True}
    with _server(_tls_server_context(pki, client_certs=False, name="server2")) as s:
        t.api_client.configuration.host = f"https://127.0.0.1:{s.port}"
        with pytest.raises(urllib3.exceptions.SSLError, match="CERTIFICATE_VERIFY_FAILED"):
            t.json("GET", CLAIM)
        ca.write_bytes((pki / "ca2.crt").read_bytes())  # rotated
        assert t.json("GET", CLAIM) == {"ok": True}


def test_a_name_only_in_the_common_name_is_refused(pki: Path) -> None:
    with _server(_tls_server_context(pki, client_certs=False, name="cn-only")) as s:
        t = _transport(f"https://127.0.0.1:{s.port}", ssl_ca_cert=str(pki / "ca.crt"),
                       tls_server_name="apiserver.test")
        with pytest.raises(urllib3.exceptions.SSLError, match="CERTIFICATE_VERIFY_FAILED"):
            t.json("GET", CLAIM)


def test_unreadable_tls_files_are_a_retryable_ssl_error(tmp_path: Path) -> None:
    with _server() as s:  # any listener: the TLS settings fail before a byte is sent
        t = _transport(f"https://127.0.0.1:{s.port}", ssl_ca_cert=str(tmp_path / "missing.crt"))
        with pytest.raises(urllib3.exceptions.SSLError, match=r"missing\.crt") as e:
            t.json("GET", CLAIM)
        assert classify(e.value) is ErrorKind.RETRYABLE


def test_one_number_is_the_timeout_of_the_whole_request() -> None:
    with _server() as s:
        gate = threading.Event()
        s.answer = lambda h: gate.wait(5)
        t = _transport(f"http://127.0.0.1:{s.port}")
        started = time.monotonic()
        with pytest.raises(urllib3.exceptions.ReadTimeoutError) as e:
            t.json("GET", CLAIM, timeout=0.3)
        gate.set()
        assert time.monotonic() - started < 1.0
        read = float(str(e.value).rsplit("=", 1)[1].rstrip(")"))
        assert 0 < read <= 0.3  # what connecting left of the 0.3 s


def test_an_answer_without_a_body_keeps_the_connection() -> None:
    with _server() as s:
        def no_content(h: BaseHTTPRequestHandler) -> None:
            h.send_response(204)
            h.send_header("Content-Length", "12")  # wrong, and ignored for a 204
            h.end_headers()
        s.answer = no_content
        t = _transport(f"http://127.0.0.1:{s.port}")
        assert t.request("DELETE", CLAIM).data == b""
        s.answer = _json_answer({"ok": 4})
        assert t.json("GET", CLAIM) == {"ok": 4}
        assert s.connections == 1

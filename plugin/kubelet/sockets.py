"""Socket paths and socket-file lifecycle for the kubelet-facing gRPC servers.

Naming follows the Go helper (k8s.io/dynamic-resource-allocation ``kubeletplugin``,
draplugin.go: PluginDataDirectoryPath, RegistrarDirectoryPath, RollingUpdate):

- DRA socket: ``<plugins dir>/<driver>/dra.sock``; with a pod UID (rolling update)
  ``<plugins dir>/<driver>/dra-<podUID>.sock``.
- Registration socket: ``<registrar dir>/<driver>-reg.sock``; with a pod UID
  ``<registrar dir>/<driver>-<podUID>-reg.sock``.

When a per-pod path would not fit a unix socket address, hashed names are used instead:
``<driver>-<h8(uid)>-reg.sock``, then ``dra-<h16(driver + NUL + uid)>-reg.sock`` (the Go
helper's ``RollingUpdateRegistrarSocketFile``), and ``dra-<h8(uid)>`` (no suffix, as
k8s.io/dynamic-resource-allocation v0.38 does, so that the longest driver name fits under the
default plugins directory) for the DRA socket. ``hN(x)`` is the unpadded base64url encoding
of the first N bytes of ``sha256(x)`` (11 or 22 characters).

Limit: ``sun_path`` is 108 bytes including the terminating NUL, and gRPC core refuses a
path of 108 bytes, so a usable path has at most :data:`MAX_SOCKET_PATH_BYTES` = 107 bytes.
"""

from __future__ import annotations

import base64
import contextlib
import errno
import hashlib
import logging
import os
import re
import socket
import stat
from dataclasses import dataclass
from pathlib import Path

from drakit.plugin.slices import formats

log = logging.getLogger(__name__)

#: ``sizeof(sockaddr_un.sun_path)`` on Linux (the Go helper's ``unixPathMax``).
UNIX_PATH_MAX = 108
#: The longest socket path gRPC accepts: one byte is kept for the terminating NUL.
MAX_SOCKET_PATH_BYTES = UNIX_PATH_MAX - 1

#: Mode of directories this module creates (owner rwx, group rx; kubelet runs as root).
DIR_MODE = 0o750
#: Mode of the socket files after bind (owner and group may connect).
SOCKET_MODE = 0o660

_POD_UID = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9_.-]{0,126}[A-Za-z0-9])?$")


class SocketPathError(ValueError):
    """A driver name, pod UID or directory cannot give a valid socket path."""


class SocketInUseError(RuntimeError):
    """A live process is already serving on a socket path this instance wants."""


def validate_driver_name(driver_name: str) -> str:
    """Check a DRA driver name before it becomes part of a path; return it unchanged.

    Rule (resource.k8s.io ``spec.driver``): at most 63 bytes and, after lower-casing, a DNS
    subdomain. Raises :class:`SocketPathError` naming the problem.
    """
    errors = formats.driver_name(driver_name, "driver name")
    if errors:
        raise SocketPathError(str(errors[0]))
    return driver_name


def validate_pod_uid(pod_uid: str) -> str:
    """Check a pod UID (metadata.uid, normally a UUID) before it becomes part of a path.

    Allowed: 1-128 characters of letters, digits, ``-``, ``_`` and ``.``, starting and ending
    with a letter or digit. Raises :class:`SocketPathError`.
    """
    if not isinstance(pod_uid, str) or not _POD_UID.fullmatch(pod_uid):  # "$" allows "\n"
        raise SocketPathError(
            f"pod UID {pod_uid!r}: must be 1-128 letters, digits, '-', '_' or '.', starting"
            " and ending with a letter or digit"
        )
    return pod_uid


def _hash(data: str, nbytes: int) -> str:
    digest = hashlib.sha256(data.encode()).digest()[:nbytes]
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def _fits(path: Path) -> bool:
    return len(os.fsencode(path)) <= MAX_SOCKET_PATH_BYTES


def _too_long(what: str, path: Path) -> SocketPathError:
    return SocketPathError(
        f"{what} {str(path)!r} is {len(os.fsencode(path))} bytes; a unix socket path may have"
        f" at most {MAX_SOCKET_PATH_BYTES} bytes (choose a shorter directory)"
    )


def plugin_data_dir(plugins_dir: Path | str, driver_name: str) -> Path:
    """``<plugins dir>/<driver>``: the driver's own directory (DRA socket, checkpoint)."""
    return Path(os.path.abspath(plugins_dir)) / validate_driver_name(driver_name)


def dra_socket_path(
    plugins_dir: Path | str, driver_name: str, pod_uid: str | None = None
) -> Path:
    """The absolute DRA socket path (the ``endpoint`` sent in GetInfo).

    ``dra.sock``, or ``dra-<podUID>.sock`` / ``dra-<h8(podUID)>`` with a pod UID.
    Raises :class:`SocketPathError` for a bad name or when no candidate fits.
    """
    base = plugin_data_dir(plugins_dir, driver_name)
    if pod_uid is None:
        candidates = [base / "dra.sock"]
    else:
        validate_pod_uid(pod_uid)
        # the fallback has no ".sock": with it, the longest driver name (63 bytes) under the
        # default /var/lib/kubelet/plugins would need 109 bytes (the 1.38 Go helper's
        # rollingUpdatePluginSocketFile drops the suffix for that reason)
        candidates = [base / f"dra-{pod_uid}.sock", base / f"dra-{_hash(pod_uid, 8)}"]
    for path in candidates:
        if _fits(path):
            return path
    raise _too_long("DRA socket path", candidates[-1])


def registration_socket_path(
    registrar_dir: Path | str, driver_name: str, pod_uid: str | None = None
) -> Path:
    """The absolute registration socket path in the kubelet's registrar directory.

    ``<driver>-reg.sock``, or with a pod UID the first that fits of ``<driver>-<podUID>-reg.sock``,
    ``<driver>-<h8(podUID)>-reg.sock``, ``dra-<h16(driver NUL podUID)>-reg.sock``.
    Raises :class:`SocketPathError` for a bad name or when no candidate fits.
    """
    validate_driver_name(driver_name)
    base = Path(os.path.abspath(registrar_dir))
    if pod_uid is None:
        candidates = [base / f"{driver_name}-reg.sock"]
    else:
        validate_pod_uid(pod_uid)
        candidates = [
            base / f"{driver_name}-{pod_uid}-reg.sock",
            base / f"{driver_name}-{_hash(pod_uid, 8)}-reg.sock",
            base / f"dra-{_hash(driver_name + chr(0) + pod_uid, 16)}-reg.sock",
        ]
    for path in candidates:
        if _fits(path):
            return path
    raise _too_long("registration socket path", candidates[-1])


@dataclass(frozen=True)
class SocketPaths:
    """The two socket paths of one plugin instance."""

    dra: Path
    registration: Path

    @property
    def dra_socket(self) -> Path:
        """Alias of :attr:`dra`."""
        return self.dra

    @property
    def registration_socket(self) -> Path:
        """Alias of :attr:`registration`."""
        return self.registration

    @classmethod
    def for_instance(
        cls,
        driver_name: str,
        registrar_dir: Path | str,
        plugins_dir: Path | str,
        pod_uid: str | None = None,
    ) -> SocketPaths:
        return cls(
            dra=dra_socket_path(plugins_dir, driver_name, pod_uid),
            registration=registration_socket_path(registrar_dir, driver_name, pod_uid),
        )


def ensure_dir(path: Path, mode: int = DIR_MODE, flag: str = "") -> None:
    """Create ``path`` (and parents) with ``mode`` if missing; existing dirs are left as is.
    Raises ``OSError`` naming ``flag`` (the setting the directory comes from) and the path."""
    if path.is_dir():
        return
    try:
        path.mkdir(mode=mode, parents=True, exist_ok=True)
    except OSError as exc:
        where = f"{flag}: " if flag else ""
        raise OSError(exc.errno, f"{where}cannot create directory {path}: "
                                 f"{exc.strerror or exc}") from exc
    # mkdir applies the umask; set the intended mode on the directory we created.
    with contextlib.suppress(OSError):
        os.chmod(path, mode)


def _is_live(path: Path, timeout: float = 0.5) -> bool:
    """True when something accepts connections on the unix socket ``path``."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(timeout)
    try:
        sock.connect(os.fsencode(path))
    except OSError as exc:
        if exc.errno in (errno.ECONNREFUSED, errno.ENOENT, errno.ENOTSOCK):
            return False
        # EAGAIN (full backlog) or a timeout: someone is there.
        return exc.errno in (errno.EAGAIN, None)
    finally:
        sock.close()
    return True


def prepare_socket_path(path: Path) -> None:
    """Make ``path`` ready for bind: create its directory, remove a stale socket file.

    Only this instance's own path is ever passed here (paths are unique per pod UID), so a
    leftover file there belongs to a previous run of this instance. A file that a live
    process still serves is *not* removed: :class:`SocketInUseError` is raised instead (a
    second process configured with the same driver name and pod UID). A non-socket file or
    directory at the path raises :class:`FileExistsError`.
    """
    ensure_dir(path.parent)
    try:
        st = path.lstat()
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(st.st_mode):
        raise FileExistsError(f"{path}: exists and is not a unix socket; refusing to replace it")
    if _is_live(path):
        raise SocketInUseError(
            f"{path}: another live process serves this socket (same driver name and pod UID?)"
        )
    log.info("removing stale socket %s", path)
    with contextlib.suppress(FileNotFoundError):
        path.unlink()


def socket_identity(path: Path) -> tuple[int, int] | None:
    """(st_dev, st_ino) of the socket file at ``path``, or None if it is missing or no socket."""
    try:
        st = path.lstat()
    except OSError:
        return None
    if not stat.S_ISSOCK(st.st_mode):
        return None
    return (st.st_dev, st.st_ino)


def remove_own_socket(path: Path, identity: tuple[int, int] | None) -> bool:
    """Remove ``path`` only if it is still the socket file this instance created.

    ``identity`` is :func:`socket_identity` right after bind. Returns True when removed.
    """
    if identity is None or socket_identity(path) != identity:
        return False
    try:
        path.unlink()
    except FileNotFoundError:
        return False
    return True

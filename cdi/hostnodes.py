"""Fill device nodes' type/major/minor from the host node, at prepare time.

When a CDI ``DeviceNode`` lacks ``type`` or ``major`` (and is not a fifo), runtimes stat the
host node at container creation and fail the container if it is missing ("failed to stat
CDI host device"; container-device-interface pkg/cdi/container-edits.go, CDI spec
v0.6.0 "deviceNodes"). drakit stats it when the spec is written instead:
the spec becomes *minimally specified* (type and major given), so the runtime no longer
depends on the node, and a missing node is a clear :class:`HostNodeError` at prepare.

``host_root`` is where the host's ``/`` is visible to the plugin (``/`` on the host,
e.g. ``/host`` in a container that mounts it). ``dev_root``, when given, is where the
host's ``/dev`` is visible instead (``drakit run --dev-root``, the discovery context's
``dev_root``): a host path under ``/dev`` is looked up below it. A test without root points
it at a temporary directory holding stand-ins made by
:func:`drakit.discovery.testing.device_node_stand_in` (a symlink to a real character
device such as ``/dev/null``: ``mknod`` needs root, a symlink does not). The spec keeps the
host path; only the stat goes through the prefix. Symlinks are followed in the plugin's
view, so an absolute symlink under a non-``/`` root resolves in the plugin's namespace.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from drakit.cdi.errors import HostNodeError
from drakit.cdi.spec import ContainerEdits, DeviceNode, Spec


class HostNodes:
    """Stats host device nodes below ``host_root`` (default ``/``; ``dev_root`` for paths
    under ``/dev`` when given) and fills spec fields."""

    def __init__(self, host_root: str | os.PathLike[str] = "/",
                 dev_root: str | os.PathLike[str] | None = None) -> None:
        self.host_root = Path(host_root)
        self.dev_root = Path(dev_root) if dev_root is not None else None

    def local_path(self, host_path: str) -> Path:
        """Where the plugin sees the host path ``host_path`` (``/dev/x`` → ``<root>/dev/x``,
        or ``<dev_root>/x`` when a dev root is set). The path is normalised first, so ``..``
        never leads above ``host_root`` (or ``dev_root``)."""
        norm = os.path.normpath("/" + host_path)
        if norm.startswith("//"):
            norm = "/" + norm.lstrip("/")
        if self.dev_root is not None and (norm == "/dev" or norm.startswith("/dev/")):
            return self.dev_root / norm.removeprefix("/dev").lstrip("/")
        return self.host_root / norm.lstrip("/")

    def _seen_at(self, host_path: str, local: Path) -> str:
        """`` (seen at <local>)`` when the plugin's view differs from the host path."""
        return "" if str(local) == host_path else f" (seen at {local})"

    @staticmethod
    def needs_host_info(node: DeviceNode) -> bool:
        """True when a runtime would stat the host for this node (type unset, or major
        unset/0 for a non-fifo)."""
        if not node.type:
            return True
        return node.type != "p" and not node.major

    def fill_node(self, node: DeviceNode, field_path: str = "deviceNode") -> DeviceNode:
        """A copy of ``node`` with ``type``, ``major``, ``minor`` and ``fileMode`` (permission
        bits) filled from the host node where unset.

        Raises :class:`HostNodeError` when the host node is missing, is not a char/block
        device or fifo, or its type differs from a declared ``type``.
        """
        if not self.needs_host_info(node):
            return node
        host_path = node.host_path or node.path
        local = self.local_path(host_path)
        try:
            st = os.stat(local)
        except FileNotFoundError:
            raise HostNodeError(
                f"{field_path}: host device node {host_path} does not exist"
                f"{self._seen_at(host_path, local)}; give type/major/minor explicitly or wait "
                "for the device"
            ) from None
        except (OSError, ValueError) as exc:  # ValueError: a NUL byte in the path
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            raise HostNodeError(
                f"{field_path}: cannot stat host device node {host_path!r:.300}"
                f"{self._seen_at(host_path, local)}: {reason}"
            ) from None
        if stat.S_ISCHR(st.st_mode):
            actual = "c"
        elif stat.S_ISBLK(st.st_mode):
            actual = "b"
        elif stat.S_ISFIFO(st.st_mode):
            actual = "p"
        else:
            kind = "a directory" if stat.S_ISDIR(st.st_mode) else \
                "a regular file" if stat.S_ISREG(st.st_mode) else "not a device"
            raise HostNodeError(
                f"{field_path}: host path {host_path}{self._seen_at(host_path, local)} is "
                f"{kind}, not a device node or fifo (in a test without root, see "
                "drakit.discovery.testing.device_node_stand_in and --dev-root)"
            )
        declared = node.type or ""
        if declared and not (declared == actual or (declared == "u" and actual == "c")):
            raise HostNodeError(
                f"{field_path}: declared type {declared!r} but host node {host_path} has "
                f"type {actual!r}"
            )
        update: dict[str, object] = {"type": declared or actual}
        if actual != "p":
            update["major"] = os.major(st.st_rdev)
            update["minor"] = os.minor(st.st_rdev)
        if node.file_mode is None:
            update["file_mode"] = stat.S_IMODE(st.st_mode)
        return node.model_copy(update=update)

    def fill_edits(self, edits: ContainerEdits, base: str = "containerEdits") -> ContainerEdits:
        """A copy of ``edits`` with every device node filled (see :meth:`fill_node`)."""
        if not edits.device_nodes:
            return edits
        nodes = [
            self.fill_node(n, f"{base}.deviceNodes[{i}]") for i, n in enumerate(edits.device_nodes)
        ]
        return edits.model_copy(update={"device_nodes": nodes})

    def fill_spec(self, spec: Spec) -> Spec:
        """A copy of ``spec`` with every device node (spec and device level) filled."""
        devices = [
            d.model_copy(
                update={
                    "container_edits": self.fill_edits(
                        d.container_edits, f"devices[{i}].containerEdits"
                    )
                }
            )
            for i, d in enumerate(spec.devices)
        ]
        edits = spec.container_edits
        if edits is not None:
            edits = self.fill_edits(edits)
        return spec.model_copy(update={"devices": devices, "container_edits": edits})

"""Fill device nodes' type/major/minor from the host node, at prepare time.

When a CDI ``DeviceNode`` lacks ``type`` or ``major`` (and is not a fifo), runtimes stat the
host node at container creation and fail the container if it is missing ("failed to stat
CDI host device", CDI fact sheet §2.4). drakit stats it when the spec is written instead:
the spec becomes *minimally specified* (type and major given), so the runtime no longer
depends on the node, and a missing node is a clear :class:`HostNodeError` at prepare.

``host_root`` is where the host's ``/`` is visible to the plugin (``/`` on the host,
e.g. ``/host`` in a container that mounts it). The spec keeps the host path; only the stat
goes through the prefix. Symlinks are followed in the plugin's view, so an absolute
symlink under a non-``/`` host root resolves in the plugin's namespace.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from drakit.cdi.errors import HostNodeError
from drakit.cdi.spec import ContainerEdits, DeviceNode, Spec


class HostNodes:
    """Stats host device nodes below ``host_root`` (default ``/``) and fills spec fields."""

    def __init__(self, host_root: str | os.PathLike[str] = "/") -> None:
        self.host_root = Path(host_root)

    def local_path(self, host_path: str) -> Path:
        """Where the plugin sees the host path ``host_path`` (``/dev/x`` → ``<root>/dev/x``).
        The path is normalised first, so ``..`` never leads above ``host_root``."""
        return self.host_root / os.path.normpath("/" + host_path).lstrip("/")

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
                f"{field_path}: host device node {host_path} does not exist "
                f"(looked at {local}); give type/major/minor explicitly or wait for the device"
            ) from None
        except (OSError, ValueError) as exc:  # ValueError: a NUL byte in the path
            raise HostNodeError(
                f"{field_path}: cannot stat host device node {local!s:.300}: {exc}"
            ) from None
        if stat.S_ISCHR(st.st_mode):
            actual = "c"
        elif stat.S_ISBLK(st.st_mode):
            actual = "b"
        elif stat.S_ISFIFO(st.st_mode):
            actual = "p"
        else:
            raise HostNodeError(
                f"{field_path}: host path {host_path} ({local}) is not a device node or fifo"
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

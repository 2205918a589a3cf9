"""A directory of per-claim CDI spec files, written atomically.

One file per claim: ``<root_dir>/<vendor>-<class>_<claimUID>.json`` (the CDI library's
transient spec name, pkg/cdi/spec.go ``GenerateTransientSpecName``), JSON, mode 0644, written with
:func:`drakit.cdi.atomic.atomic_write` (temp file ``.<name>.<random>.tmp`` in the same directory,
fsync, rename, then the directory's fsync unless ``write(durable=False)``), so a runtime
never reads a partial file and its file watcher sees the rename.

Before a file is written its spec is compacted, its device nodes filled from the host
(:class:`drakit.cdi.hostnodes.HostNodes`), its cdiVersion computed and capped
(:func:`drakit.cdi.version.resolve_version`) and every rule checked
(:func:`drakit.cdi.validate.validate_spec`);
a qualified device name already defined by another file in the directory is refused
(runtimes drop such a device entirely: pkg/cdi/cache.go, conflicting devices). A spec
with zero devices is never written: the claim's file is removed instead.

The conflict check keeps what it read of the directory and reads again only what changed.
By default it lists the directory at every write (one file per prepared claim: the cost
grows with the claims held). A store with ``claim_scoped_names`` (every device name begins
with its claim's UID, as drakit's agent names them) need never read its own files, since no
other claim's file can define such a name: it reads only the other files of the directory,
and learns which changed from inotify (:class:`drakit.cdi.dirwatch.DirWatch`), so a write's
cost does not grow with the claims held (bench/README.md, "claims held").
"""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import os
import stat
import tempfile
import threading
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import yaml

from drakit.cdi.atomic import atomic_write, remove_durably
from drakit.cdi.dirwatch import DirWatch
from drakit.cdi.errors import CDINameError, SpecConflictError
from drakit.cdi.hostnodes import HostNodes
from drakit.cdi.names import validate_claim_uid, validate_class, validate_vendor
from drakit.cdi.spec import ContainerEdits, Device, Spec
from drakit.cdi.validate import SPEC_FILE_EXTENSIONS, load_spec_file, validate_spec
from drakit.cdi.version import resolve_version, version_key

log = logging.getLogger(__name__)

DEFAULT_CDI_ROOT = "/var/run/cdi"
"""The runtimes' dynamic (higher-priority) spec directory."""
STATIC_CDI_ROOT = "/etc/cdi"
"""The runtimes' static (lower-priority) spec directory."""
DEFAULT_SPEC_DIRS: tuple[str, ...] = (STATIC_CDI_ROOT, DEFAULT_CDI_ROOT)
"""Runtimes' default spec directories, lowest priority first."""
FILE_NAME_MAX_BYTES = 255

_Stamp = tuple[int, int, int, int, int]


def _stamp_of(entry: os.DirEntry[str] | Path) -> _Stamp | None:
    """(device, inode, mtime, ctime, size) of a regular file (a directory entry or a path;
    symlinks followed); None for anything else or a file that vanished."""
    try:
        st = entry.stat()  # both follow symlinks
    except OSError:
        return None
    if not stat.S_ISREG(st.st_mode):
        return None
    return (st.st_dev, st.st_ino, st.st_mtime_ns, st.st_ctime_ns, st.st_size)


def read_spec_summary(path: Path) -> tuple[str, list[str]] | None:
    """``(kind, device names)`` of a spec file, decoded leniently; None when unreadable."""
    try:
        raw = path.read_bytes()
        data: Any = json.loads(raw) if path.suffix == ".json" else yaml.safe_load(raw)
    except (OSError, ValueError, yaml.YAMLError):
        return None
    if not isinstance(data, dict) or not isinstance(data.get("kind"), str):
        return None
    names = [
        d["name"]
        for d in data.get("devices") or []
        if isinstance(d, dict) and isinstance(d.get("name"), str)
    ]
    return data["kind"], names


def spec_files(directory: str | os.PathLike[str]) -> list[Path]:
    """Regular files directly in ``directory`` that runtimes read (``.json``/``.yaml``),
    sorted by name; empty when the directory does not exist."""
    out = []
    try:
        entries = list(os.scandir(directory))
    except FileNotFoundError:
        return []
    for entry in entries:
        if entry.name.endswith(SPEC_FILE_EXTENSIONS) and entry.is_file(follow_symlinks=True):
            out.append(Path(entry.path))
    return sorted(out)


class SpecStore:
    """Per-claim CDI spec files of one driver kind (``vendor/class``) in ``root_dir``.

    ``max_version`` caps the cdiVersion (e.g. ``"0.5.0"`` for podman 4.3); None means no
    cap. ``host_root`` is where the host's ``/`` is visible for filling device nodes
    (None: never stat, nodes are written as given); ``dev_root`` where the host's ``/dev``
    is (see :class:`~drakit.cdi.hostnodes.HostNodes`). ``claim_scoped_names``: every device
    name this store writes begins with its claim UID and ``-`` (:meth:`write` refuses others
    with :class:`CDINameError`); the conflict check then never reads this store's own files
    and follows the others through inotify (see the module docstring). Raises
    :class:`CDINameError` for bad vendor/class and :class:`drakit.cdi.errors.CDIVersionError`
    for an unknown ``max_version``.
    """

    def __init__(
        self,
        root_dir: str | os.PathLike[str],
        vendor: str,
        cls: str,
        max_version: str | None = None,
        host_root: str | os.PathLike[str] | None = "/",
        dev_root: str | os.PathLike[str] | None = None,
        claim_scoped_names: bool = False,
    ) -> None:
        self.root_dir = Path(root_dir)
        self.claim_scoped_names = claim_scoped_names
        # claim-scoped: which entries changed since the last conflict check (else: list all)
        self._watch = DirWatch(self.root_dir) if claim_scoped_names else None
        self.vendor = validate_vendor(vendor)
        self.cls = validate_class(cls)
        if max_version is not None:
            version_key(max_version)
        self.max_version = max_version
        self.host_nodes = HostNodes(host_root, dev_root) if host_root is not None else None
        self._lock = threading.Lock()
        # The directory as last scanned (see _check_conflicts): (file name, inode) of every
        # spec file → its stat stamp and device names; which of them are checked by stat
        # stamp at every scan; and device name → files of this kind defining it.
        self._files: dict[tuple[str, int], tuple[_Stamp | None, frozenset[str]]] = {}
        self._stamped: set[tuple[str, int]] = set()
        self._index: dict[str, set[tuple[str, int]]] = {}
        # Writes between their conflict check and their rename: token → (file name, names).
        self._pending: dict[object, tuple[str, frozenset[str]]] = {}

    @property
    def kind(self) -> str:
        """The CDI kind ``vendor/class`` of every spec in this store."""
        return f"{self.vendor}/{self.cls}"

    @property
    def file_prefix(self) -> str:
        """``<vendor>-<class>_``: the start of every file name of this store."""
        return f"{self.vendor}-{self.cls}_"

    def path_for(self, claim_uid: str) -> Path:
        """``<root_dir>/<vendor>-<class>_<claimUID>.json``. Raises :class:`CDINameError`
        for a claim UID unsafe in a file name (``/``, ``..``, NUL, over-long, …)."""
        validate_claim_uid(claim_uid)
        name = f"{self.file_prefix}{claim_uid}.json"
        if len(name.encode()) > FILE_NAME_MAX_BYTES:
            raise CDINameError(f"spec file name for claim UID {claim_uid!r} is too long")
        return self.root_dir / name

    def qualified_name(self, device_name: str) -> str:
        """``vendor/class=device_name`` (the CDI device ID)."""
        return f"{self.kind}={device_name}"

    def build(
        self,
        devices: Sequence[Device],
        spec_edits: ContainerEdits | None = None,
        annotations: dict[str, str] | None = None,
    ) -> Spec:
        """The spec that :meth:`write` would write: compacted, device nodes filled from
        the host, cdiVersion set to the minimum, validated.

        Raises :class:`drakit.cdi.errors.SpecValidationError`,
        :class:`drakit.cdi.errors.CDIVersionError`
        or :class:`drakit.cdi.errors.HostNodeError`.
        """
        spec = Spec(
            kind=self.kind,
            annotations=annotations,
            devices=list(devices),
            container_edits=spec_edits,
        ).compacted()
        if self.host_nodes is not None:
            spec = self.host_nodes.fill_spec(spec)
        spec.cdi_version = resolve_version(spec, self.max_version)
        validate_spec(spec, self.max_version)
        return spec

    def write(
        self,
        claim_uid: str,
        devices: Sequence[Device],
        spec_edits: ContainerEdits | None = None,
        annotations: dict[str, str] | None = None,
        *,
        durable: bool = True,
    ) -> list[str]:
        """Write (or replace) the claim's spec; returns its qualified device names in order.

        The content is fsynced before the rename either way (no reader, no power loss sees a
        partial spec); ``durable=False`` skips the fsync of the directory, for a caller that
        re-writes a spec lost to a power loss from a durable record of its own
        (:func:`drakit.cdi.atomic.atomic_write`).

        With no devices the claim's file is removed and ``[]`` returned. On any error
        nothing is written and the old file (if any) is unchanged. Raises
        :class:`CDINameError`, :class:`drakit.cdi.errors.SpecValidationError`,
        :class:`drakit.cdi.errors.CDIVersionError`, :class:`drakit.cdi.errors.HostNodeError`,
        :class:`SpecConflictError` or ``OSError``.
        """
        path = self.path_for(claim_uid)
        if not devices:
            self.remove(claim_uid)
            return []
        if self.claim_scoped_names:
            for d in devices:
                if not d.name.startswith(f"{claim_uid}-"):
                    raise CDINameError(
                        f"CDI device name {d.name!r} of claim {claim_uid}: this store's names "
                        "begin with the claim UID and '-' (claim_scoped_names)")
        spec = self.build(devices, spec_edits, annotations)
        ids = [self.qualified_name(d.name) for d in spec.devices]
        # Compact: json's C encoder (an indent selects its pure-Python one, ~3x the CPU of
        # the whole write); `drakit cdi list` summarises specs, `jq .` pretty-prints one.
        data = (json.dumps(spec.to_json_dict(), separators=(",", ":")) + "\n").encode()
        names = frozenset(d.name for d in spec.devices)
        token = object()
        with self._lock:
            self._check_conflicts(path, names)
            self._ensure_dir()
            # Reserved until the file is in place, so a concurrent write of the same name
            # to another file is refused; the lock is not held across the fsyncs.
            self._pending[token] = (path.name, names)
        try:
            written = atomic_write(path, data, mode=0o644, sync_dir=durable)
        except OSError as exc:
            raise OSError(exc.errno, f"writing CDI spec {path}: "
                                     f"{exc.strerror or exc}") from exc
        finally:
            with self._lock:
                del self._pending[token]
        with self._lock:
            # Known without a stat or a parse at the next scan (a replacement by another
            # writer since the rename has another inode and is read then).
            key = (path.name, written.st_ino)
            if key not in self._files and not self.claim_scoped_names:
                self._add(key, None, names)
        log.debug("wrote CDI spec %s (cdiVersion %s, %d devices)", path, spec.cdi_version, len(ids))
        return ids

    def close(self) -> None:
        """Release the inotify descriptor of a store with claim-scoped names (one per store,
        and a user has 128 by default: ``fs.inotify.max_user_instances``). The store stays
        usable; its conflict check then lists the directory at every write."""
        with self._lock:
            if self._watch is not None:
                self._watch.close()
                self._watch = None

    def ensure_ready(self) -> None:
        """Startup check: create ``root_dir`` (mode 0755) when missing and prove it is
        writable by creating and removing a temp file in it (a read-only or missing host
        mount otherwise only shows at the first prepare).

        Raises ``OSError`` naming the directory.
        """
        if self.root_dir.exists() and not self.root_dir.is_dir():
            raise NotADirectoryError(
                errno.ENOTDIR, f"CDI spec directory {self.root_dir} is not a directory")
        try:
            self._ensure_dir()
            fd, tmp = tempfile.mkstemp(dir=self.root_dir, prefix=".drakit-probe.", suffix=".tmp")
            os.close(fd)
            os.unlink(tmp)
        except OSError as exc:
            raise OSError(
                exc.errno,
                f"CDI spec directory {self.root_dir} is not writable: {exc.strerror or exc}",
            ) from exc

    def _ensure_dir(self) -> None:
        if not self.root_dir.is_dir():
            self.root_dir.mkdir(mode=0o755, parents=True, exist_ok=True)
            with contextlib.suppress(OSError):
                os.chmod(self.root_dir, 0o755)

    def _check_conflicts(self, own: Path, names: frozenset[str]) -> None:
        """Refuse ``names`` when another spec file of this kind in ``root_dir`` (or a write
        in progress to another file) defines one of them; the first such file by name is
        reported. Called with ``_lock`` held.

        Files are parsed only when new or changed, so a write costs one ``scandir`` and
        set operations over the listing, not a ``stat`` or a parse per file (the directory
        holds one file per prepared claim). A file is known by (name, inode): every atomic
        writer (this store, the CDI libraries) renames a new inode into place. Files named
        like this store's (``<vendor>-<class>_<claimUID>.json``) are written only that way,
        so their inode identifies their content; any other file (a hand-made static spec,
        another tool's) may be edited in place and is checked by its stat stamp (device,
        inode, mtime, ctime, size) at every scan.
        """
        self._rescan()
        holders: set[str] = set()
        for device_name in names:
            holders.update(key[0] for key in self._index.get(device_name, ()))
        holders.discard(own.name)
        if holders:
            first = min(holders)
            clash = frozenset(n for n in names
                              if any(k[0] == first for k in self._index.get(n, ())))
            self._refuse(clash, str(self.root_dir / first))
        for file_name, pending in self._pending.values():
            if file_name != own.name:
                self._refuse(names.intersection(pending), str(self.root_dir / file_name))

    def _rescan(self) -> None:
        """Bring the listing cache and the device-name index up to date with the directory:
        with claim-scoped names only the entries inotify saw change (all of them when it
        cannot say), else the whole listing."""
        if self._watch is not None:
            changed = self._watch.changed()
            if changed is not None:
                for name in changed:
                    if name.endswith(SPEC_FILE_EXTENSIONS) and not self._is_own_name(name):
                        self._read_again(name)
                self._restat_stamped()
                return
        try:
            with os.scandir(self.root_dir) as it:
                listing = {
                    (e.name, e.inode()): e for e in it if e.name.endswith(SPEC_FILE_EXTENSIONS)
                    and not (self.claim_scoped_names and self._is_own_name(e.name))
                }
        except FileNotFoundError:
            listing = {}
        keys = listing.keys()
        for key in self._files.keys() - keys:
            self._forget(key)
        for key in keys - self._files.keys():
            self._learn(key, listing[key])
        for key in list(self._stamped):
            stamp = _stamp_of(listing[key])
            if stamp != self._files[key][0]:
                self._forget(key)
                self._learn(key, listing[key])

    def _is_own_name(self, name: str) -> bool:
        return name.startswith(self.file_prefix) and name.endswith(".json")

    def _learn(self, key: tuple[str, int], entry: os.DirEntry[str]) -> None:
        name = key[0]
        stamp = _stamp_of(entry)
        devices = self._devices_of(Path(entry.path)) if stamp is not None else frozenset()
        own = self._is_own_name(name) and not entry.is_symlink()
        # Followed through inotify, only a link needs its stamp checked: its target may be
        # edited outside the directory.
        stamped = entry.is_symlink() if self._watch is not None else not own
        self._add(key, stamp, devices, stamped=stamped)

    def _devices_of(self, path: Path) -> frozenset[str]:
        summary = read_spec_summary(path)
        if summary is not None and summary[0] == self.kind:
            return frozenset(summary[1])
        return frozenset()

    def _read_again(self, name: str) -> None:
        """Forget what was read of the entry ``name`` and read it again (inotify saw it
        change; it may be gone)."""
        for key in [k for k in self._files if k[0] == name]:
            self._forget(key)
        path = self.root_dir / name
        try:
            link = os.lstat(path)
        except OSError:
            return
        stamp = _stamp_of(path)
        devices = self._devices_of(path) if stamp is not None else frozenset()
        self._add((name, link.st_ino), stamp, devices, stamped=stat.S_ISLNK(link.st_mode))

    def _restat_stamped(self) -> None:
        """Read again the stamped entries whose stat stamp changed."""
        for key in list(self._stamped):
            if _stamp_of(self.root_dir / key[0]) != self._files[key][0]:
                self._read_again(key[0])

    def _add(self, key: tuple[str, int], stamp: _Stamp | None, devices: frozenset[str],
             stamped: bool = False) -> None:
        self._files[key] = (stamp, devices)
        if stamped:
            self._stamped.add(key)
        for device_name in devices:
            self._index.setdefault(device_name, set()).add(key)

    def _forget(self, key: tuple[str, int]) -> None:
        _, devices = self._files.pop(key)
        self._stamped.discard(key)
        for device_name in devices:
            files = self._index.get(device_name)
            if files is not None:
                files.discard(key)
                if not files:
                    del self._index[device_name]

    def _refuse(self, clash: frozenset[str], other_file: str) -> None:
        if clash:
            qname = self.qualified_name(sorted(clash)[0])
            raise SpecConflictError(
                f"CDI device {qname} is already defined in {other_file}; a name defined in "
                f"two files of {self.root_dir} is dropped by runtimes",
                qname,
                other_file,
            )

    def remove(self, claim_uid: str, *, durable: bool = True) -> bool:
        """Remove the claim's spec file; ``durable``: and fsync the directory, so the
        removal survives a power loss. Returns False when there was none. Raises
        :class:`CDINameError` for an unsafe claim UID, ``OSError`` otherwise."""
        return remove_durably(self.path_for(claim_uid), sync_dir=durable)

    def exists(self, claim_uid: str) -> bool:
        """True when the claim's spec file exists as a regular file. A symlink (or anything
        else) in its place does not count (``lstat``: never trusted, never followed), so
        the caller writes the spec again, replacing the link itself."""
        try:
            st = os.lstat(self.path_for(claim_uid))
        except FileNotFoundError:
            return False
        return stat.S_ISREG(st.st_mode)

    def read(self, claim_uid: str) -> Spec | None:
        """The claim's spec as written, or None when absent (strict decode, no rule checks)."""
        path = self.path_for(claim_uid)
        try:
            return load_spec_file(path)
        except FileNotFoundError:
            return None

    def list_specs(self) -> list[str]:
        """Claim UIDs of this store's files in ``root_dir`` (sorted).

        A file counts when its name is ``<vendor>-<class>_<claimUID>.json`` with a valid
        claim UID and, when it decodes, its kind is this store's kind (names alone are
        ambiguous: vendor ``a-b`` class ``c`` and vendor ``a`` class ``b-c``).
        """
        out = []
        for path in spec_files(self.root_dir):
            name = path.name
            if not (name.startswith(self.file_prefix) and name.endswith(".json")):
                continue
            uid = name[len(self.file_prefix) : -len(".json")]
            try:
                validate_claim_uid(uid)
            except CDINameError:
                continue
            summary = read_spec_summary(path)
            if summary is not None and summary[0] != self.kind:
                continue
            out.append(uid)
        return out

    def remove_orphans(self, keep: Iterable[str]) -> list[str]:
        """Remove this store's files whose claim UID is not in ``keep`` (startup
        reconciliation against the checkpoint). Returns the removed claim UIDs."""
        keep_set = set(keep)
        removed = []
        for uid in self.list_specs():
            if uid not in keep_set and self.remove(uid):
                removed.append(uid)
        return removed

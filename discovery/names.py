"""Device names and attribute keys the API server accepts, derived deterministically.

Rules (resource.k8s.io/v1; k8s.io/apimachinery pkg/util/validation):

- a device name is a DNS label: ``[a-z0-9]([-a-z0-9]*[a-z0-9])?``, at most 63 bytes;
- an attribute or capacity key is a QualifiedName: an optional domain (a DNS subdomain of
  at most 63 bytes) and ``/``, then a C identifier ``[A-Za-z_][A-Za-z0-9_]*`` of at most
  32 bytes. Keys without a domain are in the driver's own domain.

:func:`dns_label` maps any name (a network interface name with ``_``, ``.``, upper case, a
too-long serial…) to a DNS label. A name that already is a DNS label is kept as it is; any
other name gets its sanitised form plus a short hash of the *original* name, so two names
that sanitise alike (``eth0.100`` / ``eth0_100``, ``ETH1`` / ``eth1``) still map to distinct
labels, and the result depends on the name alone: never on enumeration order or on which
other devices exist. Keep the original name as an attribute of the device.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Collection, Iterable

from drakit.cdi.names import DNS_LABEL_FMT, DNS_SUBDOMAIN_FMT

DNS_LABEL_MAX = 63
"""Maximum length of a DNS label (device names, counter set names), bytes."""
C_IDENTIFIER_MAX = 32
"""Maximum length of the identifier part of a QualifiedName (DeviceMaxIDLength), bytes."""
DOMAIN_MAX = 63
"""Maximum length of the domain part of a QualifiedName (DeviceMaxDomainLength), bytes."""

STANDARD_ATTRIBUTE_PREFIX = "resource.kubernetes.io/"
PCIE_ROOT = "resource.kubernetes.io/pcieRoot"
"""Standard attribute: the PCIe root complex of a PCI device, ``pci<domain>:<bus>``
(k8s.io/dynamic-resource-allocation ``deviceattribute.StandardDeviceAttributePCIeRoot``)."""
PCI_BUS_ID = "resource.kubernetes.io/pciBusID"
"""Standard attribute: the PCI address in extended BDF notation, ``0000:3b:00.0``
(``deviceattribute.StandardDeviceAttributePCIBusID``)."""
NUMA_NODE = "numaNode"
"""The NUMA node of a device (int), in the driver's own domain: Kubernetes defines no
standard attribute for it."""

_DNS_LABEL_RE = re.compile(DNS_LABEL_FMT, re.ASCII)
_DNS_SUBDOMAIN_RE = re.compile(DNS_SUBDOMAIN_FMT, re.ASCII)
_C_IDENTIFIER_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*", re.ASCII)
_HASH_LEN = 8


def is_dns_label(value: str) -> bool:
    """True when ``value`` is a DNS label (RFC 1123, ≤ 63 bytes)."""
    return len(value.encode()) <= DNS_LABEL_MAX and _DNS_LABEL_RE.fullmatch(value) is not None


def is_dns_subdomain(value: str, max_len: int = 253) -> bool:
    """True when ``value`` is a DNS subdomain (RFC 1123) of at most ``max_len`` bytes."""
    return len(value.encode()) <= max_len and _DNS_SUBDOMAIN_RE.fullmatch(value) is not None


def is_c_identifier(value: str, max_len: int = C_IDENTIFIER_MAX) -> bool:
    """True when ``value`` is a C identifier of at most ``max_len`` bytes."""
    return len(value.encode()) <= max_len and _C_IDENTIFIER_RE.fullmatch(value) is not None


def is_qualified_name(key: str) -> bool:
    """True when ``key`` is a valid attribute/capacity key (QualifiedName, at most one ``/``;
    the domain is checked lower-cased, as the API server does)."""
    domain, sep, ident = key.rpartition("/")
    if not sep:
        return is_c_identifier(key)
    if "/" in domain or not domain:
        return False
    return is_dns_subdomain(domain.lower(), DOMAIN_MAX) and is_c_identifier(ident)


def _digest(value: str, length: int, salt: int = 0) -> str:
    data = value.encode("utf-8", "surrogateescape")
    if salt:
        data += b"\x00" + str(salt).encode()
    return hashlib.sha256(data).hexdigest()[:length]


def _sanitise_label(name: str) -> str:
    s = re.sub(r"[^a-z0-9]+", "-", name.lower(), flags=re.ASCII)
    return s.strip("-")


def _label_with_hash(base: str, digest: str) -> str:
    room = DNS_LABEL_MAX - len(digest) - 1
    base = base[:room].rstrip("-")
    return f"{base}-{digest}" if base else f"x-{digest}"


def dns_label(name: str, *, existing: Collection[str] = ()) -> str:
    """A DNS label for ``name``: ``name`` itself when it already is one, else its sanitised
    form (lower case, runs of other characters → ``-``, trimmed, shortened to fit) plus
    ``-`` and 8 hex digits of the SHA-256 of ``name``.

    ``eth0`` → ``eth0``; ``eth0.100`` → ``eth0-100-<hash>``; ``ETH1`` → ``eth1-<hash>``.
    The result depends on ``name`` only. ``existing`` holds labels already taken by *other*
    names; in the (hash-collision) case that the result is among them, a longer salted hash
    is used until it is free. Prefer :func:`dns_labels` for a whole set of names: its result
    does not depend on the order of the names.
    """
    if is_dns_label(name):
        label = name
    else:
        label = _label_with_hash(_sanitise_label(name), _digest(name, _HASH_LEN))
    salt = 0
    while label in existing:
        salt += 1
        label = _label_with_hash(_sanitise_label(name), _digest(name, 16, salt))
    return label


def dns_labels(names: Iterable[str]) -> dict[str, str]:
    """Map each distinct name to a distinct DNS label, independently of the names' order.

    Each name gets :func:`dns_label`; should two names still end up on the same label (a
    valid name equal to another's hashed form, or a hash collision), a name that is itself
    that label keeps it and the others (in sorted order) get longer salted hashes.
    """
    unique = sorted(set(names))
    first = {n: dns_label(n) for n in unique}
    by_label: dict[str, list[str]] = {}
    for n, label in first.items():
        by_label.setdefault(label, []).append(n)
    out: dict[str, str] = {}
    taken = set(first.values())
    for label, group in sorted(by_label.items()):
        if len(group) == 1:
            out[group[0]] = label
            continue
        keeper = label if label in group else None
        for n in group:
            if n == keeper:
                out[n] = label
                continue
            new = dns_label(n, existing=taken)
            taken.add(new)
            out[n] = new
    return out


def _sanitise_identifier(ident: str) -> str:
    s = re.sub(r"[^A-Za-z0-9_]", "_", ident, flags=re.ASCII)
    if not s or not (s[0].isalpha() or s[0] == "_"):
        s = "_" + s
    if len(s) > C_IDENTIFIER_MAX:
        digest = _digest(ident, 6)
        s = f"{s[: C_IDENTIFIER_MAX - len(digest) - 1]}_{digest}"
    return s


def _sanitise_domain(domain: str) -> str:
    parts = [_sanitise_label(p) for p in domain.split(".")]
    s = ".".join(p for p in parts if p)
    if len(s) > DOMAIN_MAX:
        digest = _digest(domain, 6)
        s = f"{s[: DOMAIN_MAX - len(digest) - 1].rstrip('.-')}-{digest}"
    return s


def qualified_name(key: str, domain: str | None = None) -> str:
    """A valid attribute/capacity key (QualifiedName) for ``key``.

    ``key`` may carry a domain (``vendor.example.com/model``); ``domain``, when given and
    ``key`` has none, is put in front. Valid keys are returned unchanged. Otherwise the
    identifier keeps ``[A-Za-z0-9_]`` (others → ``_``, a leading digit gets ``_``, longer
    than 32 bytes → shortened with a hash of the original), and the domain is lower-cased
    and sanitised to a DNS subdomain of at most 63 bytes (an empty one is dropped).
    """
    dom, sep, ident = key.rpartition("/")
    if not sep and domain:
        dom = domain
    full = f"{dom}/{ident}" if dom else ident
    if is_qualified_name(full):
        return full
    new_ident = _sanitise_identifier(ident)
    new_dom = _sanitise_domain(dom) if dom else ""
    return f"{new_dom}/{new_ident}" if new_dom else new_ident

"""CDI name rules: vendor, class, kind, device name, qualified device name, annotation keys.

The rules are the *safe writer* rules (CDI Go library pkg/parser/parser.go): slightly stricter
than the Go parser of every released CDI library, so every name drakit writes is recognised by
every runtime (podman 4.3's CDI v0.5.2 up to CDI v1.1.0).

- vendor: lowercase DNS-1123 subdomain starting with a letter, 2-253 characters
  (one character panics CDI libraries ≤ v1.1.0, PR #321).
- class: starts with a lowercase letter, ends alphanumeric, ``[a-z0-9_-]`` in between,
  2-63 characters. A ``.`` in the class is accepted by the rule but forces cdiVersion
  0.6.0 (see :mod:`drakit.cdi.version`), which older runtimes do not recognise at all.
- device name: ``[A-Za-z0-9]``, optionally ``[A-Za-z0-9_.-]*`` then ``[A-Za-z0-9]``;
  no ``/``, ``=`` or ``:``. A leading digit forces cdiVersion 0.5.0.
- qualified device name: ``vendor/class=name`` (split at the first ``=``, then the left
  side at the first ``/``).

This module is also the one home of the name rules the other packages share (``cdi`` is the
bottom layer: ``discovery`` and ``plugin`` import it, never the reverse):

- Kubernetes DNS label / subdomain formats (apimachinery ``IsDNS1123Label`` /
  ``IsDNS1123Subdomain``): :data:`DNS_LABEL_FMT`, :data:`DNS_SUBDOMAIN_FMT`;
- Kubernetes qualified names (label / annotation keys, condition types):
  :func:`qualified_name_error`;
- the claim UID rule (:func:`claim_uid_error`), used by the kubelet-facing checks
  (``drakit.plugin.names.check_claim_uid``) and by the CDI store alike;
- the canonical form of an interface address in CIDR form (:func:`canonical_cidr`), the
  ``networkData.ips`` rule the built-in ``net`` discoverer writes and
  ``drakit.discovery.plugin.NetworkData`` checks.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping

from drakit.cdi.errors import CDINameError

DNS_LABEL_FMT = "[a-z0-9]([-a-z0-9]*[a-z0-9])?"
"""RFC 1123 label (apimachinery ``dns1123LabelFmt``); at most 63 bytes."""
DNS_SUBDOMAIN_FMT = DNS_LABEL_FMT + r"(\." + DNS_LABEL_FMT + ")*"
"""RFC 1123 subdomain (apimachinery ``dns1123SubdomainFmt``); at most 253 bytes."""
CLAIM_UID_FMT = "[A-Za-z0-9](?:[A-Za-z0-9_.-]{0,126}[A-Za-z0-9])?"
"""Claim UIDs drakit accepts (and :func:`claim_uid_error` also refuses ``..``): every UID the
API server issues passes (``metadata.uid`` is set by the server on create, an RFC 4122 UUID
in its 36-character lower-case form, ``uuid.NewUUID()``; the kubelet passes it unchanged in
``Claim.uid``). Readable UIDs of stand-in servers and tests pass too; what could misbehave
in a file name (``/``, NUL, a leading dot or dash, a trailing dash, ``..``) does not. The
pattern itself bounds the length (1-128 characters, :data:`CLAIM_UID_MAX_LENGTH`)."""
CLAIM_UID = re.compile(CLAIM_UID_FMT, re.ASCII)

_VENDOR_RE = re.compile(r"[a-z](?:[a-z0-9-]*[a-z0-9])?(?:\.[a-z0-9](?:[a-z0-9-]*[a-z0-9])?)*")
_CLASS_RE = re.compile(r"[a-z][a-z0-9_.-]*[a-z0-9]")
_DEVICE_RE = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9_.-]*[A-Za-z0-9])?")
_DNS_SUBDOMAIN_RE = re.compile(DNS_SUBDOMAIN_FMT, re.ASCII)
_ANNOTATION_NAME_RE = re.compile(r"(?:[A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")

VENDOR_MAX_LENGTH = 253
"""Longest vendor name (DNS-1123 subdomain)."""
CLASS_MAX_LENGTH = 63
"""Longest class name (CDI SPEC.md)."""
CLAIM_UID_MAX_LENGTH = 128
"""Longest claim UID accepted in a spec file name (a Kubernetes UID has 36 characters)."""
ANNOTATIONS_MAX_BYTES = 256 * 1024
"""All annotation keys plus values together (Kubernetes annotation rule; CDI
pkg/cdi/annotations.go)."""


def vendor_error(vendor: str) -> str | None:
    """Why ``vendor`` is not a valid CDI vendor name, or None when it is."""
    if len(vendor) < 2:
        return f"vendor {vendor!r} must have at least 2 characters"
    if len(vendor) > VENDOR_MAX_LENGTH:
        return f"vendor must have at most {VENDOR_MAX_LENGTH} characters (has {len(vendor)})"
    if not _VENDOR_RE.fullmatch(vendor):
        return (
            f"vendor {vendor!r} must be a lowercase DNS subdomain starting with a letter "
            "(dot-separated labels of [a-z0-9-], each starting and ending alphanumeric)"
        )
    return None


def class_error(cls: str) -> str | None:
    """Why ``cls`` is not a valid CDI class name, or None when it is."""
    if len(cls) < 2:
        return f"class {cls!r} must have at least 2 characters"
    if len(cls) > CLASS_MAX_LENGTH:
        return f"class must have at most {CLASS_MAX_LENGTH} characters (has {len(cls)})"
    if not _CLASS_RE.fullmatch(cls):
        return (
            f"class {cls!r} must start with a lowercase letter, end with a lowercase letter "
            "or digit and contain only [a-z0-9_-] (and '.', CDI 0.6.0+) in between"
        )
    return None


def device_name_error(name: str) -> str | None:
    """Why ``name`` is not a valid CDI device name, or None when it is."""
    if not name:
        return "device name must not be empty"
    if not _DEVICE_RE.fullmatch(name):
        return (
            f"device name {name!r} must start and end with a letter or digit and contain "
            "only [A-Za-z0-9_.-] in between"
        )
    return None


def validate_vendor(vendor: str) -> str:
    """Return ``vendor`` or raise :class:`CDINameError`."""
    err = vendor_error(vendor)
    if err:
        raise CDINameError(err)
    return vendor


def validate_class(cls: str) -> str:
    """Return ``cls`` or raise :class:`CDINameError`."""
    err = class_error(cls)
    if err:
        raise CDINameError(err)
    return cls


def validate_device_name(name: str) -> str:
    """Return ``name`` or raise :class:`CDINameError`."""
    err = device_name_error(name)
    if err:
        raise CDINameError(err)
    return name


def kind_error(kind: str) -> str | None:
    """Why ``kind`` (``vendor/class``) is invalid, or None when it is valid."""
    vendor, sep, cls = kind.partition("/")
    if not sep or not vendor or not cls:
        return f"kind {kind!r} must be 'vendor/class'"
    return vendor_error(vendor) or class_error(cls)


def parse_kind(kind: str) -> tuple[str, str]:
    """Split ``vendor/class`` at the first ``/`` and validate both parts.

    Raises :class:`CDINameError`.
    """
    err = kind_error(kind)
    if err:
        raise CDINameError(err)
    vendor, _, cls = kind.partition("/")
    return vendor, cls


def qualified_name(kind: str, name: str) -> str:
    """The qualified device name ``vendor/class=name`` (the CDI device ID a runtime takes).

    Raises :class:`CDINameError` when ``kind`` or ``name`` breaks the rules.
    """
    parse_kind(kind)
    validate_device_name(name)
    return f"{kind}={name}"


def parse_qualified_name(device: str) -> tuple[str, str, str]:
    """Split ``vendor/class=name`` into ``(vendor, class, name)``, validating each part.

    Empty input or input starting with ``/`` is not a CDI name (runtimes take it as a host
    device path). Raises :class:`CDINameError`.
    """
    if not device or device.startswith("/"):
        raise CDINameError(f"{device!r} is not a qualified CDI device name (vendor/class=name)")
    kind, sep, name = device.partition("=")
    if not sep:
        raise CDINameError(f"{device!r} is not a qualified CDI device name: missing '='")
    try:
        vendor, cls = parse_kind(kind)
        validate_device_name(name)
    except CDINameError as exc:
        raise CDINameError(f"{device!r} is not a valid qualified CDI device name: {exc}") from None
    return vendor, cls, name


def is_qualified_name(device: str) -> bool:
    """True when ``device`` parses as a valid qualified device name."""
    try:
        parse_qualified_name(device)
    except CDINameError:
        return False
    return True


def claim_uid_error(claim_uid: str) -> str | None:
    """Why ``claim_uid`` is not an acceptable claim UID, or None when it is (the one rule;
    see :data:`CLAIM_UID_FMT`).

    Accepted: 1-128 characters of ``[A-Za-z0-9_.-]``, starting and ending with a letter or
    digit, without ``..`` (so no ``/``, no NUL, no hidden-file dot, no ``..`` anywhere).
    """
    if not claim_uid:
        return "claim UID must not be empty"
    if len(claim_uid) > CLAIM_UID_MAX_LENGTH:
        return f"claim UID must have at most {CLAIM_UID_MAX_LENGTH} characters"
    if ".." in claim_uid or not CLAIM_UID.fullmatch(claim_uid):
        return (
            f"claim UID {claim_uid!r} must contain only [A-Za-z0-9_.-], start and end with "
            "a letter or digit, and contain no '..'"
        )
    return None


def validate_claim_uid(claim_uid: str) -> str:
    """Return ``claim_uid`` or raise :class:`CDINameError` (see :func:`claim_uid_error`)."""
    err = claim_uid_error(claim_uid)
    if err:
        raise CDINameError(err)
    return claim_uid


def claim_device_name(claim_uid: str, device_name: str) -> str:
    """A per-claim device name ``<claimUID>-<device>`` (as the CDI library's transient specs).

    Prefixing with the claim UID keeps a stale file of another claim from ever defining the
    same qualified name. A UID starting with a digit makes the spec cdiVersion 0.5.0.
    Raises :class:`CDINameError`.
    """
    validate_claim_uid(claim_uid)
    return validate_device_name(f"{claim_uid}-{device_name}")


QUALIFIED_NAME_MAX_LENGTH = 63
"""Longest name part of a qualified name (after the optional ``<prefix>/``)."""


def qualified_name_error(key: str) -> str | None:
    """Why ``key`` is not a Kubernetes qualified name, or None (apimachinery
    ``IsQualifiedName``: label and annotation keys, ``metav1.Condition.type``).

    Key = optional DNS-1123 subdomain prefix (≤ 253) and ``/``, then a name of ≤ 63
    characters ``([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]``. The message is the API
    server's, without the field path.
    """
    parts = key.split("/")
    if len(parts) > 2:
        return ("a qualified name must consist of alphanumeric characters, '-', '_' or '.', "
                "and must start and end with an alphanumeric character, with an optional "
                "DNS subdomain prefix and '/' (e.g. 'example.com/MyName')")
    name = parts[-1]
    if len(parts) == 2:
        prefix = parts[0]
        if not prefix:
            return "prefix part must be non-empty"
        if len(prefix) > VENDOR_MAX_LENGTH or not _DNS_SUBDOMAIN_RE.fullmatch(prefix):
            return (f"prefix part must be a lowercase RFC 1123 subdomain of at most "
                    f"{VENDOR_MAX_LENGTH} characters (e.g. 'example.com')")
    if not name:
        return "name part must be non-empty"
    if len(name) > QUALIFIED_NAME_MAX_LENGTH:
        return f"name part must be no more than {QUALIFIED_NAME_MAX_LENGTH} characters"
    if not _ANNOTATION_NAME_RE.fullmatch(name):
        return ("name part must consist of alphanumeric characters, '-', '_' or '.', and "
                "must start and end with an alphanumeric character (e.g. 'MyName', "
                "'my.name', '123-abc')")
    return None


def annotation_key_error(key: str) -> str | None:
    """Why ``key`` is not a valid annotation key (a qualified name, :func:`qualified_name_error`),
    or None."""
    err = qualified_name_error(key)
    return f"annotation key {key!r}: {err}" if err else None


def annotations_errors(annotations: Mapping[str, str]) -> list[tuple[str, str]]:
    """Problems in an annotations map as ``(key, message)``; key ``""`` for the size rule."""
    out: list[tuple[str, str]] = []
    total = 0
    for key, value in annotations.items():
        err = annotation_key_error(key)
        if err:
            out.append((key, err))
        total += len(key.encode()) + len(str(value).encode())
    if total > ANNOTATIONS_MAX_BYTES:
        out.append(("", f"annotations total {total} bytes, more than {ANNOTATIONS_MAX_BYTES}"))
    return out


def canonical_cidr(address: str, prefix_len: int) -> str:
    """``address``/``prefix_len`` in the API's canonical form: RFC 5952 IPv6, IPv4 without
    leading zeros, an IPv4-mapped IPv6 address as IPv4 with the prefix length less 96, host
    bits kept (``networkData.ips`` rule, k8s.io/apimachinery pkg/api/validate/content/ip.go).
    ``ValueError`` when ``address`` is malformed or ``prefix_len`` out of range."""
    ip = ipaddress.ip_address(address)
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return f"{ip.ipv4_mapped}/{max(prefix_len - 96, 0)}"
    if not 0 <= prefix_len <= ip.max_prefixlen:
        raise ValueError(f"prefix length {prefix_len} out of range for {address}")
    return f"{ip}/{prefix_len}"

"""String formats the resource.k8s.io API checks, with the server's error texts.

Source: k8s.io/apimachinery pkg/util/validation and k8s.io/kubernetes
pkg/apis/resource/validation. Every length counts UTF-8 bytes; every regex is matched in
full with ASCII semantics, like Go's anchored ``^…$``.
"""

from __future__ import annotations

import re
from typing import Final

from drakit.cdi.names import DNS_LABEL_FMT, DNS_SUBDOMAIN_FMT  # the one home of the name rules
from drakit.plugin.slices import fielderrors as fe
from drakit.plugin.slices.fielderrors import FieldError

C_IDENTIFIER_FMT: Final = "[A-Za-z_][A-Za-z0-9_]*"
LABEL_NAME_FMT: Final = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"
LABEL_VALUE_FMT: Final = "(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?"
_SEMVER_ID: Final = "(0|[1-9][0-9]*|[0-9]*[a-zA-Z-][0-9a-zA-Z-]*)"
SEMVER_FMT: Final = (
    r"(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)"
    rf"(-{_SEMVER_ID}(\.{_SEMVER_ID})*)?"
    r"(\+[0-9a-zA-Z-]+(\.[0-9a-zA-Z-]+)*)?"
)

DNS_LABEL_MAX: Final = 63
DNS_SUBDOMAIN_MAX: Final = 253
DRIVER_NAME_MAX: Final = 63
POOL_NAME_MAX: Final = 253
C_IDENTIFIER_MAX: Final = 32
LABEL_NAME_MAX: Final = 63
LABEL_VALUE_MAX: Final = 63
ATTRIBUTE_VALUE_MAX: Final = 64

_DNS_LABEL = re.compile(DNS_LABEL_FMT, re.ASCII)
_DNS_SUBDOMAIN = re.compile(DNS_SUBDOMAIN_FMT, re.ASCII)
_C_IDENTIFIER = re.compile(C_IDENTIFIER_FMT, re.ASCII)
_LABEL_NAME = re.compile(LABEL_NAME_FMT, re.ASCII)
_LABEL_VALUE = re.compile(LABEL_VALUE_FMT, re.ASCII)
_SEMVER = re.compile(SEMVER_FMT, re.ASCII)


def _regex_error(msg: str, fmt: str, *examples: str) -> str:
    ex = ",  or ".join(f"'{e}'" for e in examples)
    return f"{msg} (e.g. {ex}, regex used for validation is '{fmt}')"


DNS_LABEL_MSG: Final = _regex_error(
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and "
    "must start and end with an alphanumeric character", DNS_LABEL_FMT, "my-name", "123-abc")
DNS_SUBDOMAIN_MSG: Final = _regex_error(
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or "
    "'.', and must start and end with an alphanumeric character", DNS_SUBDOMAIN_FMT,
    "example.com")
C_IDENTIFIER_MSG: Final = _regex_error(
    "a valid C identifier must start with alphabetic character or '_', followed by a string of "
    "alphanumeric characters or '_'", C_IDENTIFIER_FMT, "my_name", "MY_NAME", "MyName")
LABEL_NAME_MSG: Final = _regex_error(
    "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an "
    "alphanumeric character", LABEL_NAME_FMT, "MyName", "my.name", "123-abc")
LABEL_VALUE_MSG: Final = _regex_error(
    "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or "
    "'.', and must start and end with an alphanumeric character", LABEL_VALUE_FMT,
    "MyValue", "my_value", "12345")
SEMVER_MSG: Final = "must be a string compatible with semver.org spec 2.0.0"


def nbytes(s: str) -> int:
    """Length in UTF-8 bytes (Go ``len(string)``)."""
    return len(s) if s.isascii() else len(s.encode("utf-8"))


def is_dns_label(s: str) -> bool:
    return nbytes(s) <= DNS_LABEL_MAX and _DNS_LABEL.fullmatch(s) is not None


def is_dns_subdomain(s: str) -> bool:
    return nbytes(s) <= DNS_SUBDOMAIN_MAX and _DNS_SUBDOMAIN.fullmatch(s) is not None


def is_label_value(s: str) -> bool:
    return nbytes(s) <= LABEL_VALUE_MAX and _LABEL_VALUE.fullmatch(s) is not None


def dns_label(value: str, path: str) -> list[FieldError]:
    """DNS label (RFC 1123, ≤ 63): device names, counter set and counter names."""
    errs = []
    if nbytes(value) > DNS_LABEL_MAX:
        errs.append(fe.invalid(path, value, f"must be no more than {DNS_LABEL_MAX} characters"))
    if not _DNS_LABEL.fullmatch(value):
        if _DNS_SUBDOMAIN.fullmatch(value):
            errs.append(fe.invalid(path, value, "must not contain dots"))
        else:
            errs.append(fe.invalid(path, value, DNS_LABEL_MSG))
    return errs


def dns_subdomain(value: str, path: str) -> list[FieldError]:
    """DNS subdomain (≤ 253, no per-part limit): node names, pool name parts."""
    errs = []
    if nbytes(value) > DNS_SUBDOMAIN_MAX:
        errs.append(fe.invalid(path, value,
                               f"must be no more than {DNS_SUBDOMAIN_MAX} characters"))
    if not _DNS_SUBDOMAIN.fullmatch(value):
        errs.append(fe.invalid(path, value, DNS_SUBDOMAIN_MSG))
    return errs


def driver_name(value: str, path: str) -> list[FieldError]:
    """``spec.driver`` and the domain of a qualified name: ≤ 63 bytes, lower-cased first,
    then a DNS subdomain (so upper case passes; the server only warns)."""
    if not value:
        return [fe.required(path)]
    errs = []
    if nbytes(value) > DRIVER_NAME_MAX:
        errs.append(fe.too_long(path, DRIVER_NAME_MAX))
    if not _DNS_SUBDOMAIN.fullmatch(value.lower()):
        errs.append(fe.invalid(path, value, DNS_SUBDOMAIN_MSG))
    return errs


def pool_name(value: str, path: str) -> list[FieldError]:
    """``spec.pool.name``: ≤ 253 bytes, one or more DNS subdomains joined by ``/``."""
    if not value:
        return [fe.required(path)]
    errs = []
    if nbytes(value) > POOL_NAME_MAX:
        errs.append(fe.too_long(path, POOL_NAME_MAX))
    for part in value.split("/"):
        errs.extend(dns_subdomain(part, path))
    return errs


def node_name(value: str, path: str) -> list[FieldError]:
    return dns_subdomain(value, path)


def c_identifier(value: str, path: str) -> list[FieldError]:
    """The ID part of a qualified name: a C identifier of at most 32 bytes."""
    errs = []
    if nbytes(value) > C_IDENTIFIER_MAX:
        errs.append(fe.too_long(path, C_IDENTIFIER_MAX))
    if not _C_IDENTIFIER.fullmatch(value):
        errs.append(fe.invalid(path, value, C_IDENTIFIER_MSG))
    return errs


def qualified_name(value: str, path: str) -> list[FieldError]:
    """Attribute and capacity keys: ``<C identifier>`` or ``<domain>/<C identifier>``.

    More than one ``/`` is rejected (newer servers do; released ones accept it silently)."""
    parts = value.split("/")
    if len(parts) == 1:
        return c_identifier(value, path)
    if len(parts) > 2:
        return [fe.invalid(path, value, "must not contain more than one slash")]
    domain, ident = parts
    errs: list[FieldError] = []
    if not domain:
        errs.append(fe.invalid(path, "", "the domain must not be empty"))
    else:
        errs.extend(driver_name(domain, path))
    if not ident:
        errs.append(fe.invalid(path, "", "the name must not be empty"))
    else:
        errs.extend(c_identifier(ident, path))
    return errs


def label_key(value: str, path: str) -> list[FieldError]:
    """A label key / qualified name (taint keys, binding conditions): optional
    ``<DNS subdomain>/`` prefix, then a name of ≤ 63 characters."""
    msgs: list[str] = []
    parts = value.split("/")
    if len(parts) == 1:
        name = parts[0]
    elif len(parts) == 2:
        prefix, name = parts
        if not prefix:
            msgs.append("prefix part must be non-empty")
        else:
            if nbytes(prefix) > DNS_SUBDOMAIN_MAX:
                msgs.append(f"prefix part must be no more than {DNS_SUBDOMAIN_MAX} characters")
            if not _DNS_SUBDOMAIN.fullmatch(prefix):
                msgs.append("prefix part " + DNS_SUBDOMAIN_MSG)
    else:
        return [fe.invalid(path, value, "a qualified name " + LABEL_NAME_MSG
                           + " with an optional DNS subdomain prefix and '/' "
                           "(e.g. 'example.com/MyName')")]
    if not name:
        msgs.append("name part must be non-empty")
    elif nbytes(name) > LABEL_NAME_MAX:
        msgs.append(f"name part must be no more than {LABEL_NAME_MAX} bytes")
    if not _LABEL_NAME.fullmatch(name):
        msgs.append("name part " + LABEL_NAME_MSG)
    return [fe.invalid(path, value, m) for m in msgs]


def label_value(value: str, path: str) -> list[FieldError]:
    """A label value: empty, or ≤ 63 characters of the label value format."""
    errs = []
    if nbytes(value) > LABEL_VALUE_MAX:
        errs.append(fe.invalid(path, value, f"must be no more than {LABEL_VALUE_MAX} bytes"))
    if not _LABEL_VALUE.fullmatch(value):
        errs.append(fe.invalid(path, value, LABEL_VALUE_MSG))
    return errs


def semver(value: str, path: str) -> list[FieldError]:
    """A ``version`` attribute value: semver 2.0.0 and ≤ 64 bytes (both checked)."""
    errs = []
    if not _SEMVER.fullmatch(value):
        errs.append(fe.invalid(path, value, SEMVER_MSG))
    if nbytes(value) > ATTRIBUTE_VALUE_MAX:
        errs.append(fe.too_long(path, ATTRIBUTE_VALUE_MAX))
    return errs


def fully_qualified_name(value: str, path: str) -> list[FieldError]:
    """``spec.partitionTypeAttribute`` (declarative format
    ``k8s-resource-fully-qualified-name``): ``<domain>/<C identifier>``; the domain is a
    lowercase DNS subdomain of ≤ 63 bytes, the name a C identifier of ≤ 32 bytes."""
    parts = value.split("/")
    errs: list[FieldError] = []
    if len(parts) == 1:
        errs.extend(c_identifier(value, path))
    elif len(parts) == 2:
        domain, ident = parts
        if not domain:
            errs.append(fe.invalid(path, "", "prefix must not be empty"))
        else:
            if nbytes(domain) > DRIVER_NAME_MAX:
                errs.append(fe.too_long(path, DRIVER_NAME_MAX))
            if nbytes(domain) > DNS_SUBDOMAIN_MAX or not _DNS_SUBDOMAIN.fullmatch(domain):
                errs.append(fe.invalid(path, domain, "prefix: " + DNS_SUBDOMAIN_MSG))
        if not ident:
            errs.append(fe.invalid(path, "", "name must not be empty"))
        else:
            errs.extend(c_identifier(ident, path))
    else:
        errs.append(fe.invalid(path, value, "must not contain more than one slash"))
    if "/" not in value:
        errs.append(fe.invalid(path, value, "a fully qualified name must be a domain and a name "
                                            "separated by a slash"))
    return errs

"""Vendor, class, device name, qualified name, claim UID and annotation key rules at their
boundaries (CDI pkg/parser/parser.go, SPEC.md)."""

from __future__ import annotations

import pytest

from drakit.cdi.errors import CDINameError
from drakit.cdi.names import (
    annotation_key_error,
    annotations_errors,
    claim_device_name,
    class_error,
    device_name_error,
    is_qualified_name,
    parse_kind,
    parse_qualified_name,
    qualified_name,
    validate_claim_uid,
    vendor_error,
)

VALID_VENDORS = [
    "ab",
    "a1",
    "example.com",
    "k8s.gpu.example.com",
    "a-b.c-d",
    "a.b",
    "x.0",
    "a" * 253,
    ("a" * 63 + ".") * 3 + "a" * 61,  # exactly 253
]
INVALID_VENDORS = [
    "",
    "a",  # one character panics CDI <= v1.1.0
    "a" * 254,
    "1abc",  # must start with a letter
    "-ab",
    "ab-",
    "ab.",
    ".ab",
    "a..b",
    "a_b",
    "Example.com",
    "a/b",
    "a=b",
    "a b",
    "ex.-a",
    "ex.a-",
    "é.com",
]


@pytest.mark.parametrize("vendor", VALID_VENDORS)
def test_valid_vendor(vendor: str) -> None:
    assert vendor_error(vendor) is None


@pytest.mark.parametrize("vendor", INVALID_VENDORS)
def test_invalid_vendor(vendor: str) -> None:
    assert vendor_error(vendor)


VALID_CLASSES = ["gp", "gpu", "g1", "g-1", "g_1", "gpu.v1", "a" * 63, "a-_b"]
INVALID_CLASSES = [
    "",
    "g",  # one character
    "a" * 64,
    "1gpu",  # must start with a letter
    "_gpu",
    "gpu-",
    "gpu_",
    "gpu.",
    "Gpu",
    "gPu",
    "gp u",
    "gpu/x",
    "gpu=x",
    "gpu:x",
]


@pytest.mark.parametrize("cls", VALID_CLASSES)
def test_valid_class(cls: str) -> None:
    assert class_error(cls) is None


@pytest.mark.parametrize("cls", INVALID_CLASSES)
def test_invalid_class(cls: str) -> None:
    assert class_error(cls)


VALID_DEVICES = [
    "0",
    "a",
    "Z",
    "gpu0",
    "A-b_c.d",
    "0abc",
    "3f2a9c1e-0b7d-4c52-9a8e-1d2c3b4a5f60-gpu-0",
    "a" * 300,
]
INVALID_DEVICES = ["", "-a", "a-", "_a", "a_", ".a", "a.", "a/b", "a=b", "a:b", "a b", "a\x00", "ä"]


@pytest.mark.parametrize("name", VALID_DEVICES)
def test_valid_device_name(name: str) -> None:
    assert device_name_error(name) is None


@pytest.mark.parametrize("name", INVALID_DEVICES)
def test_invalid_device_name(name: str) -> None:
    assert device_name_error(name)


def test_qualified_name_roundtrip() -> None:
    qn = qualified_name("example.com/gpu", "uid-gpu0")
    assert qn == "example.com/gpu=uid-gpu0"
    assert parse_qualified_name(qn) == ("example.com", "gpu", "uid-gpu0")
    assert is_qualified_name(qn)


@pytest.mark.parametrize(
    "device",
    [
        "",
        "/dev/null",  # a host path, not a CDI name
        "example.com/gpu",  # no '='
        "example.com=gpu0",  # no class
        "/gpu=x",
        "example.com/=x",
        "example.com/gpu=",
        "example.com/gpu=a=b",  # split at the first '=' leaves 'a=b'
        "example.com/gpu/x=a",  # class 'gpu/x'
        "e/gpu=a",  # one-character vendor
        "Example.com/gpu=a",
    ],
)
def test_parse_qualified_name_rejects(device: str) -> None:
    assert not is_qualified_name(device)
    with pytest.raises(CDINameError):
        parse_qualified_name(device)


def test_qualified_name_rejects_bad_parts() -> None:
    with pytest.raises(CDINameError):
        qualified_name("example.com", "a")
    with pytest.raises(CDINameError):
        qualified_name("example.com/gpu", "a/b")
    assert parse_kind("example.com/gpu.v1") == ("example.com", "gpu.v1")


VALID_UIDS = ["3f2a9c1e-0b7d-4c52-9a8e-1d2c3b4a5f60", "uid-1", "a", "a.b", "a" * 128]
INVALID_UIDS = [
    "",
    ".",
    "..",
    "../etc",
    "a/b",
    "/abs",
    ".hidden",
    "a\x00b",
    "a" * 129,
    "uid ",
    "-a",
    "a-",
    "a\nb",
    "a..b",  # the one claim UID rule (drakit.cdi.names.CLAIM_UID_FMT) refuses '..' anywhere
]


@pytest.mark.parametrize("uid", VALID_UIDS)
def test_valid_claim_uid(uid: str) -> None:
    assert validate_claim_uid(uid) == uid


@pytest.mark.parametrize("uid", INVALID_UIDS)
def test_invalid_claim_uid(uid: str) -> None:
    with pytest.raises(CDINameError):
        validate_claim_uid(uid)


def test_claim_device_name() -> None:
    assert claim_device_name("uid-1", "gpu0") == "uid-1-gpu0"
    with pytest.raises(CDINameError):
        claim_device_name("../x", "gpu0")
    with pytest.raises(CDINameError):
        claim_device_name("uid", "a/b")


@pytest.mark.parametrize(
    "key", ["a", "example.com/a", "a.b-c_d", "A9", "x/" + "a" * 63, "a" * 253 + "/b"]
)
def test_valid_annotation_key(key: str) -> None:
    assert annotation_key_error(key) is None


@pytest.mark.parametrize(
    "key", ["", "/a", "a/", "-a", "a-", "a" * 64, "Ex.com/a", "a b", "x/y/z", "a" * 254 + "/b"]
)
def test_invalid_annotation_key(key: str) -> None:
    assert annotation_key_error(key)


def test_annotations_total_size_limit() -> None:
    assert annotations_errors({"a": "x" * (256 * 1024 - 1)}) == []
    errs = annotations_errors({"a": "x" * (256 * 1024)})
    assert len(errs) == 1 and "262145 bytes" in errs[0][1]

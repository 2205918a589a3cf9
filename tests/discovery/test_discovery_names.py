"""dns_label / dns_labels / qualified_name: validity, uniqueness, determinism."""

from __future__ import annotations

import itertools
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from drakit.discovery.names import (
    NUMA_NODE,
    PCI_BUS_ID,
    PCIE_ROOT,
    dns_label,
    dns_labels,
    is_dns_label,
    is_qualified_name,
    qualified_name,
)


def test_valid_names_are_kept() -> None:
    for name in ("eth0", "ens1f0", "gpu-0", "a", "0", "x" * 63):
        assert dns_label(name) == name


@pytest.mark.parametrize("name", ["eth0.100", "eth0_100", "ETH1", "Wi-Fi", "-eth", "eth-",
                                  "", "___", "x" * 64, "enp0s31f6.v" + "9" * 80, "é", "a b"])
def test_invalid_names_map_to_labels(name: str) -> None:
    label = dns_label(name)
    assert is_dns_label(label), (name, label)
    assert label != name


def test_collisions_map_to_distinct_names() -> None:
    pairs = [("eth0.100", "eth0_100"), ("ETH1", "eth1"), ("Eth1", "ETH1"),
             ("eth0.100", "eth0-100"), ("x" * 70 + "a", "x" * 70 + "b")]
    for a, b in pairs:
        assert dns_label(a) != dns_label(b), (a, b)
    assert dns_label("eth1") == "eth1"
    assert dns_label("ETH1").startswith("eth1-")
    assert dns_label("eth0.100").startswith("eth0-100-")


def test_independent_of_enumeration_order() -> None:
    names = ["eth0.100", "eth0_100", "ETH1", "eth1", "eth0-100", "Bond0", "bond0"]
    expected = dns_labels(names)
    assert len(set(expected.values())) == len(names)
    for perm in itertools.islice(itertools.permutations(names), 200):
        assert dns_labels(perm) == expected
    # and removing others never renames one
    for k in range(1, len(names)):
        subset = random.Random(k).sample(names, k)
        got = dns_labels(subset)
        assert all(got[n] == expected[n] for n in subset)


def test_batch_resolves_forced_collision() -> None:
    # a valid name that equals another's hashed form keeps its name; the other moves
    hashed = dns_label("ETH1")
    out = dns_labels(["ETH1", hashed])
    assert out[hashed] == hashed
    assert out["ETH1"] != hashed and is_dns_label(out["ETH1"])
    assert dns_labels([hashed, "ETH1"]) == out


def test_existing_is_avoided() -> None:
    first = dns_label("ETH1")
    second = dns_label("ETH1", existing={first})
    assert second != first and is_dns_label(second)


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=120))
def test_any_text_gives_a_label(name: str) -> None:
    label = dns_label(name)
    assert is_dns_label(label)
    assert dns_label(name) == label


@settings(max_examples=100, deadline=None)
@given(st.lists(st.text(alphabet="abcAB._-01", max_size=6), max_size=12, unique=True))
def test_batch_always_unique(names: list[str]) -> None:
    out = dns_labels(names)
    assert len(set(out.values())) == len(names)
    assert all(is_dns_label(v) for v in out.values())


def test_standard_attribute_names() -> None:
    assert PCIE_ROOT == "resource.kubernetes.io/pcieRoot"
    assert PCI_BUS_ID == "resource.kubernetes.io/pciBusID"
    for key in (PCIE_ROOT, PCI_BUS_ID, NUMA_NODE):
        assert is_qualified_name(key)


@pytest.mark.parametrize(("key", "expected"), [
    ("model", "model"),
    ("vendor.example.com/model", "vendor.example.com/model"),
    ("driver-version", "driver_version"),
    ("1stPort", "_1stPort"),
    ("Vendor.Example.COM/model", "Vendor.Example.COM/model"),  # domain checked lower-cased
    ("bad_domain!/x.y", "bad-domain/x_y"),
    ("/x", "x"),
])
def test_qualified_name(key: str, expected: str) -> None:
    assert qualified_name(key) == expected
    assert is_qualified_name(qualified_name(key))


def test_qualified_name_long_identifier_and_domain() -> None:
    a, b = "a" * 40 + "1", "a" * 40 + "2"
    qa, qb = qualified_name(a), qualified_name(b)
    assert qa != qb and len(qa) <= 32 and is_qualified_name(qa)
    long_domain = ".".join(["sub"] * 30) + "/k"
    q = qualified_name(long_domain)
    assert is_qualified_name(q)
    assert qualified_name("k", domain="gpu.example.com") == "gpu.example.com/k"


def test_is_qualified_name_rejects() -> None:
    for bad in ("", "a/b/c", "/x", "x/", "1a", "a" * 33, "dom ain/x", ("d" * 64) + "/x"):
        assert not is_qualified_name(bad), bad

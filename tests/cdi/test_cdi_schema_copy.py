"""The CDI JSON schema the tests check specs against is carried in the repository
(tests/data/cdi-schema: the CDI project's schema/schema.json and schema/defs.json, Apache-2.0,
with its LICENSE and PROVENANCE.md), so a clone alone runs the schema checks. It is the
schema that validates the CDI project's own good and bad examples, byte for byte the files
PROVENANCE.md names (their sha256 there): an edit of the copy fails here."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

SCHEMA_DIR = Path(__file__).resolve().parents[1] / "data" / "cdi-schema"

FILES = ("schema.json", "defs.json", "LICENSE", "testdata/good/minimal.json",
         "testdata/good/spec-example.json", "testdata/bad/empty.json",
         "testdata/bad/explicit-empty.json")


def test_the_repository_carries_the_schema_with_its_licence_and_provenance() -> None:
    for name in (*FILES, "PROVENANCE.md"):
        assert (SCHEMA_DIR / name).is_file(), name
    assert "Apache License" in (SCHEMA_DIR / "LICENSE").read_text()
    assert "container-device-interface" in (SCHEMA_DIR / "PROVENANCE.md").read_text()


@pytest.mark.parametrize("name", ["minimal.json", "spec-example.json"])
def test_the_upstream_good_examples_pass(name: str,
                                          schema_errors: Callable[[Any], list[str]]) -> None:
    doc = json.loads((SCHEMA_DIR / "testdata" / "good" / name).read_text())
    assert schema_errors(doc) == []


def test_the_upstream_bad_examples_fail(schema_errors: Callable[[Any], list[str]]) -> None:
    assert (SCHEMA_DIR / "testdata" / "bad" / "empty.json").read_bytes() == b""
    doc = json.loads((SCHEMA_DIR / "testdata" / "bad" / "explicit-empty.json").read_text())
    assert len(schema_errors(doc)) == 3  # cdiVersion, kind, devices are required


def _recorded_checksums() -> dict[str, str]:
    text = (SCHEMA_DIR / "PROVENANCE.md").read_text()
    return dict(re.findall(r"^\| `([^`]+)` \| `([0-9a-f]{64})` \|$", text, re.M))


def test_provenance_records_a_checksum_of_every_copied_file() -> None:
    assert sorted(_recorded_checksums()) == sorted(FILES)


@pytest.mark.parametrize("name", FILES)
def test_the_copy_is_the_bytes_provenance_records(name: str) -> None:
    digest = hashlib.sha256((SCHEMA_DIR / name).read_bytes()).hexdigest()
    assert digest == _recorded_checksums()[name], f"{name} differs from the copied upstream file"


def test_the_schema_dir_is_in_the_repository() -> None:
    repo = Path(__file__).resolve().parents[2]
    assert SCHEMA_DIR.resolve().is_relative_to(repo)

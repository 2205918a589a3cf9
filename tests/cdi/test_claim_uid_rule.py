"""One claim UID rule: the kubelet-facing check (drakit.plugin.names) and the CDI store's check
(drakit.cdi.names) are the same rule, tested with the vectors where two separate checks could
disagree."""

from __future__ import annotations

import uuid

import pytest

from drakit.cdi.errors import CDINameError
from drakit.cdi.names import CLAIM_UID_MAX_LENGTH, claim_uid_error, validate_claim_uid
from drakit.plugin.names import InvalidNameError, check_claim_uid

ISSUED = str(uuid.uuid4())  # what the API server sets as metadata.uid and the kubelet passes

ACCEPTED = [ISSUED, ISSUED.upper(), "c5e0a4d2-8b1f-4e3a-9c7d-2f6b8a1e0d93", "uid-1", "u",
            "a.b", "A_1", "x" * CLAIM_UID_MAX_LENGTH]
REFUSED = [
    "abc-",   # drakit.plugin.names accepted it (UID regex allowed a trailing '-'); cdi refused it
    "a..b",
           # drakit.cdi.names accepted it ('..' inside a component); drakit.plugin.names refused it
    "a_",     # trailing '_' (drakit.plugin.names accepted it)
    "a.",     # trailing '.' (drakit.plugin.names accepted it)
    "..", ".hidden", "-a", "_a", "a/b", "/abs", "a\x00b", "a\nb", "uid ", "",
    "x" * (CLAIM_UID_MAX_LENGTH + 1), "é",
]


def _kubelet_side(uid: str) -> bool:
    try:
        check_claim_uid(uid)
    except InvalidNameError:
        return False
    return True


def _cdi_side(uid: str) -> bool:
    try:
        validate_claim_uid(uid)
    except CDINameError:
        return False
    return True


@pytest.mark.parametrize("uid", ACCEPTED)
def test_accepted_by_both(uid: str) -> None:
    assert claim_uid_error(uid) is None
    assert _kubelet_side(uid) and _cdi_side(uid)


@pytest.mark.parametrize("uid", REFUSED)
def test_refused_by_both(uid: str) -> None:
    assert claim_uid_error(uid)
    assert (_kubelet_side(uid), _cdi_side(uid)) == (False, False)


def test_the_kubelet_side_error_names_the_field() -> None:
    with pytest.raises(InvalidNameError, match=r"^claim\.uid: Invalid value: 'abc-': "):
        check_claim_uid("abc-")
    with pytest.raises(InvalidNameError, match=r"^claims\[3\]\.uid: Invalid value: 'a\.\.b'"):
        check_claim_uid("a..b", "claims[3].uid")

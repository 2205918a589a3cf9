"""Differential test: one recorded sequence of requests
(tests/apiserver/parity.py) sent to the embedded API server and to a real kube-apiserver
1.37.2 (with etcd, every resource.k8s.io version and the DRA gates, alpha ones on); every
step must get the same status code and reason from both, the same field errors (path and
cause type) on a 422, and the same observation of the answer (defaults, dropped fields,
selected names, watch events, OpenAPI).

The sequence reaches every resource the embedded server serves with every verb and patch
type, every status subresource with every patch type, and every write as a dry run
(tests/apiserver/test_apiserver_parity.py checks that); besides: apply that creates, PUT
of a missing object, delete preconditions, watches replayed from a resourceVersion (also
through ``/watch/<plural>/<name>``), pagination with ``continue``, lists across namespaces,
``metadata.generation``, what a status write and an object write may not change, and
Pod update rules.
Differences kept on purpose are listed in :data:`KEPT_DIFFERENCES` with why (none: the
embedded server is laxer on no rule the sequence checks); a listed difference that
disappears fails the test too (so the list stays true).

Needs the real binaries (scripts/build-k8s.sh): skipped without them, failed under CI=true.
"""

from __future__ import annotations

import re
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

from drakit.plugin.testing.apiserver import EmbeddedAPIServer
from drakit.plugin.testing.apiserver.fixtures import (  # noqa: F401 - fixtures
    embedded_apiserver,
    embedded_apiserver_factory,
)
from drakit.plugin.testing.real.controlplane import RealAPIServer

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "apiserver"))
from parity import NAMESPACE, SLICES, Answer, Client, Step, run, sequence

KEPT_DIFFERENCES: dict[str, str] = {
    # step name -> why the embedded server answers differently on purpose
}
"""Steps where the embedded server's answer differs from kube-apiserver's on purpose."""

MESSAGE_DIFFERENCES: dict[str, str] = {
    # step name -> why the messages differ (code, reason and causes still must match)
    "pods: update that changes a container's name": "kube-apiserver appends a diff of the "
    "two pod specs (its Go structs, defaulted) to the Forbidden message",
    "pods: update that adds a volume": "the same diff",
}


@pytest.fixture
def both(real_apiserver: RealAPIServer,
         embedded_apiserver: EmbeddedAPIServer,  # noqa: F811
         ) -> tuple[Client, Client]:
    # Pod admission needs the namespace's ServiceAccount (kube-controller-manager, which
    # makes it, does not run here); the embedded server serves no serviceaccounts.
    if real_apiserver.get_object("serviceaccounts", "default", NAMESPACE) is None:
        real_apiserver.create_object("serviceaccounts", {
            "apiVersion": "v1", "kind": "ServiceAccount",
            "metadata": {"name": "default", "namespace": NAMESPACE}}, NAMESPACE)
    real = Client(real_apiserver.url, real_apiserver.admin_token, str(real_apiserver.ca_file))
    embedded = Client(embedded_apiserver.url, embedded_apiserver.token)
    return real, embedded


_UID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def _messages(answer: Answer) -> list[str]:
    """Cause messages with uids replaced (each server makes its own)."""
    return sorted(_UID.sub("<uid>", m) for m in answer.cause_messages)


def _key(answer: Answer, observed: Any) -> tuple[Any, ...]:
    return (answer.code, answer.reason, answer.causes, observed)


def test_same_answers_from_both_servers(both: tuple[Client, Client]) -> None:
    real, embedded = both
    prefix = f"d{uuid.uuid4().hex[:6]}"
    real_results = run(real, prefix)
    embedded_results = run(embedded, prefix)
    differences: list[str] = []
    kept_seen: set[str] = set()
    for (step, r, r_obs), (_, e, e_obs) in zip(real_results, embedded_results, strict=True):
        same = _key(r, r_obs) == _key(e, e_obs)
        if step.name in KEPT_DIFFERENCES:
            kept_seen.add(step.name)
            if same:
                differences.append(f"{step.name}: listed as a kept difference but both "
                                   "servers now agree; remove it from KEPT_DIFFERENCES")
            continue
        if (r.code, r.reason) != step.expect:
            differences.append(f"{step.name}: the real server answered {r.code} {r.reason} "
                               f"({r.message[:200]}), the recording says {step.expect}")
        if not same:
            differences.append(
                f"{step.name}:\n  real:     {r.code} {r.reason} {r.causes} {r_obs!r} "
                f"{r.message[:400]}\n  embedded: {e.code} {e.reason} {e.causes} {e_obs!r} "
                f"{e.message[:400]}")
        elif r.code >= 400 and step.name not in MESSAGE_DIFFERENCES \
                and _messages(r) != _messages(e):
            differences.append(f"{step.name}: cause messages differ:\n  real:     "
                               f"{r.cause_messages}\n  embedded: {e.cause_messages}")
    assert kept_seen == set(KEPT_DIFFERENCES), "a kept difference names no step"
    assert not differences, "\n".join(differences)


def test_protobuf_writes(both: tuple[Client, Client]) -> None:
    """Kept difference: kube-apiserver decodes protobuf bodies (client-go v0.37's default
    for built-in types); the embedded server speaks JSON only and answers 415 naming the
    JSON and YAML media types, so a client falls back to (or is configured for) JSON
    instead of failing on a 500. Here: bytes that are no valid protobuf object."""
    real, embedded = both
    body = b"k8s\x00\n\x1a\n\x13resource.k8s.io/v1\x12\rResourceSlice\x12\xff\xfe"
    step = Step("protobuf", "POST", SLICES, body,
                content_type="application/vnd.kubernetes.protobuf")
    r = real.send(step.method, step.path, step.body, content_type=step.content_type)
    e = embedded.send(step.method, step.path, step.body, content_type=step.content_type)
    assert r.code == 400 and r.reason == "BadRequest", (r.code, r.reason, r.message)
    assert (e.code, e.reason) == (415, "UnsupportedMediaType")
    assert "application/json" in e.message


def test_client_side_rules_match_the_real_server(real_apiserver: RealAPIServer) -> None:
    """drakit's own validator (drakit.plugin.slices.rules, what the publisher checks before it
    sends) gives the real server's field errors, word for word, for every ResourceSlice
    the recorded sequence expects to be refused with 422."""
    from drakit.plugin.slices import rules

    real = Client(real_apiserver.url, real_apiserver.admin_token, str(real_apiserver.ca_file))
    prefix = f"r{uuid.uuid4().hex[:6]}"
    checked = 0
    mismatches = []
    for item in sequence(prefix, {}):
        if callable(item):      # the steps built from earlier answers are no slice writes
            continue
        step = item
        if step.expect != (422, "Invalid") or step.method != "POST" or step.path != SLICES:
            continue
        answer = real.send(step.method, step.path, step.body)
        assert (answer.code, answer.reason) == (422, "Invalid"), (step.name, answer.message)
        ours = sorted(str(e) for e in rules.validate_slice(step.body))
        if ours != answer.cause_messages:
            mismatches.append(f"{step.name}:\n  real:  {answer.cause_messages}\n  rules: {ours}")
        checked += 1
    assert checked >= 10
    assert not mismatches, "\n".join(mismatches)

"""The Pod update rules of kube-apiserver 1.37 (``ValidatePodUpdate``,
k8s.io/kubernetes pkg/apis/core/validation) that the embedded API server applies to a PUT,
patch or apply of a pod (not of its ``status``): a pod's spec is immutable but for

* ``spec.containers[*].image`` and ``spec.initContainers[*].image``,
* ``spec.activeDeadlineSeconds`` (set, or lowered; never unset once positive),
* ``spec.tolerations`` (additions only),
* ``spec.terminationGracePeriodSeconds`` (to 1 from a negative value).

The embedded server stores pods as given (no defaulting), so the specs compared are the ones
its clients wrote. The Forbidden message names the mutable fields as kube-apiserver's does;
kube-apiserver adds a diff of the two specs, which is left out here.
"""

from __future__ import annotations

import json
from typing import Any

from drakit.plugin.testing.apiserver import errors as errors

__all__ = ["validate_pod_update"]

MUTABLE_FIELDS_MESSAGE = (
    "pod updates may not change fields other than `spec.containers[*].image`,"
    "`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` "
    "(only additions to existing tolerations),`spec.terminationGracePeriodSeconds` "
    "(allow it to be set to 1 if it was previously negative)")


def _deadline_causes(old: Any, new: Any) -> list[errors.Cause]:
    path = "spec.activeDeadlineSeconds"
    if not isinstance(old, int) or old <= 0:
        return []
    if new is None:
        return [errors.invalid(path, None,
                               "must not update from a positive integer to nil value")]
    if isinstance(new, int) and new > old:
        return [errors.invalid(path, new, "must be less than or equal to previous value")]
    return []


def _comparable(spec: dict[str, Any], old: dict[str, Any]) -> dict[str, Any]:
    """``spec`` with what an update may change set to ``old``'s values."""
    out = json.loads(json.dumps(spec))
    for key in ("containers", "initContainers"):
        mine, theirs = out.get(key), old.get(key)
        if isinstance(mine, list) and isinstance(theirs, list) and len(mine) == len(theirs):
            for c, o in zip(mine, theirs, strict=True):
                if isinstance(c, dict) and isinstance(o, dict):
                    if "image" in o:
                        c["image"] = o["image"]
                    else:
                        c.pop("image", None)
    if "activeDeadlineSeconds" in old:  # its own rules: _deadline_causes
        out["activeDeadlineSeconds"] = old["activeDeadlineSeconds"]
    else:
        out.pop("activeDeadlineSeconds", None)
    old_tolerations = old.get("tolerations") or []
    new_tolerations = out.get("tolerations") or []
    if all(t in new_tolerations for t in old_tolerations):
        if old_tolerations:
            out["tolerations"] = old_tolerations
        else:
            out.pop("tolerations", None)
    grace_old, grace_new = old.get("terminationGracePeriodSeconds"), out.get(
        "terminationGracePeriodSeconds")
    if isinstance(grace_old, int) and grace_old < 0 and grace_new == 1:
        out["terminationGracePeriodSeconds"] = grace_old
    return out


def validate_pod_update(new: dict[str, Any], old: dict[str, Any]) -> list[errors.Cause]:
    """The field errors of updating pod ``old`` to ``new`` (both stored shapes)."""
    new_spec = new.get("spec") or {}
    old_spec = old.get("spec") or {}
    causes = _deadline_causes(old_spec.get("activeDeadlineSeconds"),
                              new_spec.get("activeDeadlineSeconds"))
    if _comparable(new_spec, old_spec) != old_spec:
        causes.append(errors.forbidden("spec", MUTABLE_FIELDS_MESSAGE))
    return causes

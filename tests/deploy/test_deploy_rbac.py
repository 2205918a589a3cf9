"""The ClusterRole grants exactly the API calls the node agent makes; the binding names its
service account; the admission policy confines ResourceSlice writes to the caller's node
and driver (evaluated with a CEL interpreter on sample admission requests)."""

from __future__ import annotations

from typing import Any

import pytest
from deploy_helpers import (
    DRIVER_NAME,
    NAMESPACE,
    SERVICE_ACCOUNT,
    cel_program,
    evaluate_policy,
    one,
    render_base,
)
from rbac_coverage import granted_triples

# (API group, resource, verb): what the code calls (the example ClusterRole of the
# Kubernetes documentation, "Good practices for Dynamic Resource Allocation"; the
# status writer uses server-side apply only, so resourceclaims/status is patch only).
EXPECTED = {
    ("resource.k8s.io", "resourceslices", "list"),
    ("resource.k8s.io", "resourceslices", "watch"),
    ("resource.k8s.io", "resourceslices", "create"),
    ("resource.k8s.io", "resourceslices", "update"),
    ("resource.k8s.io", "resourceslices", "delete"),
    ("resource.k8s.io", "resourceclaims", "get"),
    ("resource.k8s.io", "resourceclaims/status", "patch"),
    ("resource.k8s.io", "resourceclaims/driver", "associated-node:patch"),
    ("", "nodes", "get"),
    ("", "nodes", "watch"),
    ("", "pods", "list"),
}


def _role() -> dict[str, Any]:
    return one(render_base(), "ClusterRole", "drakit-kubelet-plugin")


def test_cluster_role_grants_exactly_the_expected_permissions() -> None:
    assert granted_triples(_role()["rules"]) == EXPECTED


def test_no_wildcards_and_no_escalation_verbs() -> None:
    for rule in _role()["rules"]:
        for field in ("apiGroups", "resources", "verbs"):
            assert "*" not in rule[field], f"wildcard in {field}: {rule}"
        assert not {"escalate", "bind", "impersonate"} & set(rule["verbs"])
        assert "nonResourceURLs" not in rule


def test_driver_permission_is_limited_to_our_driver_and_own_node() -> None:
    all_rules = _role()["rules"]
    rules = [r for r in all_rules if "resourceclaims/driver" in r["resources"]]
    assert len(rules) == 1
    assert rules[0]["resourceNames"] == [DRIVER_NAME]
    assert all(v.startswith("associated-node:") for v in rules[0]["verbs"])
    others = [r for r in all_rules if r is not rules[0]]
    assert all("resourceNames" not in r for r in others)


def test_binding_grants_the_role_to_the_daemonset_service_account() -> None:
    docs = render_base()
    binding = one(docs, "ClusterRoleBinding")
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io",
                                  "kind": "ClusterRole", "name": "drakit-kubelet-plugin"}
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": SERVICE_ACCOUNT,
                                    "namespace": NAMESPACE}]
    ds = one(docs, "DaemonSet")
    assert ds["spec"]["template"]["spec"]["serviceAccountName"] == SERVICE_ACCOUNT
    assert not [d for d in docs if d["kind"] in ("Role", "RoleBinding")]


# -- ValidatingAdmissionPolicy ---------------------------------------------------------------

USER = f"system:serviceaccount:{NAMESPACE}:{SERVICE_ACCOUNT}"
NODE_KEY = "authentication.kubernetes.io/node-name"


def _slice(node: str | None, driver: str = DRIVER_NAME) -> dict[str, Any]:
    spec: dict[str, Any] = {"driver": driver, "pool": {"name": "p", "generation": 1,
                                                       "resourceSliceCount": 1}}
    if node is None:
        spec["allNodes"] = True
    else:
        spec["nodeName"] = node
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
            "metadata": {"name": "s"}, "spec": spec}


def _request(operation: str, node: str | None = "node-a", user: str = USER) -> dict[str, Any]:
    user_info: dict[str, Any] = {"username": user, "groups": ["system:serviceaccounts"]}
    if node is not None:
        user_info["extra"] = {NODE_KEY: [node],
                              "authentication.kubernetes.io/pod-name": ["drakit-x"]}
    return {"operation": operation, "userInfo": user_info}


def _admit(operation: str, new: Any = None, old: Any = None, **kw: Any) -> tuple[bool, list[str]]:
    policy = one(render_base(), "ValidatingAdmissionPolicy")
    return evaluate_policy(policy, _request(operation, **kw), new, old)


def test_policy_binding_denies_and_names_the_policy() -> None:
    docs = render_base()
    policy = one(docs, "ValidatingAdmissionPolicy")
    binding = one(docs, "ValidatingAdmissionPolicyBinding")
    assert binding["spec"]["policyName"] == policy["metadata"]["name"]
    assert binding["spec"]["validationActions"] == ["Deny"]
    assert policy["spec"]["failurePolicy"] == "Fail"
    rules = policy["spec"]["matchConstraints"]["resourceRules"]
    assert rules == [{"apiGroups": ["resource.k8s.io"], "apiVersions": ["*"],
                      "operations": ["CREATE", "UPDATE", "DELETE"],
                      "resources": ["resourceslices"]}]


def test_every_policy_expression_compiles() -> None:
    spec = one(render_base(), "ValidatingAdmissionPolicy")["spec"]
    expressions = [c["expression"] for c in spec["matchConditions"]]
    expressions += [v["expression"] for v in spec["variables"]]
    for v in spec["validations"]:
        expressions.append(v["expression"])
        if "messageExpression" in v:
            expressions.append(v["messageExpression"])
    for e in expressions:
        cel_program(e)


@pytest.mark.parametrize(("operation", "new", "old"), [
    ("CREATE", _slice("node-a"), None),
    ("UPDATE", _slice("node-a"), _slice("node-a")),
    ("DELETE", None, _slice("node-a")),
])
def test_policy_admits_own_node_slices(operation: str, new: Any, old: Any) -> None:
    assert _admit(operation, new, old) == (True, [])


@pytest.mark.parametrize(("operation", "new", "old"), [
    ("CREATE", _slice("node-b"), None),
    ("UPDATE", _slice("node-b"), _slice("node-b")),
    ("UPDATE", _slice("node-a"), _slice("node-b")),  # taking over another node's slice
    ("UPDATE", _slice("node-b"), _slice("node-a")),  # moving one's own slice away
    ("DELETE", None, _slice("node-b")),
    ("CREATE", _slice(None), None),                  # allNodes: no spec.nodeName
])
def test_policy_denies_other_nodes_slices(operation: str, new: Any, old: Any) -> None:
    applies, failed = _admit(operation, new, old)
    assert applies
    assert len(failed) == 1
    assert "may write only ResourceSlices with spec.nodeName node-a" in failed[0]


def test_policy_denies_another_drivers_slices() -> None:
    applies, failed = _admit("CREATE", _slice("node-a", driver="gpu.other.example"))
    assert applies and failed == [f"the drakit node agent may write only ResourceSlices of "
                                  f"driver {DRIVER_NAME}"]
    applies, failed = _admit("DELETE", None, _slice("node-a", driver="gpu.other.example"))
    assert applies and len(failed) == 1


def test_policy_denies_a_token_without_node() -> None:
    applies, failed = _admit("CREATE", _slice("node-a"), node=None)
    assert applies
    assert any("names no node" in f for f in failed)


def test_policy_ignores_other_users() -> None:
    assert _admit("CREATE", _slice("node-b"), user="kubernetes-admin") == (False, [])
    assert _admit("DELETE", None, _slice("node-b"),
                  user="system:serviceaccount:other:drakit-kubelet-plugin") == (False, [])

"""drakit demo (what `make run` runs): the whole DRA flow on this machine's real devices.

Starts the embedded API server, runs ``drakit run`` as a real child process with the ``net``
and ``pci`` discoverers (``--discovery``, with options from ``--config``) on this machine's
/sys, registers it with the fake kubelet, shows the
devices and ResourceSlices, allocates a ResourceClaim to one real device, prepares it (CDI
device IDs, the CDI spec file, the claim's AllocatedDeviceStatus), unprepares it (spec and
status gone) and stops the agent (sockets gone). Everything lives in a temporary directory.
Exit status 0 means every step did what it should.
"""

from __future__ import annotations

import argparse
import json
import re
import socket
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from drakit.plugin.ops.config import read_config_file
from drakit.plugin.testing.harness import DriverHarness


def _say(title: str) -> None:
    print(f"\n== {title}", flush=True)


def _node_name() -> str:
    name = re.sub(r"[^a-z0-9.-]", "-", socket.gethostname().lower()).strip("-.")
    return name or "demo-node"


def _pick_device(slices: list[dict[str, Any]]) -> tuple[str, dict[str, Any]]:
    """Prefer a real, non-virtual network interface with an address; then any net device;
    then any device."""
    devices = [(s["spec"]["pool"]["name"], d) for s in slices for d in s["spec"].get("devices", [])]

    def attr(d: dict[str, Any], key: str) -> Any:
        a = d.get("attributes", {}).get(key) or {}
        return next(iter(a.values()), None)

    ranked = sorted(
        devices,
        key=lambda pd: (
            attr(pd[1], "interfaceName") is None,
            attr(pd[1], "virtual") is True,
            attr(pd[1], "interfaceName") != "eth0",
        ),
    )
    if not ranked:
        raise RuntimeError("no devices were published")
    return ranked[0]


def _fmt_device(d: dict[str, Any]) -> str:
    """A published device on one line: its attributes, then its capacity and
    ``allowMultipleAllocations`` where it has them."""
    parts = []
    for k, v in sorted(d.get("attributes", {}).items()):
        val = next(iter(v.values()), None)
        parts.append(f"{k.rsplit('/', 1)[-1]}={val}")
    line = ", ".join(parts)
    capacity = [f"{k.rsplit('/', 1)[-1]}={v.get('value')}"
                for k, v in sorted(d.get("capacity", {}).items())]
    if capacity:
        line += "; capacity " + ", ".join(capacity)
    if d.get("allowMultipleAllocations"):
        line += "; allowMultipleAllocations"
    return line


def demo_main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="drakit demo", description=__doc__, allow_abbrev=False)
    parser.add_argument("--discovery", default="net,pci")
    parser.add_argument("--config", help="a --config YAML file for the agent (its "
                        "'discovery' map: per-plugin options, e.g. hostdev rules)")
    parser.add_argument("--driver-name", default="drakit.example.com")
    parser.add_argument("--keep", action="store_true", help="keep the temporary directory")
    ns = parser.parse_args(argv)
    try:
        options = read_config_file(ns.config) if ns.config else {}
    except ValueError as e:
        parser.error(str(e))
    root = Path(tempfile.mkdtemp(prefix="drakit-demo-"))
    node = _node_name()
    print(f"drakit demo: driver {ns.driver_name}, node {node}, working in {root}")
    h = DriverHarness(
        root,
        driver_name=ns.driver_name,
        node_name=node,
        discovery=ns.discovery.split(","),
        plugin_options=options,
        subprocess=True,
    )
    ok = False
    started = time.monotonic()
    try:
        _say("1. embedded API server, fake kubelet, `drakit run` (child process)")
        h.start(wait=30)
        reg = h.kubelet.registered_plugins(ns.driver_name)[-1]
        print(
            f"registered with the fake kubelet: driver {reg.driver_name}, endpoint {reg.endpoint}"
        )
        print(
            f"  advertised versions: {', '.join(reg.supported_versions)}; "
            f"kubelet uses {reg.dra_version}"
        )

        _say("2. devices discovered on this machine, published as ResourceSlices")
        slices = h.slices()
        for i, s in enumerate(slices, 1):
            spec = s["spec"]
            print(
                f"ResourceSlice {s['metadata']['name']}: pool {spec['pool']['name']} "
                f"generation {spec['pool']['generation']} "
                f"(slice {i} of {spec['pool']['resourceSliceCount']}), "
                f"{len(spec.get('devices', []))} device(s)"
            )
            for d in spec.get("devices", []):
                print(f"  - {d['name']}: {_fmt_device(d)}")

        _say("3. a ResourceClaim allocated to one real device")
        pool, device = _pick_device(slices)
        claim = h.allocate("demo-claim", [(pool, device["name"])], namespace="default")
        uid = claim["metadata"]["uid"]
        print(f"ResourceClaim default/demo-claim (uid {uid}) -> {pool}/{device['name']}")

        _say("4. NodePrepareResources (the kubelet, before the pod sandbox starts)")
        result = h.prepare(claim)[uid]
        if result.error:
            raise RuntimeError(f"prepare failed: {result.error}")
        for d in result.devices:
            print(f"device {d.pool_name}/{d.device_name} for request(s) {list(d.request_names)}")
            for cdi_id in d.cdi_device_ids:
                print(f"  CDI device ID: {cdi_id}")
        files = h.cdi_files()
        for f in files:
            print(f"CDI spec file {f}:")
            print("  " + f.read_text().strip().replace("\n", "\n  "))

        _say("5. the claim's status.devices (AllocatedDeviceStatus)")
        h.wait_for(
            lambda: bool((h.claim(claim) or {}).get("status", {}).get("devices")),
            10,
            "AllocatedDeviceStatus on the claim",
        )
        status = (h.claim(claim) or {})["status"]["devices"]
        print(json.dumps(status, indent=2))

        _say("6. NodeUnprepareResources (the pod is gone)")
        err = h.unprepare(claim)[uid]
        if err:
            raise RuntimeError(f"unprepare failed: {err}")
        left = h.cdi_files()
        print(f"CDI spec files left: {[f.name for f in left] or 'none'}")
        if left:
            raise RuntimeError("CDI spec still present after unprepare")
        h.wait_for(
            lambda: not (h.claim(claim) or {}).get("status", {}).get("devices"),
            10,
            "status.devices to be removed",
        )
        print("status.devices of our driver removed")

        _say("7. SIGTERM to the agent")
        sockets = [reg.endpoint, reg.registration_socket]
        h.stop_plugin()
        gone = [s for s in sockets if not Path(s).exists()]
        print(f"sockets removed: {len(gone)} of {len(sockets)}")
        if len(gone) != len(sockets):
            raise RuntimeError("sockets left behind")
        ok = True
    except Exception as e:
        print(f"\nFAILED: {e}", file=sys.stderr)
        if h.log_path.exists():
            print("--- drakit run log (last 40 lines) ---", file=sys.stderr)
            print("\n".join(h.log_path.read_text().splitlines()[-40:]), file=sys.stderr)
    finally:
        h.stop()
        if not ns.keep:
            import shutil

            shutil.rmtree(root, ignore_errors=True)
    print(f"\n{'OK' if ok else 'FAILED'}: demo finished in {time.monotonic() - started:.1f} s")
    return 0 if ok else 1

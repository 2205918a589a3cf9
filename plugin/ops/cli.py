"""The ``drakit`` command.

- ``drakit run …``: the node agent (until SIGTERM / SIGINT).
- ``drakit apiserver …``: the embedded API server in the foreground (tests, demos).
- ``drakit fake-kubelet …``: the fake kubelet (register plugins, call prepare/unprepare).
- ``drakit cdi list|validate …``: inspect CDI spec files.
- ``drakit cleanup --driver-name D --node-name N | --all-nodes [--dry-run]``: delete this
  driver's ResourceSlices of a node or of every node (uninstall).
- ``drakit demo``: the whole flow on this machine's real devices (what ``make run`` runs).
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from drakit.plugin.ops.app import App
    from drakit.plugin.ops.config import Settings

log = logging.getLogger("drakit")


def _run(argv: Sequence[str]) -> int:
    from drakit.plugin.ops.malloc import collector_paused, limit_malloc_arenas

    limit_malloc_arenas()  # before any thread starts; see plugin/ops/malloc.py
    with collector_paused():  # until the start-up objects are frozen; see plugin/ops/malloc.py
        started = _start(argv)
    if isinstance(started, int):
        return started
    app, stop = started
    try:
        while not stop.wait(3600):
            pass
    finally:
        app.stop()
    if app.failure:
        log.critical("drakit run stopped by a fatal error in %s", app.failure)
    stuck = app.kubelet_calls.in_flight
    hooks = app.node.hooks_running
    if stuck or hooks:
        # A discovery plugin's prepare/unprepare hook that never returns: its gRPC worker
        # thread would be joined at interpreter exit, forever (until the kubelet's SIGKILL).
        log.error("%d kubelet call(s) still running after the stop's grace period, %d claim(s) "
                  "whose prepare hooks still run%s (a discovery plugin's prepare or unprepare "
                  "hook that does not return); exiting without waiting for them", stuck,
                  len(hooks),
                  "".join(f"; {h}" for h in hooks[:3]) + ("; …" if len(hooks) > 3 else ""))
        logging.shutdown()
        sys.stderr.flush()
        os._exit(1)
    if app.failure:
        return 1
    log.info("stopped")
    return 0


def _start(argv: Sequence[str]) -> tuple[App, threading.Event] | int:
    """Parse ``argv``, load the discovery plugins and start the app; its stop event is set by
    SIGTERM, SIGINT and SIGHUP. An exit status when start-up fails."""
    from drakit.plugin.ops.config import add_run_arguments, settings_from_args
    from drakit.plugin.ops.logs import setup_logging

    parser = argparse.ArgumentParser(
        prog="drakit run",
        description="Run the DRA node agent (until SIGTERM/SIGINT). --driver-name and "
        "--node-name are required; every flag can also be set by the environment variable "
        "in brackets.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
        allow_abbrev=False,
    )
    add_run_arguments(parser)
    ns = parser.parse_args(argv)
    # everything checkable without the API first, in the order of the flags: settings,
    # files named by flags, discovery plugin names and their options; then the API
    try:
        settings = settings_from_args(ns)
    except ValueError as e:
        parser.error(str(e))
    setup_logging(settings.log_format, settings.verbosity, settings.driver_name)
    from drakit.discovery.loader import PluginLoadError, UnusedConfigSectionError
    from drakit.plugin.ops.app import App, discovery_plugins

    try:
        plugins = discovery_plugins(settings)
    except PluginLoadError as e:
        # one line naming plugin, module and exception: no usage text, no traceback
        where = "" if isinstance(e, UnusedConfigSectionError) \
            else f"--discovery {','.join(settings.discovery)}: "
        print(f"drakit run: error: {where}{e}", file=sys.stderr)
        return 2

    _log_start(settings)  # after the plugins load: a load error stays the one line
    stop = threading.Event()

    def on_signal(signum: int, _frame: object) -> None:
        log.info("received %s; shutting down", signal.Signals(signum).name)
        stop.set()

    # SIGHUP (a closed terminal, a supervisor's reload) shuts down cleanly as SIGTERM does:
    # nothing is re-read at run time, and its default action would leave the sockets behind.
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, on_signal)
    try:
        app = App(settings, plugins=plugins)
        app.on_fatal = stop.set  # a fatal error of background work stops the agent
        app.start()
        from drakit.plugin.ops.malloc import freeze_startup_objects

        frozen = freeze_startup_objects()
        log.debug("%d start-up objects moved out of the garbage collector's reach", frozen)
    except Exception as e:
        if settings.verbosity >= 4 or not isinstance(e, _expected_start_errors()):
            log.exception("start-up failed: %s", e)
        else:
            log.error("start-up failed: %s", e)
        return 1
    return app, stop


def _log_start(settings: Settings) -> None:
    """The start-up line: drakit's version and every effective setting under its flag's name
    (``kubelet-plugins-directory-path``, …); the ``--config`` file's plugin options by plugin
    name only."""
    from importlib.metadata import version

    flags = {
        "driver-name": settings.driver_name, "node-name": settings.node_name,
        "kubeconfig": settings.kubeconfig or "(in-cluster)",
        "kubelet-registrar-directory-path": str(settings.registrar_dir),
        "kubelet-plugins-directory-path": str(settings.plugins_dir),
        "cdi-root": str(settings.cdi_root), "cdi-class": settings.cdi_class,
        "cdi-version-max": settings.cdi_version_max or "(newest)",
        "discovery": ",".join(settings.discovery),
        "config": str(settings.config_file) if settings.config_file else "",
        "config-plugins": ",".join(sorted(settings.plugin_options)),
        "sysfs-root": str(settings.sysfs_root), "pod-uid": settings.pod_uid or "",
        "health": settings.health, "device-status": settings.device_status,
        "http-endpoint": settings.http_endpoint or "", "strict": settings.strict,
        "log-format": settings.log_format, "v": settings.verbosity,
        "resync-seconds": settings.resync_seconds,
        "orphan-grace-seconds": settings.orphan_grace_seconds,
        "orphan-check-seconds": settings.orphan_check_seconds,
    }
    log.info("starting drakit %s", version("drakit"),
             extra={"version": version("drakit"), "settings": flags})


def _expected_start_errors() -> tuple[type[BaseException], ...]:
    from drakit.discovery.loader import PluginLoadError
    from drakit.plugin.kubelet.sockets import SocketInUseError
    from drakit.plugin.ops.app import KubeConfigError

    return (OSError, ValueError, PluginLoadError, SocketInUseError, KubeConfigError)


def _cleanup(argv: Sequence[str]) -> int:
    from drakit.plugin.api.resourceapi import ResourceAPI
    from drakit.plugin.ops.app import kube_api_client
    from drakit.plugin.ops.cleanup import default_deadline, delete_slices, driver_slices

    parser = argparse.ArgumentParser(
        prog="drakit cleanup",
        description="Delete a driver's ResourceSlices after an uninstall: of one node "
        "(--node-name) or of every node (--all-nodes). --dry-run lists them only.",
        allow_abbrev=False,
    )
    parser.add_argument("--driver-name", default=os.environ.get("DRIVER_NAME"),
                        help="DRA driver name [DRIVER_NAME]")
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--node-name", default=os.environ.get("NODE_NAME"),
                       help="node name [NODE_NAME]")
    where.add_argument("--all-nodes", action="store_true",
                       help="every node's ResourceSlices of the driver")
    parser.add_argument("--dry-run", action="store_true",
                        help="list what would be deleted (one line per slice), delete nothing")
    parser.add_argument("--kubeconfig", default=os.environ.get("KUBECONFIG"),
                        help="kubeconfig; in-cluster config when unset [KUBECONFIG]")
    ns = parser.parse_args(argv)
    from drakit.plugin.names import InvalidNameError, check_driver_name

    if ns.all_nodes:
        ns.node_name = None
    if not ns.driver_name or not (ns.node_name or ns.all_nodes):
        parser.error("--driver-name and --node-name (or --all-nodes) are required "
                     "(or DRIVER_NAME, NODE_NAME)")
    try:
        check_driver_name(ns.driver_name, "--driver-name")
    except InvalidNameError as e:
        parser.error(str(e))
    scope = "every node" if ns.all_nodes else f"node {ns.node_name}"
    deadline = default_deadline()
    try:
        api = ResourceAPI(kube_api_client(ns.kubeconfig))
        refs = driver_slices(api, ns.driver_name, ns.node_name, deadline=deadline)
        if ns.dry_run:
            for r in refs:
                print(f"would delete ResourceSlice {r.name} (node {r.node or '-'}, "
                      f"pool {r.pool})")
            nodes = len({r.node for r in refs})
            print(f"dry run: {len(refs)} ResourceSlice(s) of driver {ns.driver_name} on "
                  f"{nodes} node(s) ({scope}); nothing deleted")
            return 0
        deleted = delete_slices(api, refs, deadline=deadline)
    except Exception as e:  # one line, no traceback: the server's answer names slice and why
        from drakit.plugin.api.resourceapi import describe

        print(f"drakit cleanup: deleting ResourceSlices of driver {ns.driver_name} on "
              f"{scope} failed: {' '.join(describe(e).split())}", file=sys.stderr)
        return 1
    print(f"deleted {deleted} ResourceSlice(s) of driver {ns.driver_name} on {scope}")
    return 0


def _closed_pipe_safe(command: Callable[[list[str]], int], args: list[str]) -> int:
    """``command(args)`` with its output flushed; when the reader of stdout is gone
    (``drakit explain … | head``), no traceback: stdout goes to /dev/null, so the
    interpreter's last flush cannot fail either, and the status is 141, as a shell reports
    a process ended by SIGPIPE."""
    try:
        status = command(args)
        sys.stdout.flush()
        return status
    except BrokenPipeError:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        return 128 + signal.SIGPIPE


def main(argv: Sequence[str] | None = None) -> int:
    """``drakit COMMAND [ARGS]`` (``argv``: the words after ``drakit``)."""
    return _closed_pipe_safe(_main, list(sys.argv[1:] if argv is None else argv))


def _main(args: list[str]) -> int:
    commands = {
        "run": "run the DRA node agent",
        "apiserver": "run the embedded API server (tests, demos)",
        "fake-kubelet": "run the fake kubelet",
        "cdi": "list or validate CDI spec files",
        "cleanup": "delete a driver's ResourceSlices of a node or of all nodes",
        "explain": "why a pod is pending or a ResourceClaim cannot be allocated",
        "demo": "the whole flow on this machine's devices (make run)",
    }
    if args and args[0] == "--version":
        from importlib.metadata import version

        print(f"drakit {version('drakit')}")
        return 0
    if args and args[0] not in commands and args[0] not in ("-h", "--help"):
        print(f"drakit: unknown command {args[0]!r}\n", file=sys.stderr)
    if not args or args[0] in ("-h", "--help") or args[0] not in commands:
        width = max(len(c) for c in commands)
        print("usage: drakit COMMAND [ARGS]\n\ncommands:")
        for c, h in commands.items():
            print(f"  {c:<{width}}  {h}")
        return 0 if args and args[0] in ("-h", "--help") else 2
    cmd, rest = args[0], args[1:]
    if cmd == "run":
        return _run(rest)
    if cmd == "apiserver":
        from drakit.plugin.testing.apiserver import apiserver_main

        return apiserver_main(rest)
    if cmd == "fake-kubelet":
        from drakit.plugin.testing.kubelet.cli import fake_kubelet_main

        return fake_kubelet_main(rest)
    if cmd == "cdi":
        from drakit.cdi.cli import cdi_main

        return cdi_main(rest)
    if cmd == "cleanup":
        return _cleanup(rest)
    if cmd == "explain":
        from drakit.plugin.ops.explain import explain_main

        return explain_main(rest)
    from drakit.plugin.ops.demo import demo_main

    return demo_main(rest)


def kubectl_main(argv: Sequence[str] | None = None) -> int:
    """``kubectl drakit``: the same package's kubectl plugin, the executable
    ``kubectl-drakit`` that kubectl finds on PATH (kubectl passes the words after ``drakit``
    and the environment, ``KUBECONFIG`` included). Its command is ``explain``, as
    ``drakit explain``."""
    return _closed_pipe_safe(_kubectl_main, list(sys.argv[1:] if argv is None else argv))


def _kubectl_main(args: list[str]) -> int:
    if args and args[0] == "explain":
        from drakit.plugin.ops.explain import explain_main

        return explain_main(args[1:], prog="kubectl drakit explain")
    if args and args[0] not in ("-h", "--help"):
        print(f"kubectl drakit: unknown command {args[0]!r}\n", file=sys.stderr)
    print("usage: kubectl drakit explain [ARGS]\n\ncommands:\n  explain  why a pod is pending "
          "or a ResourceClaim cannot be allocated (kubectl drakit explain --help)")
    return 0 if args and args[0] in ("-h", "--help") else 2


if __name__ == "__main__":
    sys.exit(main())

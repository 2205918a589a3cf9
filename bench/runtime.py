"""The interpreter the bench runs ``drakit run`` on: a virtualenv with drakit (editable, this
checkout) and only its runtime dependencies, at the versions the dev venv holds. That is what
an image runs (deploy/image/install.sh installs the wheel without extras).

Why not the dev venv: what is installed changes what the agent loads. ``kubernetes.dynamic``
(imported by ``import kubernetes``) imports ``kubernetes_validate`` whenever it is installed,
and that dev dependency (the embedded API server's schema checks) pulls in jsonschema,
referencing and rpds: ~3 MB of RSS in every agent measured, which no deployed agent has.

Built once per pyproject.toml and dev-venv pins into ``.venv-bench`` in the checkout
(gitignored, removed by ``make clean``); ~20 s with a warm pip cache, more on a cold one. When
it cannot be built (no package index), the agents run on the bench's own interpreter and
:func:`runtime_python` says so in its note.
"""

from __future__ import annotations

import functools
import hashlib
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
VENV = REPO / ".venv-bench"
#: Seconds the venv's build may take (pip downloads on a cold cache).
BUILD_TIMEOUT = 600.0
#: Modules of the dev extras that must not be importable in the runtime venv.
DEV_ONLY = ("kubernetes_validate", "jsonschema", "pytest")


def _pins() -> str:
    """``pip freeze`` of the bench's own environment as constraints: without editable
    installs (drakit) and without direct references (``name @ url``, which pip refuses as
    constraints)."""
    out = subprocess.run([sys.executable, "-m", "pip", "freeze", "--exclude-editable"],
                         capture_output=True, text=True, check=True, timeout=120).stdout
    return "".join(line + "\n" for line in out.splitlines() if " @ " not in line)


def _build(pins: str, stamp: Path) -> None:
    shutil.rmtree(VENV, ignore_errors=True)
    subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True, timeout=120)
    with tempfile.NamedTemporaryFile("w", suffix=".txt", prefix="bench-pins-") as f:
        f.write(pins)
        f.flush()
        subprocess.run([str(VENV / "bin" / "python"), "-m", "pip", "install", "-q",
                        "--disable-pip-version-check", "-c", f.name, "-e", str(REPO)],
                       check=True, capture_output=True, text=True, timeout=BUILD_TIMEOUT)
    stamp.touch()


@functools.cache
def runtime_python() -> tuple[str, str]:
    """(path of the interpreter to run agents with, note); the note is "" when it is the
    runtime venv, else it says why the bench's own interpreter (dev extras) is used."""
    try:
        pins = _pins()
        key = hashlib.sha1((REPO / "pyproject.toml").read_bytes() + pins.encode()).hexdigest()
        stamp = VENV / f".installed-{key[:12]}"
        python = VENV / "bin" / "python"
        if not (stamp.exists() and python.exists()):
            print(f"[bench] building the runtime venv {VENV} (drakit's runtime dependencies "
                  "only, the dev venv's versions) ...", file=sys.stderr, flush=True)
            _build(pins, stamp)
        check = ("import importlib.util as u, sys; "
                 f"sys.exit(','.join(m for m in {DEV_ONLY!r} if u.find_spec(m)) or None)")
        leaked = subprocess.run([str(python), "-c", check], capture_output=True, text=True,
                                timeout=60)
        if leaked.returncode != 0:
            return sys.executable, (f"the runtime venv {VENV} has dev packages "
                                    f"({leaked.stderr.strip()}): agents ran on {sys.executable}")
        return str(python), ""
    except (OSError, subprocess.SubprocessError) as e:
        detail = getattr(e, "stderr", None) or str(e)
        tail = " | ".join(str(detail).strip().splitlines()[-2:])
        return sys.executable, (f"the runtime venv {VENV} could not be built ({tail}): agents "
                                f"ran on {sys.executable}, with the dev extras installed")

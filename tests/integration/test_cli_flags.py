"""Every ``drakit`` command takes its flags spelled out, as the Go drivers' flag package does:
an abbreviation (``--driver`` for ``--driver-name``) is an error, never a silent match."""

from __future__ import annotations

import pytest

from drakit.plugin.ops.cli import main

ABBREVIATED = {
    "run": ["run", "--driver", "drakit.example.com"],
    "cleanup": ["cleanup", "--driver", "drakit.example.com"],
    "demo": ["demo", "--driver", "drakit.example.com"],
    "fake-kubelet": ["fake-kubelet", "--registrar-dir", "/tmp", "--kubelet", "1.34"],
    "apiserver": ["apiserver", "--ho", "127.0.0.1"],
    "cdi list": ["cdi", "list", "--cdi", "/tmp"],
    "cdi validate": ["cdi", "validate", "--max", "0.5.0", "x.json"],
}


@pytest.mark.parametrize("argv", ABBREVIATED.values(), ids=ABBREVIATED.keys())
def test_an_abbreviated_flag_is_refused(argv: list[str],
                                        capsys: pytest.CaptureFixture[str]) -> None:
    try:
        code = main(argv)
    except SystemExit as e:
        code = e.code
    assert code == 2
    err = capsys.readouterr().err
    flag = next(a for a in argv[::-1] if a.startswith("--"))
    assert f"unrecognized arguments: {flag}" in err, err

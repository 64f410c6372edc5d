"""grpcio's core settings for serving: set before grpc is imported, a site's own value kept."""

from __future__ import annotations

import subprocess
import sys

from slurm_harp.server import grpc_core


def test_sets_the_experiments_when_the_environment_has_none() -> None:
    environ: dict[str, str] = {}
    grpc_core.configure(environ)
    assert environ == {"GRPC_EXPERIMENTS": grpc_core.EXPERIMENTS}


def test_keeps_a_sites_own_value() -> None:
    environ = {"GRPC_EXPERIMENTS": ""}
    grpc_core.configure(environ)
    assert environ == {"GRPC_EXPERIMENTS": ""}


def test_the_command_line_sets_it_before_grpc_is_imported() -> None:
    code = (
        "import os, sys; import slurm_harp.cli; "
        "print('grpc' in sys.modules, os.environ.get('GRPC_EXPERIMENTS'))"
    )
    env = {"PATH": "/usr/bin:/bin"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    assert out.stdout.split() == ["False", grpc_core.EXPERIMENTS]


def test_too_late_once_grpc_is_imported() -> None:
    import grpc  # noqa: F401  (already imported by other tests; imported here in any case)

    assert grpc_core.configure({}) is False

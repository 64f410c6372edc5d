"""grpcio's core settings for serving. grpcio reads them once, when it is first imported: the
``harp`` command line sets them before anything imports grpc.

Since grpcio 1.80, Python servers do their socket I/O on grpc core's EventEngine threads, which hand
every event over to the Python thread that polls the server's completion queue. With the two
experiments below off, that polling thread reads and writes the socket itself (grpcio's path before
1.80): one thread hand-off fewer per call, the same HTTP/2 and gRPC. What it saves is measured by
benchmarks/bench_plugin.py and bench_transport.py (docs/benchmarks.md, "The transport"). The names
exist in the pinned grpcio (pyproject.toml); a site's own GRPC_EXPERIMENTS is left as it is.
"""

from __future__ import annotations

import os
import sys
from collections.abc import MutableMapping

EXPERIMENTS = "-event_engine_listener,-event_engine_for_all_other_endpoints"


def configure(environ: MutableMapping[str, str] = os.environ) -> bool:
    """Set GRPC_EXPERIMENTS unless the environment has it. False when grpc is already imported
    (too late for this process: its children still inherit the setting)."""
    environ.setdefault("GRPC_EXPERIMENTS", EXPERIMENTS)
    return "grpc" not in sys.modules

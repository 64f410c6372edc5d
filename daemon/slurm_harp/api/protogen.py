"""Generate the Python gRPC code in this package from proto/harp/v1/predictor.proto.

Run ``python -m slurm_harp.api.protogen`` after editing the .proto; a unit test
regenerates into a temporary directory and fails when the committed files are stale.
"""

from __future__ import annotations

import re
import sys
import tempfile
from pathlib import Path

PROTO_ROOT = Path(__file__).resolve().parents[3] / "proto"
PROTO_FILE = "harp/v1/predictor.proto"
OUTPUTS = ("predictor_pb2.py", "predictor_pb2.pyi", "predictor_pb2_grpc.py")


def generate(out_dir: Path, proto_root: Path = PROTO_ROOT) -> list[Path]:
    """Write the generated modules into ``out_dir`` (flat, with package-relative imports)."""
    from grpc_tools import protoc  # build-time dependency only

    with tempfile.TemporaryDirectory() as tmp:
        args = [
            "protoc",
            f"-I{proto_root}",
            f"--python_out={tmp}",
            f"--pyi_out={tmp}",
            f"--grpc_python_out={tmp}",
            str(proto_root / PROTO_FILE),
        ]
        if protoc.main(args) != 0:
            raise RuntimeError(f"protoc failed on {proto_root / PROTO_FILE}")
        written = []
        for name in OUTPUTS:
            text = (Path(tmp) / "harp" / "v1" / name).read_text()
            # protoc emits absolute imports of the proto package; ours live inside slurm_harp.api.
            text = re.sub(r"^from harp\.v1 import ", "from . import ", text, flags=re.M)
            target = out_dir / name
            target.write_text(text)
            written.append(target)
        return written


if __name__ == "__main__":
    for path in generate(Path(__file__).parent):
        print(path, file=sys.stderr)

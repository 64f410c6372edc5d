"""Benchmark (an experiment): what compiling the decision path's Python with mypyc would save.

    .venv/bin/python -m benchmarks.bench_compiled_core [--rounds 4] [--calls 2000]

Needs a C compiler (`cc`) and mypy's mypyc (the dev extra). The daemon's work per call beside the
trees is Python (docs/benchmarks.md, "A compiled tree walk"). This copies the package into a
temporary directory, compiles the modules a Predict call runs through (``COMPILED``: features,
history, the safety rule, policy, decisions, messages, tags, the predictor, the message conversion)
with mypyc, unchanged, and times the daemon's whole handler (service.predict) for the jobs of
bench_predict_phases, as shipped and compiled: each variant in a process of its own, the two in
turn for ``--rounds`` rounds, back to back and after 7 ms idle (p50 µs; the median of the rounds);
and `harp serve` of each variant answering bench_daemon's request from one client over its socket.
The decisions of both are compared first: they must be the same bytes. The daemon ships no
compiled code: this measures what it would gain (docs/benchmarks.md, "Compiled Python").
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from benchmarks.bench_daemon import measure as daemon_p50
from benchmarks.common import train_bundled
from tests.e2e.daemon_process import DaemonProcess

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "daemon" / "slurm_harp"
# The modules between the request's bytes and the reply's. core/request.py stays Python: a compiled
# dataclass has no annotations the job store could read its columns from (accounting/jobstore.py).
COMPILED = (
    "core/features.py",
    "core/history.py",
    "core/safety_rule.py",
    "core/policy.py",
    "core/decision.py",
    "core/message.py",
    "core/tag.py",
    "core/predictor.py",
    "server/convert.py",
)


def compiled_copy(work: Path) -> Path:
    """A copy of the package with COMPILED built by mypyc in place; the directory to put on the path."""
    root = work / "compiled"
    shutil.copytree(PACKAGE, root / "slurm_harp", ignore=shutil.ignore_patterns("__pycache__", "*.so"))
    mypyc = Path(sys.executable).with_name("mypyc")
    subprocess.run(
        [str(mypyc), *(f"slurm_harp/{m}" for m in COMPILED)],
        cwd=root,
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    built = [m for m in COMPILED if list((root / "slurm_harp" / m).parent.glob(Path(m).stem + ".*.so"))]
    if built != list(COMPILED):
        raise RuntimeError(f"mypyc built {built}, not {list(COMPILED)}")
    return root


def _env(path: Path | None) -> dict[str, str]:
    """The environment of a process whose ``slurm_harp`` comes from ``path`` (None: as shipped)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join((str(path or PACKAGE.parent), str(REPO)))
    return env


def measure(path: Path | None, store: Path, calls: int) -> dict[str, object]:
    """One variant's handler figures, from a process of its own."""
    args = [
        sys.executable,
        "-m",
        "benchmarks.bench_compiled_core",
        "--child",
        str(store),
        "--calls",
        str(calls),
    ]
    out = subprocess.run(args, env=_env(path), cwd=REPO, check=True, capture_output=True, text=True).stdout
    figures: dict[str, object] = json.loads(out.splitlines()[-1])
    return figures


def served(path: Path | None, store: Path, work: Path, calls: int) -> float:
    """p50 ms of bench_daemon's request from one client to `harp serve` (rewrite mode) of a variant."""
    daemon = DaemonProcess(work, store, mode="rewrite", env=_env(path))
    daemon.start()
    try:
        return daemon_p50(daemon.socket, 1, calls)[1]
    finally:
        daemon.stop()


def child(store: Path, calls: int) -> None:
    """Print, as one JSON line: whether slurm_harp is compiled, each job's reply, and its p50s."""
    import slurm_harp.core.predictor as predictor_module
    from benchmarks.bench_daemon import REQUEST
    from benchmarks.bench_predict_phases import IDLE_S, _sized_requests, p50_us
    from benchmarks.common import serving
    from slurm_harp.core.request import Target

    daemon, service = serving(store)
    calibration = daemon.predictor.models[Target.TIME].calibration  # type: ignore[attr-defined]
    jobs = [("16 CPUs x 10 h (bench_daemon's)", REQUEST.SerializeToString())]
    jobs += [(label, body) for label, _, body in _sized_requests(calibration)]
    figures = {
        label: (
            p50_us(functools.partial(service.predict, body), calls, 0.0),
            p50_us(functools.partial(service.predict, body), max(200, calls // 5), IDLE_S),
        )
        for label, body in jobs
    }
    replies = {label: service.predict(body).hex() for label, body in jobs}
    compiled = not str(predictor_module.__file__).endswith(".py")
    print(json.dumps({"compiled": compiled, "replies": replies, "p50": figures}))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args.child, args.calls)
        return
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        store = work / "store"
        train_bundled(store)
        variants = {"as shipped": None, "mypyc": compiled_copy(work)}
        runs: dict[str, list[dict[str, object]]] = {name: [] for name in variants}
        socket_ms: dict[str, list[float]] = {name: [] for name in variants}
        for _ in range(args.rounds):
            for name, path in variants.items():
                runs[name].append(measure(path, store, args.calls))
                socket_ms[name].append(served(path, store, work, args.calls))
    shipped, compiled = runs["as shipped"], runs["mypyc"]
    if any(r["compiled"] for r in shipped) or not all(r["compiled"] for r in compiled):
        raise SystemExit("a variant did not load the package it was meant to")
    if shipped[0]["replies"] != compiled[0]["replies"]:
        raise SystemExit("the compiled package answers differently")
    print(f"daemon's handler, p50 µs back to back / after 7 ms idle, median of {args.rounds} rounds")
    print("(decisions: the same bytes as shipped and compiled)")
    print(f"{'job':<34} {'as shipped':>14} {'mypyc':>14} {'saved':>12}")
    for job in shipped[0]["p50"]:  # type: ignore[attr-defined]
        (hot, idle), (c_hot, c_idle) = (
            [statistics.median(r["p50"][job][i] for r in variant) for i in (0, 1)]  # type: ignore[index]
            for variant in (shipped, compiled)
        )
        saved = f"{1 - c_hot / hot:.0%} / {1 - c_idle / idle:.0%}"
        print(f"{job:<34} {hot:>6.0f} / {idle:>5.0f} {c_hot:>6.0f} / {c_idle:>5.0f} {saved:>12}")
    ms = {name: statistics.median(values) for name, values in socket_ms.items()}
    print(
        f"harp serve over its socket, 1 client, p50 ms: {ms['as shipped']:.3f} as shipped, "
        f"{ms['mypyc']:.3f} compiled ({1 - ms['mypyc'] / ms['as shipped']:.0%} saved)"
    )


if __name__ == "__main__":
    main()

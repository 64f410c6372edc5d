"""What training on the job store's newest N jobs reads of it, bounded in SQL rather than read whole
and filtered: the store is never pruned (about 2 KB a job in memory once read), and a nightly that
read every row to train on the newest ``training.max_jobs`` outgrew its unit's MemoryMax in months.

Training's rows are the newest N usable jobs by submit time (learning.dataset.build_dataset, after
commands.publication.trainable), and their history features count only the jobs that ended at or
after horizon_start of each row's submit time (core.history). Reading the jobs submitted at or after
the oldest trained one, and those that ended at or after horizon_start of it, trains on the same
rows with the same features as a whole read (tests/unit/test_training_window.py). Those rules are
mirrored here, where the oldest trained job is found:

- a trained job has elapsed > 0 and a submit time, each of its times within [0, now + a day]
  (trainable, fields.FUTURE_SLACK_S), and is a row the reader does not skip (readable_sql);
- a job held under two sources (the same job id and submit time) is one row (core.job_copies);
  which copy is kept depends on them all, so a job read for its end is read with every copy of it.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass

from slurm_harp.accounting.fields import FUTURE_SLACK_S
from slurm_harp.accounting.job_columns import readable_sql
from slurm_harp.core.key_history import horizon_start

_TIMES = ("submit_time", "start_time", "end_time")

# The rows training reads, given a Window's bounds (named parameters "submitted" and "ended").
WHERE_SQL = (
    "submit_time >= :submitted OR end_time >= :ended "
    "OR (job_id, submit_time) IN (SELECT job_id, submit_time FROM jobs WHERE end_time >= :ended)"
)


@dataclass(frozen=True)
class Window:
    """``submitted``: the oldest trained job's submit time; ``ended``: the first end time any
    trained job's history features count (horizon_start of it)."""

    submitted: int
    ended: int

    def params(self) -> dict[str, int]:
        return {"submitted": self.submitted, "ended": self.ended}


def window(db: sqlite3.Connection, present: set[str], newest: int, now: float) -> Window | None:
    """The window of training on the ``newest`` (> 0) jobs with the clock at ``now``; None when the
    store holds no more jobs than that to train on (then every row is read)."""
    times = " AND ".join(f"({name} IS NULL OR {name} BETWEEN 0 AND :latest)" for name in _TIMES)
    sql = (
        f"SELECT submit_time FROM jobs WHERE elapsed_s > 0 AND submit_time IS NOT NULL AND {times} "
        f"AND {readable_sql(present)} "
        "GROUP BY job_id, submit_time ORDER BY submit_time DESC LIMIT 1 OFFSET :skip"
    )
    row = db.execute(sql, {"latest": now + FUTURE_SLACK_S, "skip": newest - 1}).fetchone()
    if row is None:
        return None
    return Window(int(row[0]), horizon_start(int(row[0])))

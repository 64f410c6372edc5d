from __future__ import annotations

import dataclasses
import logging
import os
import sqlite3
import time
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path

import pytest

from slurm_harp.accounting import JobRecord, ReadStats, load_records, read_sacct
from slurm_harp.accounting.job_columns import COLUMNS, DATA_NAMES, row_of
from slurm_harp.accounting.jobstore import SCHEMA_VERSION, JobStore, Position, SchemaVersionError
from slurm_harp.core.request import JobRequest
from tests.conftest import BUNDLED_TRACE, not_a_file, raised_within, store_checksum, write_schema_version
from tests.unit.test_sacct import SACCT_TEXT

KTH = BUNDLED_TRACE
T = 1_700_000_000  # a harvest cursor (read_cursor refuses one before 2000)


def _sacct_records() -> list[JobRecord]:
    return read_sacct(SACCT_TEXT.splitlines())


def _job(job_id: str, submit: int | None, **changes: object) -> JobRecord:
    request = JobRequest(user_name="alice", account="phys", time_limit_minutes=60, submit_time=submit)
    record = JobRecord(job_id=job_id, request=request, state="COMPLETED", elapsed_s=30, end_time=submit)
    return dataclasses.replace(record, **changes)  # type: ignore[arg-type]


@pytest.fixture()
def store(tmp_path: Path) -> Iterator[JobStore]:
    with JobStore(tmp_path / "jobs.sqlite") as s:
        yield s


def test_schema_is_created_versioned_and_in_wal_mode(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "dir" / "jobs.sqlite"  # parent directories are created
    JobStore(path).close()
    db = sqlite3.connect(path)
    tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert {"meta", "jobs", "state"} <= tables
    assert db.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone() == (
        str(SCHEMA_VERSION),
    )
    assert db.execute("PRAGMA journal_mode").fetchone() == ("wal",)
    names = [r[1] for r in db.execute("PRAGMA table_info(jobs)")]
    assert names == ["source", *(c.name for c in COLUMNS), "ingested_at"]
    # Every JobRecord and JobRequest field has a column (the request flattened).
    fields = {f.name for f in dataclasses.fields(JobRecord)} - {"request"}
    assert fields | {f.name for f in dataclasses.fields(JobRequest)} == {c.name for c in COLUMNS}
    db.close()
    JobStore(path).close()  # opening again is a no-op


@pytest.mark.parametrize("readonly", [True, False], ids=["reader", "harvester"])
@pytest.mark.parametrize(
    ("stored", "said"),
    [
        (str(SCHEMA_VERSION + 1), f"is newer than this harp reads ({SCHEMA_VERSION}): upgrade harp"),
        ("garbled", "is no schema version: its meta table is damaged"),
        ("0", "is no schema version: its meta table is damaged"),
        ("9" * 5000, "is no schema version: its meta table is damaged"),  # past int()'s digits
    ],
    ids=["newer", "garbled", "zero", "5000-digits"],
)
def test_a_newer_or_garbled_schema_version_is_refused_by_name(
    tmp_path: Path, readonly: bool, stored: str, said: str
) -> None:
    """One error type for both, naming the store and the value: a garbled version raised a bare
    ValueError (int()'s), a newer one RuntimeError, and `harp nightly` caught neither."""
    path = tmp_path / "jobs.sqlite"
    JobStore(path).close()
    write_schema_version(path, stored)
    with pytest.raises(SchemaVersionError) as raised:
        JobStore(path, readonly=readonly)
    assert str(raised.value) == f"{path}: schema_version {stored[:40]!r} {said}"


@pytest.mark.parametrize(
    "schema",
    [
        "CREATE TABLE settings (k TEXT PRIMARY KEY, v TEXT); INSERT INTO settings VALUES ('a', '1')",
        "CREATE TABLE meta (name TEXT, v TEXT); INSERT INTO meta VALUES ('a', '1')",
        "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL); CREATE TABLE notes (t TEXT);"
        "INSERT INTO meta VALUES ('schema_version', '1')",
    ],
    ids=["settings", "a meta table of its own", "a schema_version of its own"],
)
def test_another_programs_sqlite_file_is_refused_and_left_as_it_was(tmp_path: Path, schema: str) -> None:
    """The writer (`harp import`, `harp harvest`) gave any SQLite file harp's tables and switched
    it to WAL: only the readers refused it. One with a meta table of harp's shape and a
    schema_version, but no jobs table, was taken as a store. An empty file is still made one."""
    path = tmp_path / "app.sqlite"
    with closing(sqlite3.connect(path)) as db:
        db.executescript(schema)
        db.commit()
    before = path.read_bytes()
    with pytest.raises(SchemaVersionError, match=f"^{path}: not a job store made by harp"):
        JobStore(path)
    assert path.read_bytes() == before and [p.name for p in tmp_path.iterdir()] == ["app.sqlite"]
    empty = tmp_path / "empty.sqlite"
    empty.touch()
    with JobStore(empty) as store:
        assert store.count() == 0
    with JobStore(empty, readonly=True) as store:  # a store now, with its schema_version
        assert store.count() == 0


def test_a_column_missing_from_an_older_database_is_added(tmp_path: Path) -> None:
    path = tmp_path / "jobs.sqlite"
    with JobStore(path) as s:
        s.upsert([_job("1", 100, max_rss_mb=5.0)], "old")
    with sqlite3.connect(path) as db:
        db.execute("ALTER TABLE jobs DROP COLUMN tres_per_node")
        db.execute("ALTER TABLE jobs DROP COLUMN censored")
    with JobStore(path) as s:
        (back,) = s.records()
        assert back.request.tres_per_node is None and back.censored is False  # the field's default
        assert s.upsert([_job("2", 200, censored=True)], "old") == 1


def test_records_round_trip_every_field(store: JobStore) -> None:
    records = _sacct_records()
    assert store.upsert(records, "site") == len(records) == 7
    back = {r.job_id: r for r in store.records("site")}
    assert back == {r.job_id: r for r in records}
    assert back["1010"].request.is_array is True and back["1001"].request.is_array is False
    assert back["1002"].censored is True and back["1001"].max_rss_mb == pytest.approx(3072)


def test_same_batch_twice_changes_nothing(store: JobStore) -> None:
    records = _sacct_records()
    first = store.merge(records, "site", cursor=1000)
    checksum = store_checksum(store)
    time.sleep(0.01)  # a rewrite would show as a new ingested_at
    second = store.merge(records, "site", cursor=1000)
    assert (first.inserted, first.updated) == (7, 0)
    assert (second.received, second.inserted, second.updated) == (7, 0, 0)
    assert store_checksum(store) == checksum and store.count() == 7


def test_a_changed_job_is_updated_in_place(store: JobStore) -> None:
    store.upsert([_job("1", 100), _job("2", 200)], "a")
    checksum = store_checksum(store)
    late = _job("2", 200, request=JobRequest(partition="batch", submit_time=200))
    result = store.merge([_job("1", 100), late], "a")
    assert (result.inserted, result.updated) == (0, 1)
    assert store_checksum(store) != checksum
    assert [r.request.partition for r in store.records("a")] == [None, "batch"]


def test_a_reused_job_id_with_another_submit_time_is_a_job_of_its_own(store: JobStore) -> None:
    """After MaxJobId wraps or slurmctld loses its state, a new job gets an old one's id: keyed by
    id alone, it overwrote the old job, and MaxRSS (a maximum over re-reads) stayed the old one's."""
    old = _job("7", 100, max_rss_mb=900.0, state="TIMEOUT", censored=True)
    new = _job("7", 90_000, max_rss_mb=10.0, request=JobRequest(user_name="bob", submit_time=90_000))
    store.upsert([old], "a")
    result = store.merge([new], "a")
    assert list(store.records("a")) == [old, new]
    assert (result.inserted, result.updated, result.reused) == (1, 0, 1)
    # A re-read is still the same job: it merges into its own row only, never erasing or lowering.
    again = store.merge([dataclasses.replace(old, max_rss_mb=None, state="TIMEOUT"), new], "a")
    assert (again.inserted, again.updated, again.reused) == (0, 0, 0)
    assert list(store.records("a")) == [old, new]
    # Another source, and a job whose submit time is unknown, are keys of their own too.
    assert store.merge([new], "b").reused == 0
    assert store.upsert([_job("7", None)], "a") == 1 and store.upsert([_job("7", None)], "a") == 0


def test_sources_are_separate_keys(store: JobStore) -> None:
    store.upsert([_job("1", 100)], "a")
    store.upsert([_job("1", 100, state="FAILED")], "b")
    assert store.count() == 2 and store.count("a") == 1 and store.sources() == ["a", "b"]
    assert [r.state for r in store.records("b")] == ["FAILED"]


def test_records_are_ordered_by_submit_time_and_filtered(store: JobStore) -> None:
    store.upsert([_job("3", 300), _job("1", 100), _job("2", 200), _job("x", None)], "a")
    store.upsert([_job("9", 150)], "b")
    assert [r.job_id for r in store.records()] == ["x", "1", "9", "2", "3"]
    assert [r.job_id for r in store.records("a", since=100, until=300)] == ["1", "2"]
    assert [r.job_id for r in store.records(since=150)] == ["9", "2", "3"]
    assert [r.job_id for r in store.records(until=150)] == ["1"]


def test_rows_added_since_a_position_whenever_their_jobs_were_submitted(store: JobStore) -> None:
    assert store.position() == Position(0, 0)
    store.upsert([_job("1", 100), _job("2", 200)], "a")
    first = store.position()
    assert first.rows == 2
    # Added later: a job submitted long before the others, and one that changed in place.
    store.merge([_job("2", 200, state="FAILED"), _job("0", 5)], "a")
    store.upsert([_job("1", 100)], "b")
    now = store.position()
    assert now.rows == 4 and now.last_row > first.last_row
    assert [(r.job_id, r.state) for r in store.added(first.last_row, now.last_row)] == [
        ("0", "COMPLETED"),
        ("1", "COMPLETED"),
    ]
    assert store.changed_since(now) == 0
    store.upsert([_job("2", 200, state="TIMEOUT")], "a")  # a change keeps its row, moves ingested_at
    changed = store.position()
    assert (changed.rows, changed.last_row, changed.newest) == (now.rows, now.last_row, now.newest)
    assert changed.ingested > now.ingested and store.changed_since(now) == 1
    store.upsert([_job("2", 200, state="TIMEOUT")], "a")  # the same again: nothing changes
    assert store.position() == changed and store.changed_since(changed) == 0
    store.upsert([_job("4", 400)], "a")
    assert [r.job_id for r in store.added(first.last_row, now.last_row)] == ["0", "1"]  # up to now only
    assert [r.job_id for r in store.records(upto_row=now.last_row)] == ["0", "1", "1", "2"]
    assert [r.job_id for r in store.records(upto_row=first.last_row)] == ["1", "2"]
    assert store.holds(first) and store.holds(now)
    newest = store.position()
    store._db.execute("DELETE FROM jobs WHERE job_id = '4'")  # an operator's hand
    store.upsert([_job("5", 500)], "a")  # may be given the deleted row's rowid
    assert not store.holds(newest) and store.holds(now)
    assert store.position().rows == newest.rows


def test_runs_of_one_user_and_name_newest_first(store: JobStore) -> None:
    def mine(job_id: str, submit: int, user: str = "alice", name: str = "sim") -> JobRecord:
        job = _job(job_id, submit)
        return dataclasses.replace(
            job, request=dataclasses.replace(job.request, user_name=user, job_name=name)
        )

    store.upsert([mine("1", 100), mine("2", 300), mine("3", 200, user="bob"), mine("4", 400, name="x")], "a")
    store.upsert([mine("5", 250)], "b")
    assert [r.job_id for r in store.runs_of("alice", "sim")] == ["2", "5", "1"]
    assert [r.job_id for r in store.runs_of("alice", "sim", newest=2)] == ["2", "5"]
    assert [r.job_id for r in store.runs_of("bob", "sim")] == ["3"]
    assert store.runs_of("alice", "SIM") == [] and store.runs_of("alice' OR '1'='1", "sim") == []
    plan = " ".join(
        str(row) for row in store._db.execute(  # the advice's query uses its index
            "EXPLAIN QUERY PLAN SELECT job_id FROM jobs WHERE user_name = ? AND job_name = ? "
            "ORDER BY submit_time DESC", ("alice", "sim"),
        )
    )  # fmt: skip
    assert "jobs_user_name" in plan


def test_cursor_never_moves_backwards(store: JobStore) -> None:
    assert store.cursor("a") is None
    store.upsert([], "a", cursor=T + 500)
    store.upsert([], "a", cursor=T + 400)
    assert store.cursor("a") == T + 500
    store.merge([_job("1", 100)], "a", cursor=T + 450)
    assert store.cursor("a") == T + 500
    store.merge([_job("2", 100)], "a", cursor=T + 600)
    assert store.cursor("a") == T + 600 and store.cursor("b") is None


def test_a_record_no_row_holds_is_left_out_and_the_rest_stored(
    store: JobStore, caplog: pytest.LogCaptureFixture
) -> None:
    """A whole number past SQLite's 64 bits raised OverflowError out of the batch: the harvest's
    window rolled back, and every run after stopped at the same record."""
    records = [_job("1", 100), _job("2", 200, elapsed_s=2**63), _job("3", 300, alloc_cpus=-(2**63) - 1)]
    with caplog.at_level(logging.WARNING):
        result = store.merge([*records, _job("4", 400)], "a", cursor=T + 400)
    assert (result.received, result.inserted, result.refused) == (4, 2, 2)
    assert [r.job_id for r in store.records("a")] == ["1", "4"] and store.cursor("a") == T + 400
    assert (
        "2 a jobs not stored, no row holds them (job '2': a whole number past SQLite's 64 bits)"
        in caplog.text
    )


def test_set_cursor_moves_it_back_and_merge_forward_again(store: JobStore) -> None:
    store.upsert([], "a", cursor=T + 500)
    store.set_cursor("a", T + 300)
    assert store.cursor("a") == T + 300 and store.cursor("b") is None
    store.upsert([], "a", cursor=T + 200)
    assert store.cursor("a") == T + 300
    store.set_cursor("b", T + 100)
    assert store.cursor("b") == T + 100


def test_latest_end_leaves_out_ends_after_now(store: JobStore) -> None:
    """A job stamped by a clock that ran ahead ends in the future once it stepped back: counted,
    the harvest's freshness (harp_jobstore_latest_end_timestamp_seconds) stayed in the future and
    HarpHarvestStale could not fire until the clock caught up."""
    store.upsert([_job("1", 1000), _job("2", 5000), _job("3", None)], "a")
    assert store.latest_end(now=6000) == 5000
    assert store.latest_end(now=4999) == 1000 and store.latest_end(now=999) is None
    assert store.latest_end() == 5000  # this host's clock, by default


def test_latest_end_of_one_source_leaves_the_others_out(store: JobStore) -> None:
    """A damaged cursor's repair reads from its own source's latest End (commands.harvest): the
    store's, an imported 1996 trace's or another cluster's, read from 2000 or skipped jobs."""
    store.upsert([_job("1", 1000), _job("2", 5000)], "a")
    store.upsert([_job("1", 3000)], "b")
    assert store.latest_end(now=6000, source="b") == 3000 and store.latest_end(now=6000, source="a") == 5000
    assert store.latest_end(now=2999, source="b") is None and store.latest_end(now=6000, source="c") is None
    assert store.latest_end(now=6000) == 5000  # every source's, the harvest's freshness metric


def test_a_failing_batch_rolls_back_rows_and_cursor(store: JobStore) -> None:
    store.merge([_job("1", 100)], "a", cursor=T + 100)
    checksum = store_checksum(store)

    def batch() -> Iterator[JobRecord]:
        yield _job("2", 200)
        yield _job("1", 100, state="FAILED")
        raise OSError("reader died half-way")

    with pytest.raises(OSError, match="half-way"):
        store.merge(batch(), "a", cursor=T + 900)
    assert store_checksum(store) == checksum
    assert store.cursor("a") == T + 100 and store.count() == 1
    # The connection is usable again after the rollback.
    assert store.upsert([_job("2", 200)], "a", cursor=T + 200) == 1 and store.cursor("a") == T + 200


def test_a_second_connection_sees_only_committed_batches(tmp_path: Path) -> None:
    path = tmp_path / "jobs.sqlite"
    with JobStore(path) as writer, JobStore(path) as reader:
        writer.upsert([_job("1", 100)], "a", cursor=T + 100)
        assert reader.count() == 1 and reader.cursor("a") == T + 100


@pytest.mark.alone  # times itself against the wall clock (scripts/test)
def test_100k_upserts_take_seconds(store: JobStore) -> None:
    records = [_job(str(i), 1_000_000 + i, max_rss_mb=i / 7) for i in range(100_000)]
    t0 = time.perf_counter()
    assert store.upsert(records, "big") == 100_000
    again = store.merge(records, "big")
    elapsed = time.perf_counter() - t0
    assert again.changed == 0 and store.count() == 100_000
    assert elapsed < 20, f"100k inserts + 100k no-op upserts took {elapsed:.1f}s"


def test_kth_trace_loads_in_place(store: JobStore) -> None:
    stats = ReadStats(source=str(KTH))
    records = load_records(KTH, stats)
    result = store.merge(records, "kth")
    assert result.inserted == len(records) > 28_000 and stats.bad_lines == 0
    checksum = store_checksum(store)
    assert store.merge(records, "kth").changed == 0 and store_checksum(store) == checksum
    times = [r.request.submit_time for r in store.records("kth")]
    assert times == sorted(times)  # type: ignore[type-var]


def test_readonly_store_reads_and_never_writes(tmp_path: Path) -> None:
    path = tmp_path / "jobs.sqlite"
    with JobStore(path) as writer:
        writer.upsert([_job("1", 100), _job("2", 200)], "sacct")
        before = store_checksum(writer)
    with JobStore(path, readonly=True) as reader:
        assert reader.count() == 2 and [r.job_id for r in reader.records()] == ["1", "2"]
        with pytest.raises(sqlite3.OperationalError, match="readonly"):
            reader.upsert([_job("3", 300)], "sacct")
    with JobStore(path) as writer:
        assert store_checksum(writer) == before
    with pytest.raises(sqlite3.OperationalError):
        JobStore(tmp_path / "absent.sqlite", readonly=True)
    assert not (tmp_path / "absent.sqlite").exists()


def test_a_store_whose_path_is_not_utf8_opens_read_only(tmp_path: Path) -> None:
    """Its URI was quoted from the path as text: urllib raised UnicodeEncodeError on a surrogate
    (`harp report --db` under a directory named b"\\xfd" ended in a traceback)."""
    path = Path(os.fsdecode(bytes(tmp_path) + b"/\xfd %3F?#")) / "jobs.sqlite"
    path.parent.mkdir()
    with JobStore(path) as writer:
        writer.upsert([_job("1", 100)], "sacct")
    with JobStore(path, readonly=True) as reader:
        assert [r.job_id for r in reader.records()] == ["1"]


@pytest.mark.parametrize("readonly", [True, False], ids=["reader", "harvester"])
def test_a_fifo_is_refused_naming_it(tmp_path: Path, readonly: bool) -> None:
    path = tmp_path / "jobs.sqlite"
    said = not_a_file(path, "FIFO")  # SQLite's open() of it waits for a writer (the reader's, for good)
    raised = raised_within(10, lambda: JobStore(path, readonly=readonly))
    assert isinstance(raised, OSError) and str(raised) == f"{path} is {said}", raised


def test_a_reader_meets_a_store_not_migrated_yet_and_filters_by_end_and_tag(tmp_path: Path) -> None:
    path = tmp_path / "jobs.sqlite"
    tagged = JobRecord(
        "2", JobRequest(submit_time=200), "COMPLETED", 60, end_time=400, harp_tag="harp:shadow,t=5"
    )
    with JobStore(path) as s:
        s.upsert([_job("1", 100), tagged], "site")
    with sqlite3.connect(path) as db:
        db.execute("ALTER TABLE jobs DROP COLUMN harp_tag")  # as an older harvester left it
    reader = JobStore(path, readonly=True)
    assert [r.harp_tag for r in reader.records()] == [None, None]
    assert list(reader.records(tagged=True)) == []
    reader.close()
    with JobStore(path) as s:  # the harvester migrates it
        s.upsert([tagged], "site")
        assert [r.job_id for r in s.records(tagged=True)] == ["2"]
        assert [r.job_id for r in s.records(ended_since=300)] == ["2"]


def _version_1_store(path: Path, rows: list[JobRecord]) -> None:
    """A store as schema version 1 left it: keyed (source, job_id); ``censored`` added later, by
    ALTER TABLE (nullable, NULL in the rows before), rowids with a gap; a cursor."""
    defs = ", ".join(c.definition for c in COLUMNS if c.name != "censored")
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
        db.execute("INSERT INTO meta VALUES ('schema_version', '1')")
        db.execute(
            f"CREATE TABLE jobs (source TEXT NOT NULL, {defs}, ingested_at REAL NOT NULL, "
            "PRIMARY KEY (source, job_id))"
        )
        db.execute("CREATE INDEX jobs_submit ON jobs (submit_time)")
        db.execute("ALTER TABLE jobs ADD COLUMN censored INTEGER")
        db.execute("CREATE TABLE state (source TEXT PRIMARY KEY, cursor_end INTEGER NOT NULL)")
        db.execute("INSERT INTO state VALUES ('sacct', ?)", (T + 5000,))
        names = [c.name for c in COLUMNS]
        for rowid, record in zip((3, 4, 9), rows, strict=True):
            values = dict(zip(["job_id", *DATA_NAMES], row_of(record), strict=True)) | {"censored": None}
            db.execute(
                f"INSERT INTO jobs (rowid, source, {', '.join(names)}, ingested_at) "
                f"VALUES (?, 'sacct', {', '.join('?' * len(names))}, 1.5)",
                (rowid, *(values[n] for n in names)),
            )


def test_a_version_1_store_opens_with_its_rows_and_takes_a_reused_id(tmp_path: Path) -> None:
    path = tmp_path / "jobs.sqlite"
    rows = [_job("1", 100), _job("2", 200, max_rss_mb=50.0), _job("3", 300)]
    _version_1_store(path, rows)
    with JobStore(path, readonly=True) as reader:  # a reader may meet it before the harvester
        assert list(reader.records()) == rows
    with JobStore(path) as store:
        assert list(store.records()) == rows and store.cursor("sacct") == T + 5000
        assert store.position() == Position(3, 9, ("sacct", "3"), 1.5)  # rowids kept: readers go on
        result = store.merge([_job("2", 250, max_rss_mb=1.0), _job("3", 300, max_rss_mb=7.0)], "sacct")
        assert [(r.job_id, r.request.submit_time, r.max_rss_mb) for r in store.records()] == [
            ("1", 100, None), ("2", 200, 50.0), ("2", 250, 1.0), ("3", 300, 7.0)
        ]  # fmt: skip
        assert (result.inserted, result.updated, result.reused) == (1, 1, 1)
    with sqlite3.connect(path) as db:
        assert db.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone() == ("2",)
        assert not [r for r in db.execute("PRAGMA table_info(jobs)") if r[5]]  # no primary key left
        indexes = {r[1] for r in db.execute("PRAGMA index_list(jobs)")}
        assert {"jobs_identity", "jobs_submit", "jobs_end", "jobs_user_name"} <= indexes


def test_an_infinite_number_is_stored_and_read_as_unknown(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """An infinite MaxRSS or TotalCPU (through the API: the readers refuse one) crashed the history
    features of `harp nightly` and the daemon, and MAX() on a re-read kept it for good."""
    request = JobRequest(user_name="u", time_limit_minutes=60, submit_time=1000)
    jobs = [
        JobRecord("1", request, "COMPLETED", 60, end_time=1060, max_rss_mb=float("inf"), total_cpu_s=-1e400),
        JobRecord("2", request, "COMPLETED", 60, end_time=1060, max_rss_mb=512.0, total_cpu_s=60.0),
    ]
    path = tmp_path / "jobs.sqlite"
    with JobStore(path) as store:
        store.merge(jobs, "sacct")
        assert "1 sacct jobs have a number that is not finite, stored as unknown (job 1: " in caplog.text
        assert "max_rss_mb, total_cpu_s)" in caplog.text
        store.merge([dataclasses.replace(jobs[0], max_rss_mb=256.0)], "sacct")  # a re-read knows it
        assert [(r.max_rss_mb, r.total_cpu_s) for r in store.records()] == [(256.0, None), (512.0, 60.0)]
    db = sqlite3.connect(path)  # as an older release stored it
    with db:
        db.execute("UPDATE jobs SET max_rss_mb = ? WHERE job_id = '2'", (float("inf"),))
    db.close()
    with JobStore(path, readonly=True) as store:
        assert [r.max_rss_mb for r in store.records()] == [256.0, None]


def test_a_row_edited_by_hand_into_the_wrong_type_is_skipped_and_named(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Text in an integer column (sqlite3's UPDATE takes any type) ended `harp report`, training
    and the advice in a TypeError far from the store; now that row alone is left out, said once."""
    path = tmp_path / "jobs.sqlite"
    jobs = [_job(str(i), 100 * i) for i in range(1, 5)]
    with JobStore(path) as store:
        store.merge(
            [dataclasses.replace(j, request=dataclasses.replace(j.request, job_name="sim")) for j in jobs],
            "sacct",
        )
        start = store.position()
    db = sqlite3.connect(path)
    with db:
        db.execute("UPDATE jobs SET elapsed_s = 'abc' WHERE job_id = '2'")
        db.execute("UPDATE jobs SET account = x'ff00' WHERE job_id = '3'")
    db.close()
    with JobStore(path, readonly=True) as store:
        for read, first in (
            (store.records, "job '2': elapsed_s = 'abc', not a whole number"),
            (lambda: store.added(0, start.last_row), "job '2': elapsed_s = 'abc', not a whole number"),
            (
                lambda: store.runs_of("alice", "sim"),
                "job '3': account = b'\\xff\\x00', not text",
            ),  # newest first
        ):
            caplog.clear()
            assert sorted(r.job_id for r in read()) == ["1", "4"]
            warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
            assert warnings == [
                f"job store {path}: 2 rows skipped, a value not of its column's type ({first})"
            ]

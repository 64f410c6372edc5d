"""One rule for a job's strings on both sides: the plugin's request.text (Lua) against Python's own
UTF-8 decoder, and a hostile job name harvested from sacct against the same name served from the plugin.
(tests/e2e/test_hostile.py: what real accounting keeps of such a name.)"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from slurm_harp.accounting import read_sacct
from slurm_harp.accounting.jobstore import JobStore
from slurm_harp.accounting.sacct_runner import decode_output
from slurm_harp.api import predictor_pb2 as pb
from slurm_harp.core.features import REQUEST_FEATURE_NAMES, row
from slurm_harp.core.request import JobRequest
from slurm_harp.core.text import MAX_TEXT_BYTES, bounded_text, text_of_bytes
from slurm_harp.server.convert import request_from_proto
from tests.conftest import REPO, lua51
from tests.unit.test_sacct import SACCT_TEXT

LUA = lua51()
_NAME_HASH = REQUEST_FEATURE_NAMES.index("hash_job_name")

# Names no decoder agrees on by accident; none holds "|", a newline or surrounding white space,
# which sacct's rows and their reader treat apart.
HOSTILE: dict[str, bytes] = {
    "lone continuation bytes": b"a\x80\xbfb",
    "a Latin-1 name": b"caf\xe9",
    "0xFF and 0xFE": b"\xff\xfex",
    "overlong slash": b"\xc0\xaf",
    "overlong NUL": b"\xc0\x80",
    "overlong three bytes": b"\xe0\x80\xaf",
    "a surrogate": b"\xed\xa0\x80",
    "past U+10FFFF": b"\xf4\x90\x80\x80",
    "F5 lead": b"\xf5\x80\x80\x80",
    "a truncated euro at the end": b"price\xe2\x82",
    "a truncated emoji in the middle": b"\xf0\x9f\x98x",
    "a truncated emoji then a lone continuation": b"\xf0\x9f\x98\x80\x80",
    "mixed valid and invalid": b"h\xc3\xa9\xff\xe2\x82\xac\xe2\x82\xed\x9f\xbf\xf0\x90\x80\x80z",
    "valid: an emoji": "r\U0001f600n".encode(),
    "longer than the cap, a two-byte character at the cut": b"a" * (MAX_TEXT_BYTES - 1) + "é".encode(),
    "longer than the cap, an emoji across the cut": b"a" * (MAX_TEXT_BYTES - 2) + "\U0001f600".encode(),
    "longer than the cap, a replacement across the cut": b"a" * (MAX_TEXT_BYTES - 2) + b"\xffb",
    "longer than the cap, a replacement that fits": b"a" * (MAX_TEXT_BYTES - 3) + b"\xff" + b"b" * 10,
    "longer than the cap, a truncated sequence at the cut": b"a" * (MAX_TEXT_BYTES - 4) + b"\xe2\x82" * 3,
    "all invalid, far past the cap": b"\xff\xfex" * 40_000,
}


def _python_rule(data: bytes) -> str:
    """The rule, from Python's decoder: each byte it cannot decode "?", then the longest run of whole
    characters of at most the cap in UTF-8."""
    out, size = [], 0
    for char in data.decode("utf-8", errors="surrogateescape"):
        if "\udc80" <= char <= "\udcff":
            char = "?"
        size += len(char.encode("utf-8"))
        if size > MAX_TEXT_BYTES:
            break
        out.append(char)
    return "".join(out)


def _lua_text(strings: list[bytes]) -> tuple[int, list[bytes]]:
    """request.text of each string, in the plugin's Lua, and the plugin's cap."""
    proc = subprocess.run(
        [LUA, str(REPO / "tests" / "lua" / "pb_tool.lua"), "text"],
        input=json.dumps([s.hex() for s in strings]),
        capture_output=True, text=True, timeout=120, cwd=REPO, check=True,
    )  # fmt: skip
    out = json.loads(proc.stdout)
    return out["max"], [bytes.fromhex(h) for h in out["text"]]


def test_the_plugin_and_the_daemon_cap_strings_at_the_same_number_of_bytes() -> None:
    assert _lua_text([])[0] == MAX_TEXT_BYTES


def test_the_plugin_makes_hostile_names_what_pythons_decoder_makes_of_them() -> None:
    names = list(HOSTILE)
    _, texts = _lua_text([HOSTILE[n] for n in names])
    for name, lua in zip(names, texts, strict=True):
        expected = _python_rule(HOSTILE[name])
        assert lua.decode("utf-8") == expected, name
        assert text_of_bytes(HOSTILE[name]) == expected, name


# Pieces that make every kind of sequence, whole or not, often; and long enough to cross the cut.
_PIECES = [bytes([b]) for b in b"a\x80\xbf\xc2\xe0\xed\xf0\xf4\xff"] + ["é".encode(), "😀".encode()]
_BYTES = st.binary(max_size=40) | st.lists(st.sampled_from(_PIECES), max_size=300).map(b"".join)


@settings(max_examples=25, deadline=None)
@given(st.lists(_BYTES, min_size=1, max_size=40))
def test_the_plugin_agrees_with_pythons_decoder_on_any_bytes(strings: list[bytes]) -> None:
    _, texts = _lua_text(strings)
    for data, lua in zip(strings, texts, strict=True):
        assert lua.decode("utf-8") == _python_rule(data), data
        assert text_of_bytes(data) == _python_rule(data), data


# Names past slurmdbd's TINYTEXT (255 bytes in the table's charset), whole characters at the cut or not.
LONG_NAMES = [
    "a" * 256,
    "a" * 300,
    "é" * 200,
    "a" * 254 + "é" * 3,
    "é" * 100 + "a" * 200,
    "a" * 253 + "€" * 2,
    "\U0001f600" * 70,
]


def _kept_by_slurmdbd(name: str, charset: str) -> bytes:
    """What sacct prints of ``name`` as slurmdbd's MariaDB keeps it in a TINYTEXT column of ``charset``:
    its first 255 bytes there, cut after a whole character (slurmdbd's sql_mode is not strict: a longer
    value is cut, not refused), read back as UTF-8."""
    return name.encode(charset)[:255].decode(charset, errors="ignore").encode()


@pytest.mark.parametrize("charset", ["utf-8", "latin-1"])
def test_a_long_name_served_is_the_name_accounting_keeps(charset: str) -> None:
    """The finding: the plugin and the harvest cut at 256 bytes while accounting keeps 255, so a job
    named with 256 bytes or more never found its own runs. A latin1 table keeps 255 characters: more
    than 255 bytes of UTF-8 whenever it cut, so the harvest's cut makes the same text of it."""
    names = [name for name in LONG_NAMES if charset == "utf-8" or max(map(ord, name)) < 256]
    _, texts = _lua_text([name.encode() for name in names])
    for name, lua in zip(names, texts, strict=True):
        assert lua.decode() == text_of_bytes(_kept_by_slurmdbd(name, charset)), (charset, name[:8], len(name))


@pytest.mark.parametrize("name", list(HOSTILE))
def test_a_name_from_the_command_line_follows_the_rule(name: str) -> None:
    """`harp advise --name`: undecodable bytes of argv come as surrogate escapes."""
    assert bounded_text(os.fsdecode(HOSTILE[name])) == _python_rule(HOSTILE[name])
    assert JobRequest(job_name=os.fsdecode(HOSTILE[name])).job_name == _python_rule(HOSTILE[name])


def test_every_string_of_a_request_follows_the_rule() -> None:
    long = "é" * MAX_TEXT_BYTES
    fields = ["user_name", "account", "partition", "qos", "job_name", "work_dir", "script_signature"]
    fields.append("tres_per_node")
    request = JobRequest(**dict.fromkeys(fields, long))  # type: ignore[arg-type]
    assert all(getattr(request, f) == "é" * (MAX_TEXT_BYTES // 2) for f in fields)
    assert JobRequest(job_name="x" * 10_000).job_name == "x" * MAX_TEXT_BYTES
    assert JobRequest(job_name="\ud800").job_name == "???"  # as its bytes ED A0 80 read


def test_a_hostile_name_served_keys_the_runs_harvested_from_sacct(tmp_path: Path) -> None:
    """The finding: the plugin wrote "?" where the harvest read U+FFFD, and cut at 256 bytes where the
    harvest kept the whole name (and a character across the cut became "?"s), so advice never found
    such a job's runs and its features differed."""
    names = list(HOSTILE)
    _, texts = _lua_text([HOSTILE[n] for n in names])
    lines = SACCT_TEXT.split("\n")
    (job,) = [i for i, line in enumerate(lines) if line.startswith("1001|")]
    with JobStore(tmp_path / "jobs.sqlite") as store:
        for number, name in enumerate(names):
            job_id = 9000 + number
            line = lines[job].replace("1001|1001|relax|alice|", f"{job_id}|{job_id}|NAME|u{number}|")
            output = (lines[0] + "\n" + line + "\n").encode().replace(b"|NAME|", b"|" + HOSTILE[name] + b"|")
            store.upsert(read_sacct(decode_output(output, "sacct").split("\n")), "sacct")
        for number, (name, lua) in enumerate(zip(names, texts, strict=True)):
            sent = pb.SubmitRequest(user_name=f"u{number}", job_name=lua.decode("utf-8"))
            served = request_from_proto(sent)
            assert served.job_name is not None
            (stored,) = store.runs_of(f"u{number}", served.job_name)
            assert stored.job_id == str(9000 + number), name
            assert row(stored.request)[_NAME_HASH] == row(served)[_NAME_HASH], name

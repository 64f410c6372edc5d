"""The one rule for a job's strings (user, account, partition, QOS, name, work dir, TRES), on every
path into a JobRequest: sacct's output, a submit-time request from the plugin, a trace, the command line.

Each byte of an invalid UTF-8 sequence becomes "?"; then the text is cut after its last whole character
that ends within MAX_TEXT_BYTES bytes of UTF-8. The plugin applies the same rule in Lua
(plugin/harp/request.lua, ``utf8``): a name longer than the cap or not UTF-8 must key the same history
and hash to the same feature at submit time as in the job store. "?" and not U+FFFD: slurmdbd's MariaDB
already stores each such byte of a name as "?" (tests/e2e/test_hostile.py), and where a database hands
the bytes back unchanged, this rule reads them as MariaDB would have stored them. An account and a
QOS are then lowered, A-Z only (``lowered``): accounting keeps them in lower case whatever was typed.
"""

from __future__ import annotations

import string

# The plugin's MAX_STRING: bytes of UTF-8 (tests/unit/test_lua_text.py checks both sides agree). 255:
# slurmdbd keeps a job's name, account and partition (and user and QOS names) in TINYTEXT columns,
# which hold 255 bytes, and its session's sql_mode is not strict, so MariaDB cuts a longer one there
# without a word (accounting_storage_mysql.c, mysql_common.c, 22.05): `-J` of 300 bytes is harvested
# as 255. The work dir and TRES are TEXT: cut shorter, the same on both sides, they still agree.
MAX_TEXT_BYTES = 255
# What of the input can reach the cut text: the text is as long as the bytes it was read from, and the
# last character looked at needs 3 more. The rest is never decoded: a hostile 4 MB name costs nothing.
_LOOKED_AT = MAX_TEXT_BYTES + 3
# The fields accounting keeps in lower case, by JobRequest's names. slurmctld lowers a job's account
# after the job_submit plugins ran ("anything that may be put in the database": job_mgr.c,
# validate_job_create_req, 22.05), so the plugin sends `-A Phys` as typed while sacct shows "phys". A
# job's QOS is stored as the id of the QOS it matched in any case (assoc_mgr_fill_in_qos), and sacct
# shows that QOS's name, which sacctmgr lowered when it was created: `--qos=High` is "high" there.
LOWERED_FIELDS = ("account", "qos")
# slurmctld's xstrtolower in the C locale: A-Z only, so a name's bytes stay as many.
_ASCII_LOWER = str.maketrans(string.ascii_uppercase, string.ascii_lowercase)
# surrogateescape reads each byte it cannot decode as U+DC80-U+DCFF: those become "?".
_ESCAPED_BYTE = {code: "?" for code in range(0xDC80, 0xDD00)}


def decoded(data: bytes) -> str:
    """``data`` as UTF-8, each byte of an invalid sequence read as "?" (no cut: a tool's whole output)."""
    return question_marks(data.decode("utf-8", errors="surrogateescape"))


def question_marks(text: str) -> str:
    """``text`` read with errors="surrogateescape" (a file, streamed), each escaped byte as "?"."""
    return text.translate(_ESCAPED_BYTE)


def text_of_bytes(data: bytes) -> str:
    """``data`` by the rule: each byte of an invalid sequence "?", cut to the cap."""
    return _cut(decoded(data[:_LOOKED_AT]))


def bounded_text(value: str) -> str:
    """``value`` by the rule. Lone surrogates are the bytes they stand for: the command line and
    file names carry undecodable bytes as U+DC80-U+DCFF (surrogateescape), which become "?" exactly
    as those bytes do in sacct's output; any other surrogate is invalid UTF-8 too."""
    if value.isascii():  # the usual case: one scan in C
        return value[:MAX_TEXT_BYTES]
    value = value[:_LOOKED_AT]  # each character is at least one byte
    try:
        data = value.encode("utf-8", errors="surrogateescape")
    except UnicodeEncodeError:
        data = value.encode("utf-8", errors="surrogatepass")
    return text_of_bytes(data)


def lowered(value: str) -> str:
    """``value`` as accounting keeps an account or QOS name (LOWERED_FIELDS): A-Z as a-z, nothing else."""
    return value.lower() if value.isascii() else value.translate(_ASCII_LOWER)


def _cut(text: str) -> str:
    data = text.encode("utf-8")
    if len(data) <= MAX_TEXT_BYTES:
        return text
    # Valid UTF-8 cut anywhere: "ignore" drops only the partial character at the end.
    return data[:MAX_TEXT_BYTES].decode("utf-8", errors="ignore")

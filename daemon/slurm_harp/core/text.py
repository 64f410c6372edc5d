"""The one rule for a job's strings (user, account, partition, QOS, name, work dir, TRES), on every
path into a JobRequest: sacct's output, a submit-time request from the plugin, a trace, the command line.

Invalid UTF-8 becomes U+FFFD, one per maximal subpart, as ``bytes.decode("utf-8", "replace")`` does;
then the text is cut after its last whole character that ends within MAX_TEXT_BYTES bytes of UTF-8.
The plugin applies the same rule in Lua (plugin/harp/request.lua, ``utf8``): a name longer than the
cap or not UTF-8 must key the same history and hash to the same feature at submit time as in the store.
"""

from __future__ import annotations

# The plugin's MAX_STRING: bytes of UTF-8 (tests/unit/test_lua_text.py checks both sides agree).
MAX_TEXT_BYTES = 256
# What of the input can reach the cut text: a replacement is never shorter than the bytes it replaces,
# and the last character looked at needs 3 more. The rest is never decoded: a hostile 4 MB name costs nothing.
_LOOKED_AT = MAX_TEXT_BYTES + 3


def text_of_bytes(data: bytes) -> str:
    """``data`` as text by the rule: U+FFFD for each maximal invalid subpart, cut to the cap."""
    return _cut(data[:_LOOKED_AT].decode("utf-8", errors="replace"))


def bounded_text(value: str) -> str:
    """``value`` by the rule. Lone surrogates are the bytes they stand for: the command line and
    file names carry undecodable bytes as U+DC80-U+DCFF (surrogateescape), which become U+FFFD
    exactly as those bytes do in sacct's output; any other surrogate is invalid UTF-8 too."""
    if value.isascii():  # the usual case: one scan in C
        return value[:MAX_TEXT_BYTES]
    value = value[:_LOOKED_AT]  # each character is at least one byte
    try:
        data = value.encode("utf-8", errors="surrogateescape")
    except UnicodeEncodeError:
        data = value.encode("utf-8", errors="surrogatepass")
    return text_of_bytes(data)


def _cut(text: str) -> str:
    data = text.encode("utf-8")
    if len(data) <= MAX_TEXT_BYTES:
        return text
    # Valid UTF-8 cut anywhere: "ignore" drops only the partial character at the end.
    return data[:MAX_TEXT_BYTES].decode("utf-8", errors="ignore")

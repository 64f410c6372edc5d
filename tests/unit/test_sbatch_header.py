"""advice.sbatch_header: a batch script's directive lines split into words as sbatch 22.05 splits
them (src/sbatch/opt.c, get_argument); what the words mean is tests/unit/test_advice_script.py's."""

from __future__ import annotations

import pytest

from slurm_harp.advice.sbatch_header import header_words


def test_words_carry_their_lines_and_the_header_ends_at_the_first_command() -> None:
    script = (
        "#!/bin/sh\n\n# a comment\n  #SBATCH not read: indented\n#SBATCH -J x\n\t\n#SLURM -n 2\n"
        "srun a\n#SBATCH -n 9\n"
    )
    assert header_words(script) == [("-J", 5), ("x", 5), ("-n", 7), ("2", 7)]


@pytest.mark.parametrize(
    ("line", "words"),
    [
        ("#SBATCH -J x\r", ["-J", "x"]),  # a CRLF script: \r is white space to C's isspace()
        ("#SBATCH\t-J\vx\f-n", ["-J", "x", "-n"]),
        ("#SBATCH -J a\u00a0b", ["-J", "a\u00a0b"]),  # a non-ASCII space is none in the C locale
        ("#SBATCH -J x\0 -n 4", ["-J", "x"]),  # sbatch holds a line as a C string: a NUL ends it
        ("#SBATCH -J 'a\"b' \"c'd\"", ["-J", 'a"b', "c'd"]),
        ("#SBATCH -J x\\", ["-J", "x"]),  # a backslash at the end escapes nothing
        ("#SBATCH -J x:y --dependency=afterok:1", ["-J", "x:y", "--dependency=afterok:1"]),
        ("#SBATCHhetjob", []),  # a separator need not be apart from the magic word
        ("#SBATCH hetjobs -J x", ["hetjobs", "-J", "x"]),  # nor is a longer word one
        ("#SBATCH -J x hetjob# -n 4", ["-J", "x", "hetjob"]),
    ],
)
def test_a_line_s_words(line: str, words: list[str]) -> None:
    assert [word for word, _ in header_words(line + "\n")] == words

"""The output directory of `harp report|evaluate|simulate --out`: walked without following another
user's links, made if missing, and written through its descriptor (slurm_harp.output_dir)."""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

import pytest

from slurm_harp.cli import main
from slurm_harp.commands.arguments import open_out
from slurm_harp.output_dir import ForeignLink, OutputDir, WriteError

NOBODY = 65534


def plant(link: Path, target: Path | str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A symbolic link of another user's (as root: nobody's; else the caller seen as another)."""
    link.symlink_to(target)
    if os.geteuid() == 0:
        os.lchown(link, NOBODY, NOBODY)
    else:
        monkeypatch.setattr(os, "geteuid", lambda: os.getuid() + 1)


def test_missing_directories_are_made_and_files_written_as_new_ones(tmp_path: Path) -> None:
    with OutputDir.open(tmp_path / "a" / "b") as out:
        written = out.write_text("t.md", "table\n")
        assert written == tmp_path / "a" / "b" / "t.md"
    st = written.lstat()
    assert stat.S_ISREG(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o644 and written.read_text() == "table\n"
    assert [p.name for p in written.parent.iterdir()] == ["t.md"]  # no temporary file left


def test_a_link_swapped_in_after_opening_changes_nothing(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "t.md").write_text("root's file\n")
    out_path = tmp_path / "shared" / "report"
    with OutputDir.open(out_path) as out:
        # Whoever may write in shared/ moves the directory away and puts a link at its name.
        out_path.rename(tmp_path / "shared" / "moved")
        out_path.symlink_to(victim)
        out.write_text("t.md", "table\n")
    assert (victim / "t.md").read_text() == "root's file\n"
    assert (tmp_path / "shared" / "moved" / "t.md").read_text() == "table\n"


@pytest.mark.parametrize(
    ("name", "target", "out"),
    [("report", "www/html", "report"), ("www", "www", "www/html"), ("srv", ".", "srv/www/html")],
    ids=["out", "parent", "grandparent"],
)
def test_another_users_link_anywhere_on_the_path_is_refused_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, target: str, out: str
) -> None:
    # A user's home: they may put a link at any name in it, pointing at root's files (srv/).
    victim = tmp_path / "srv"
    (victim / "www" / "html").mkdir(parents=True)
    (victim / "www" / "html" / "index.html").write_text("root's page\n")
    home = tmp_path / "home"
    home.mkdir()
    link = home / name
    plant(link, victim / target, monkeypatch)
    with pytest.raises(ForeignLink) as refused:
        OutputDir.open(home / out)
    assert refused.value.filename == str(link)
    assert str(refused.value) == (
        f"{link} is a symbolic link owned by uid {link.lstat().st_uid}, not by you or root: "
        "give the path it points to if that is meant"
    )
    assert [p.name for p in (victim / "www" / "html").iterdir()] == ["index.html"]


def test_links_of_the_callers_own_are_followed(tmp_path: Path) -> None:
    (tmp_path / "real" / "deep").mkdir(parents=True)
    (tmp_path / "up").symlink_to("real")  # relative: from the link's own directory
    (tmp_path / "real" / "abs").symlink_to(tmp_path / "real" / "deep")  # absolute: from /
    with OutputDir.open(tmp_path / "up" / "abs" / ".." / "deep" / "new") as out:
        out.write_text("x", "1")
    assert (tmp_path / "real" / "deep" / "new" / "x").read_text() == "1"


def test_a_relative_path_starts_at_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    with OutputDir.open(Path("rel")) as out:
        assert out.write_text("x", "1") == Path("rel/x")
    assert (tmp_path / "rel" / "x").read_text() == "1"


def test_what_is_no_directory_is_named(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    (tmp_path / "loop").symlink_to("loop")
    assert open_out(tmp_path / "file" / "out") == f"--out {tmp_path / 'file'}: {os.strerror(errno.ENOTDIR)}"
    assert open_out(tmp_path / "loop" / "out") == f"--out {tmp_path / 'loop'}: {os.strerror(errno.ELOOP)}"


@pytest.mark.skipif(os.geteuid() == 0, reason="root may enter any directory")
def test_a_directory_the_caller_may_not_enter_is_named(tmp_path: Path) -> None:
    (tmp_path / "closed").mkdir(0o000)
    try:
        assert (
            open_out(tmp_path / "closed" / "out") == f"--out {tmp_path / 'closed' / 'out'}: Permission denied"
        )
    finally:
        (tmp_path / "closed").chmod(0o700)


def test_directories_made_and_left_empty_are_removed_on_close(tmp_path: Path) -> None:
    # A command that failed before writing left the directories it had made for --out.
    (tmp_path / "there").mkdir()
    with OutputDir.open(tmp_path / "there" / "a" / "b"):
        assert (tmp_path / "there" / "a" / "b").is_dir()
    assert [p.name for p in tmp_path.iterdir()] == ["there"]
    assert list((tmp_path / "there").iterdir()) == []


def test_two_writers_given_one_new_directory_keep_what_both_write(tmp_path: Path) -> None:
    """Two commands given the same new --out at once, as two processes (each opens its own
    descriptor, nothing else is shared): the first makes it; stopping before it writes, it removed
    it from under the second, whose results were lost to an ENOENT naming a temporary file."""
    out = tmp_path / "new" / "out"
    first, second = OutputDir.open(out), OutputDir.open(out)
    assert [m.name for m in first.made] == ["new", "out"] and second.made == []
    first.close()  # failed on its input: what it made, empty, is removed
    assert not (tmp_path / "new").exists()
    second.write_text("index.html", "page\n")  # made again, by the second now
    assert (out / "index.html").read_text() == "page\n"
    second.close()
    # Both writing: one file each, and the one name both write complete (the last one's).
    first, second = OutputDir.open(out), OutputDir.open(out)
    first.write_text("a.md", "a\n")
    second.write_text("b.md", "b\n")
    first.write_text("index.html", "first\n")
    second.write_text("index.html", "second\n")
    first.close()
    second.close()
    assert sorted(p.name for p in out.iterdir()) == ["a.md", "b.md", "index.html"]
    assert (out / "index.html").read_text() == "second\n"


def test_a_writer_whose_directory_was_removed_and_left_empty_removes_what_it_made_again(
    tmp_path: Path,
) -> None:
    out = tmp_path / "new" / "out"
    first, second = OutputDir.open(out), OutputDir.open(out)
    first.close()
    with pytest.raises(OSError):
        second.write_text("x/y", "")  # fails in the directory made again (no such subdirectory)
    assert out.is_dir()
    second.close()  # and, left empty, it is removed as its own
    assert list(tmp_path.iterdir()) == []


def test_an_existing_directory_is_never_removed(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    OutputDir.open(tmp_path / "empty").close()
    assert (tmp_path / "empty").is_dir()


def test_a_made_directory_with_anything_in_it_is_kept(tmp_path: Path) -> None:
    with OutputDir.open(tmp_path / "a" / "written") as out:
        out.write_text("t.md", "table\n")
    assert (tmp_path / "a" / "written" / "t.md").read_text() == "table\n"
    with OutputDir.open(tmp_path / "b" / "left") as out:
        (tmp_path / "b" / "other").write_text("someone's\n")  # put beside it meanwhile
    assert [p.name for p in (tmp_path / "b").iterdir()] == ["other"]


def test_a_refused_path_leaves_no_directory_made_on_the_way(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    refused = open_out(tmp_path / "new" / ".." / "file" / "out")
    assert refused == f"--out {tmp_path / 'new' / '..' / 'file'}: {os.strerror(errno.ENOTDIR)}"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file"]


def test_a_link_swapped_in_above_a_made_directory_does_not_redirect_its_removal(tmp_path: Path) -> None:
    # Whoever may write in tmp_path moves the directory made away and links its name to root's
    # directory holding an empty one of the same name: removed by path, that one went.
    victim = tmp_path / "victim"
    (victim / "out").mkdir(parents=True)
    with OutputDir.open(tmp_path / "shared" / "out"):
        (tmp_path / "shared").rename(tmp_path / "moved")
        (tmp_path / "shared").symlink_to(victim)
    assert (victim / "out").is_dir()
    assert (tmp_path / "shared").is_symlink() and list((tmp_path / "moved").iterdir()) == []


@pytest.mark.parametrize(
    ("command", "source"),
    [
        (["evaluate"], "bad.csv"),
        (["simulate", "--db"], "bad.db"),
        (["evaluate", "--db"], "bad.db"),
        (["report", "--db"], "bad.db"),
    ],
)
def test_a_command_failing_on_its_input_leaves_no_directory_it_made(
    tmp_path: Path, command: list[str], source: str
) -> None:
    (tmp_path / "bad.csv").write_text("a,b\n1,2\n")  # no Eagle CSV
    (tmp_path / "bad.db").write_text("no SQLite database\n" * 8)
    (tmp_path / "kept").mkdir()
    for out in (tmp_path / "made" / "out", tmp_path / "kept"):
        assert main([*command, str(tmp_path / source), "--out", str(out)]) == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.csv", "bad.db", "kept"]


@pytest.mark.parametrize("name", ["y" * 250 + ".md", "é" * 125 + ".md"], ids=["ascii", "two-byte"])
def test_a_name_that_fits_is_written_whatever_its_length(tmp_path: Path, name: str) -> None:
    """A name of up to 255 bytes is one the filesystem takes; its temporary name (".NAME-" and 12
    hex digits) was 14 bytes longer: a 245-byte trace name failed `harp evaluate --out`
    (ENAMETOOLONG) after all its work. A character the cut splits is held as surrogates."""
    from slurm_harp.state_dir import is_new_file_of

    with OutputDir.open(tmp_path) as out:
        assert out.write_text(name, "table\n").read_text() == "table\n"
    assert [p.name for p in tmp_path.iterdir()] == [name]
    stem = os.fsdecode(os.fsencode(name)[:241])
    assert is_new_file_of(f".{stem}-0123456789ab", name) and not is_new_file_of(f".{name}-0123456789ab", name)


def test_a_file_that_cannot_be_written_is_named(tmp_path: Path) -> None:
    with OutputDir.open(tmp_path) as out, pytest.raises(WriteError) as raised:
        out.write_text("y" * 256, "table\n")  # no name of more than 255 bytes
    assert str(raised.value) == f"cannot write {tmp_path / ('y' * 256)}: File name too long"

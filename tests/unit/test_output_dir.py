"""The output directory of `harp report|evaluate|simulate --out`: walked without following another
user's links, made if missing, and written through its descriptor (slurm_harp.output_dir)."""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

import pytest

from slurm_harp.commands.arguments import open_out
from slurm_harp.output_dir import ForeignLink, OutputDir

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

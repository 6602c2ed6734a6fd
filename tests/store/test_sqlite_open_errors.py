"""``open_sqlite_store`` at a path where no store can be made raises StoreOpenError naming
the path (RUN-STO-1; F16 of the seventh-session break round: it was a raw
``sqlite3.OperationalError`` from the writer thread, not a RunxError)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from runx_actors import RunxError, StoreOpenError, ValidationError
from runx_actors.store.sqlite import open_sqlite_store


async def _refused(path: str) -> StoreOpenError:
    with pytest.raises(StoreOpenError) as refused:
        async with open_sqlite_store(path):
            pass  # pragma: no cover - refused before the block
    assert isinstance(refused.value, RunxError) and refused.value.path == path
    assert repr(path) in str(refused.value)
    return refused.value


async def test_a_missing_directory_is_not_created(tmp_path: Path) -> None:
    path = str(tmp_path / "no" / "such" / "x.sqlite3")
    assert (await _refused(path)).reason == "missing_directory"
    assert not (tmp_path / "no").exists()


async def test_a_parent_that_is_a_file(tmp_path: Path) -> None:
    (tmp_path / "f").write_bytes(b"x")
    error = await _refused(str(tmp_path / "f" / "x.sqlite3"))
    assert error.reason == "missing_directory" and "is not a directory" in str(error)
    assert (tmp_path / "f").read_bytes() == b"x"


async def test_a_directory_is_not_a_store_path(tmp_path: Path) -> None:
    assert (await _refused(str(tmp_path))).reason == "is_directory"
    assert os.listdir(tmp_path) == []  # nothing was written


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="needs procfs")
async def test_a_path_the_os_will_not_create() -> None:
    # procfs refuses new files even for root (a read-only or unwritable directory for
    # other users); the driver's error stays the cause
    error = await _refused("/proc/runx-actors-test.sqlite3")
    assert error.reason == "cannot_open" and error.__cause__ is not None


async def test_a_good_path_still_opens(tmp_path: Path) -> None:
    async with open_sqlite_store(tmp_path / "x.sqlite3") as store:
        assert store is not None
    assert (tmp_path / "x.sqlite3").is_file()


@pytest.mark.parametrize("path", [None, 5, b"x.sqlite3", ":memory:", ":temp:", "a\x00b", "",
                                  "file:x.sqlite3?mode=memory"],
                         ids=["none", "int", "bytes", "memory", "colon", "nul", "empty", "uri"])
async def test_a_path_that_is_not_a_file_name_is_refused_before_any_file(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, path: object) -> None:
    """RUN-STO-1: only a str/os.PathLike[str] naming a file is a store path; None, 5 and
    bytes were str()-ed into files named ``None``, ``5``, ``b'x.sqlite3'``; ``:memory:``
    wrote a 40 KB file of that name, then raised SchemaVersionError; a NUL gave a builtin
    ValueError. Each is a ValidationError naming the argument, and no file is made."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValidationError) as refused:
        async with open_sqlite_store(path):  # type: ignore[arg-type]
            pass  # pragma: no cover - refused before the block
    assert isinstance(refused.value, RunxError)
    assert getattr(refused.value, "argument", None) == "path"
    assert os.listdir(tmp_path) == []


async def test_a_path_like_of_str_opens(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                        ) -> None:
    monkeypatch.chdir(tmp_path)  # str() of it was the file name (in the cwd)

    class Named:
        def __fspath__(self) -> str:
            return str(tmp_path / "n.sqlite3")

    async with open_sqlite_store(Named()):
        pass
    assert os.listdir(tmp_path) == ["n.sqlite3"]

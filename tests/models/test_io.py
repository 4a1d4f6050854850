"""models.io: a file is written whole or not at all (a device or a pipe in place), and read_json reads a file anyone
may have written with bounds, what is wrong one line naming it."""
import errno
import json
import os
import stat
import subprocess
import sys
import time
import threading
from pathlib import Path

import pytest

import models.io
from models.io import MAX_JSON_BYTES, MAX_JSON_DEPTH, atomic_path, read_json


def test_a_file_is_written_whole_or_not_at_all(tmp_path):
    path = tmp_path / "picture.png"
    with atomic_path(path) as tmp:
        tmp.write_bytes(b"the first picture")
    with pytest.raises(KeyboardInterrupt):
        with atomic_path(path) as tmp:
            tmp.write_bytes(b"half")
            raise KeyboardInterrupt  # a Ctrl-C halfway through the second
    assert path.read_bytes() == b"the first picture" and [p.name for p in tmp_path.iterdir()] == ["picture.png"]


def test_a_folder_left_by_a_killed_process_with_this_process_id_is_cleared_first(tmp_path):
    # kill -9 in the middle of models.export_merged leaves .out.tmp-PID/; a later process may get the same id
    # (a container's commands often do), and then its mkdir failed with "File exists" naming out/, which did not
    out = tmp_path / "out"
    left = tmp_path / f".out.tmp-{os.getpid()}"
    left.mkdir()
    (left / "model.safetensors").write_bytes(b"half")
    with atomic_path(out) as tmp:
        tmp.mkdir()
        (tmp / "config.json").write_text("{}")
    assert [p.name for p in tmp_path.iterdir()] == ["out"] and [p.name for p in out.iterdir()] == ["config.json"]


def test_an_error_names_the_file_asked_for_not_its_temporary_name(tmp_path):
    path = tmp_path / "picture.png"
    with pytest.raises(OSError) as error:
        with atomic_path(path) as tmp:
            raise OSError(28, "No space left on device", str(tmp))
    assert str(error.value) == f"[Errno 28] No space left on device: '{path}'" and list(tmp_path.iterdir()) == []


def test_a_move_that_fails_names_the_file_once(tmp_path):
    """os.replace's error names the temporary and the file: the file alone is what was asked for."""
    path = tmp_path / "health.jsonl"
    path.mkdir()  # a folder where the file should go: the move onto it fails
    with pytest.raises(IsADirectoryError) as error:
        with atomic_path(path) as tmp:
            tmp.write_text("a record\n")
    assert str(error.value) == f"[Errno 21] Is a directory: '{path}'" and [p.name for p in tmp_path.iterdir()] == \
        ["health.jsonl"]


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="makes a named pipe")
def test_a_pipe_is_written_in_place_and_stays_a_pipe(tmp_path):
    """Moved over a pipe or a device, the file would take its place: as root, over /dev/null, the system's."""
    pipe = tmp_path / "pipe"
    os.mkfifo(pipe)
    read = []
    reader = threading.Thread(target=lambda: read.append(pipe.read_bytes()), daemon=True)
    reader.start()
    with atomic_path(pipe) as tmp:
        tmp.write_bytes(b"through the pipe")
    reader.join(timeout=10)
    assert read == [b"through the pipe"] and stat.S_ISFIFO(os.stat(pipe).st_mode)
    assert [p.name for p in tmp_path.iterdir()] == ["pipe"]


@pytest.mark.skipif(not hasattr(os, "symlink"), reason="needs symbolic links")
def test_a_link_is_written_through_and_stays_a_link(tmp_path):
    """As open() and an editor write: the file the link names takes the new bytes, its temporary beside it (on its
    filesystem), and the link is not replaced by a plain file of its own."""
    (tmp_path / "disk").mkdir()
    real = tmp_path / "disk" / "health.jsonl"
    real.write_text("old\n")
    link = tmp_path / "health.jsonl"
    link.symlink_to(Path("disk") / "health.jsonl")
    with atomic_path(link) as tmp:
        assert tmp.parent == real.parent.resolve()
        tmp.write_text("new\n")
    assert link.is_symlink() and os.readlink(link) == str(Path("disk") / "health.jsonl")
    assert link.read_text() == real.read_text() == "new\n"
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["disk", "health.jsonl", "health.jsonl"]


@pytest.mark.skipif(os.name != "posix", reason="POSIX permissions")
def test_a_replaced_file_keeps_its_permissions_and_a_new_one_takes_the_umasks(tmp_path):
    private, new = tmp_path / "private.json", tmp_path / "new.json"
    private.write_text("{}")
    private.chmod(0o600)
    umask = os.umask(0o022)
    try:
        for path in (private, new):
            with atomic_path(path) as tmp:
                tmp.write_text('{"a": 1}')
    finally:
        os.umask(umask)
    assert [stat.S_IMODE(p.stat().st_mode) for p in (private, new)] == [0o600, 0o644]


def test_the_move_is_flushed_to_the_disk_with_the_folder_after_the_file(tmp_path, monkeypatch):
    """The file's bytes before the move, the folder's entry list after it: else a power cut may undo a write that
    a later one (prepare_progress.json after its shard) builds on."""
    calls = []

    def replace(source, destination):
        calls.append(("replace", Path(destination).name))
        os.rename(source, destination)

    monkeypatch.setattr(models.io, "fsync", lambda path: calls.append(("fsync", Path(path).name)))
    monkeypatch.setattr(models.io.os, "replace", replace)
    with atomic_path(tmp_path / "a.json") as tmp:
        tmp.write_text("{}")
    assert calls == [("fsync", f".a.json.tmp-{os.getpid()}"), ("replace", "a.json"), ("fsync", tmp_path.name)]
    assert (tmp_path / "a.json").read_text() == "{}"


@pytest.mark.parametrize("code", [errno.EINVAL, errno.ENOTSUP])
def test_a_folder_the_filesystem_cannot_flush_leaves_the_write_standing(tmp_path, monkeypatch, code):
    """A network or FUSE mount that refuses to flush a folder: the file is flushed and moved, so the write stands;
    a file that cannot be flushed is still an error."""
    real = os.fsync

    def fsync(fd):
        if stat.S_ISDIR(os.fstat(fd).st_mode):
            raise OSError(code, os.strerror(code))
        real(fd)

    monkeypatch.setattr(models.io.os, "fsync", fsync)
    with atomic_path(tmp_path / "a.json") as tmp:
        tmp.write_text("{}")
    assert (tmp_path / "a.json").read_text() == "{}"
    monkeypatch.setattr(models.io.os, "fsync", lambda fd: (_ for _ in ()).throw(OSError(code, os.strerror(code))))
    with pytest.raises(OSError):
        with atomic_path(tmp_path / "b.json") as tmp:
            tmp.write_text("{}")
    assert not (tmp_path / "b.json").exists()


def write(tmp_path, text):
    path = tmp_path / "f.json"
    path.write_text(text, encoding="utf-8")
    return path


@pytest.mark.parametrize("text, message", [
    ("[" * 100_000 + "]" * 100_000, "nests arrays or objects more than 64 deep"),  # RecursionError in json itself
    ('{"a": ' + "[" * 5000 + "]" * 5000 + "}", "nests arrays or objects more than 64 deep"),
    ('{"a": ' + '{"b": ' * 64 + "1" + "}" * 64 + "}", "nests arrays or objects more than 64 deep"),
    ("{" + '"a": [' * 70 + "]" * 70 + "}", "is not valid JSON"),
    ("[1, 2]", "should hold a JSON object {...}, but holds an array"),
    ("null", "should hold a JSON object {...}, but holds null"),
    ('"text"', "should hold a JSON object {...}, but holds a string"),
    ("{'a': 1}", "is not valid JSON"),
    ("", "is not valid JSON"),
])
def test_a_bad_json_file_is_one_line_naming_it(tmp_path, text, message):
    path = write(tmp_path, text)
    with pytest.raises(ValueError) as error:
        read_json(path)
    assert str(error.value).startswith(f"{path} ") and message in str(error.value) and "\n" not in str(error.value)


def test_the_deepest_file_allowed_reads(tmp_path):
    obj = {"a": [1]}
    for _ in range(MAX_JSON_DEPTH - 2):
        obj = {"a": obj}
    path = write(tmp_path, json.dumps(obj))
    assert read_json(path) == obj
    write(tmp_path, json.dumps({"a": obj}))
    with pytest.raises(ValueError, match="more than 64 deep"):
        read_json(path)


def test_bytes_that_are_not_utf8_are_one_line(tmp_path):
    path = tmp_path / "f.json"
    path.write_bytes(b'{"a": "\xff"}')
    with pytest.raises(ValueError, match=f"{path} is not valid JSON"):
        read_json(path)


def test_a_file_over_the_limit_is_refused_before_it_is_read(tmp_path, monkeypatch):
    path = tmp_path / "f.json"
    with open(path, "wb") as f:
        f.truncate(MAX_JSON_BYTES + 1)  # sparse: nothing of it is written or read
    monkeypatch.setattr("builtins.open", lambda *a, **k: pytest.fail("a file over the limit was opened"))
    with pytest.raises(ValueError) as error:
        read_json(path)
    assert str(error.value) == (f"{path} is {MAX_JSON_BYTES + 1:,} bytes, more than the {MAX_JSON_BYTES:,} a JSON "
                                "file here may have")


def test_a_file_that_grows_past_the_limit_as_it_is_read_is_refused(tmp_path, monkeypatch):
    path = write(tmp_path, json.dumps({"a": "x" * 200}))
    real_stat = Path.stat
    monkeypatch.setattr(Path, "stat", lambda self, **kwargs: os.stat_result((0o100644, 0, 0, 1, 0, 0, 10, 0, 0, 0))
                        if self == path else real_stat(self, **kwargs))  # what stat() saw before the file grew
    with pytest.raises(ValueError) as error:
        read_json(path, max_bytes=100)
    assert str(error.value) == f"{path} is more than the 100 bytes a JSON file here may have"


@pytest.mark.parametrize("name", ["/dev/zero", "/dev/null", "/proc/self/fd/0"])
def test_a_device_or_pipe_is_no_json_file(name):
    with pytest.raises(FileNotFoundError, match=rf"{name} is not a regular file \(a folder, FIFO or device\)"):
        read_json(name)


def test_temporaries_of_processes_that_no_longer_run_are_swept_and_a_live_writers_stays(tmp_path):
    # kill -9 in the middle of models.export_merged, then a later export of the same folder under another id:
    # the half-written folder stayed beside the new one, as large as the model, for good
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True, check=True).stdout.strip()
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        (tmp_path / f".out.tmp-{dead}").mkdir()
        (tmp_path / f".out.tmp-{dead}" / "model.safetensors").write_bytes(b"half")
        (tmp_path / f".out.tmp-{live.pid}").mkdir()  # another export of the same folder, running now
        (tmp_path / ".out.tmp-notes").write_text("not a temporary of ours")
        (tmp_path / f".outer.tmp-{dead}").write_bytes(b"another file's, whose writer is gone")
        (tmp_path / ".out.tmp-999999999").mkdir()  # an id that does not run here, written a moment ago: another
        (tmp_path / ".out.tmp-999999999" / "part").write_bytes(b"half")  # machine's export, in a shared folder
        for left in (tmp_path / f".out.tmp-{dead}", tmp_path / f".out.tmp-{dead}" / "model.safetensors"):
            os.utime(left, (time.time() - 120,) * 2)  # the killed export's, untouched for two minutes
        with atomic_path(tmp_path / "out") as tmp:
            tmp.mkdir()
        assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
            ["out", f".out.tmp-{live.pid}", ".out.tmp-999999999", ".out.tmp-notes", f".outer.tmp-{dead}"])
    finally:
        live.kill()
        live.wait()

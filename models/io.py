"""Writing files so that an interruption never leaves a half-written one.

Each file is written under a temporary name in the same folder and moved over
the real name with os.replace, which is atomic on one filesystem: a reader
sees the old file or the new one, never a torn mix.
"""
import contextlib
import json
import os
from pathlib import Path


def fsync(path):
    """Flush `path` to the disk, so a rename after it never exposes a file the disk does not hold yet."""
    with open(path, "rb") as f:
        os.fsync(f.fileno())


def give_default_mode(path):
    """The permissions a plain `open` would have given (temporary files and folders are made private)."""
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(path, (0o777 if Path(path).is_dir() else 0o666) & ~umask)


@contextlib.contextmanager
def atomic_path(path):
    """Yield a temporary path beside `path`; it becomes `path` on success and is removed on failure."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        yield tmp
        give_default_mode(tmp)
        fsync(tmp)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def write_json(path, obj):
    with atomic_path(path) as tmp:
        tmp.write_text(json.dumps(obj, indent=2), encoding="utf-8")

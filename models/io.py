"""Writing files so that an interruption never leaves a half-written one.

Each file is written under a temporary name in the same folder and moved over
the real name with os.replace, which is atomic on one filesystem: a reader
sees the old file or the new one, never a torn mix.
"""
import contextlib
import json
import os
from pathlib import Path


@contextlib.contextmanager
def atomic_path(path):
    """Yield a temporary path beside `path`; it becomes `path` on success and is removed on failure."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        yield tmp
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def write_json(path, obj):
    with atomic_path(path) as tmp:
        tmp.write_text(json.dumps(obj, indent=2), encoding="utf-8")

"""Files on disk: written so that an interruption never leaves a half-written one, read with one-line errors.

Each file is written under a temporary name in the same folder (the folder of
the file a symbolic link names: the link stays) and moved over the real name
with os.replace, which is atomic on one filesystem: a reader sees the old file
or the new one, never a torn mix; what a killed writer left there goes with a
later write of that name (once nothing has written it for a minute). `read_json` says which file
is wrong and how (missing, larger than it may be, not JSON, nested too deep, not
an object) instead of a traceback, and never reads more than its size limit:
the files it reads may come from anyone (a downloaded checkpoint folder).
`check_npz_sizes` vets an .npz archive's sizes likewise before NumPy unpacks it.
"""
import contextlib
import errno
import glob
import json
import math
import os
import shutil
import time
import zipfile
from pathlib import Path

import numpy as np

from autograd.heatmaps import is_special, picture_bytes  # below models: gradcheck's picture= needs them too


def fsync(path):
    """Flush the file or folder `path` to the disk, so a rename after it never exposes what the disk does not hold yet.

    A folder's own entry list is flushed too: that is what makes a rename inside it durable.
    """
    if os.name == "nt" and Path(path).is_dir():
        return  # Windows cannot open a folder to flush it
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    except OSError as exc:
        # some filesystems (network and FUSE mounts) cannot flush a folder: what is in it was flushed, and the move
        # is done; the write stands
        if exc.errno not in (errno.EINVAL, errno.ENOTSUP) or not Path(path).is_dir():
            raise
    finally:
        os.close(fd)


def give_default_mode(path, replaced):
    """The permissions a plain `open` would have given (temporary files and folders are made private): those of
    the file `path` replaces, if there is one (a private 0600 file stays private; set-id bits are not carried,
    as writing to a file clears them), else the umask's."""
    try:
        mode = os.stat(replaced).st_mode & 0o777
    except FileNotFoundError:
        umask = os.umask(0)
        os.umask(umask)
        mode = (0o777 if Path(path).is_dir() else 0o666) & ~umask
    os.chmod(path, mode)


@contextlib.contextmanager
def atomic_path(path):
    """Yield a temporary path beside `path`; it becomes `path` on success and is removed on failure.

    The caller makes a file there, or a new folder (whose own files it wrote
    through atomic_path, so they are on the disk): either appears whole or not at all,
    and stays once it has (the folder's entry list is flushed after the move).
    A file it replaces keeps its permissions. A symbolic link is written through, as
    `open` writes: the file it names is replaced (the temporary beside that file, on
    its filesystem) and the link stays. A device or a pipe already at `path`
    (/dev/null, a FIFO) is yielded itself and written in place: it holds no file to
    tear, and a rename over /dev/null would leave a plain file where every program's
    null device was.
    """
    path = Path(path)
    if is_special(path):
        yield path
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    target = Path(os.path.realpath(path))
    tmp = target.with_name(f".{target.name}.tmp-{os.getpid()}")
    _sweep_temporaries(target)
    try:
        yield tmp
        give_default_mode(tmp, target)
        fsync(tmp)
        os.replace(tmp, target)
        fsync(target.parent)
    except OSError as exc:
        if exc.filename in (tmp, str(tmp)):  # (it may be a descriptor, an int, where the call took no path)
            # the error names the file asked for, not its temporary name, and once: where the move onto it
            # failed (os.replace names both), renaming the first name alone would read "'path' -> 'path'"
            raise OSError(exc.errno, exc.strerror, str(path)) from None
        raise
    finally:
        _remove(tmp)


def _sweep_temporaries(target):
    """Remove the temporaries of `target` that killed processes left (kill -9, a power cut): one of this process's
    id, which a killed process that had it left (a new folder could not be made there), and those of an id that no
    longer runs here and that nothing has written for a minute. A live writer's stays: another process may be
    writing `target` now, on this machine or, in a folder shared over the network, on another (whose ids this
    machine cannot see: its temporary is being written)."""
    prefix = f".{target.name}.tmp-"
    for left in target.parent.glob(glob.escape(prefix) + "*"):
        pid = left.name[len(prefix):]
        if pid.isdigit() and (int(pid) == os.getpid() or not _running(int(pid)) and _untouched(left, 60)):
            with contextlib.suppress(FileNotFoundError):  # another process's sweep took it first
                _remove(left)


def _untouched(path, seconds):
    """Whether nothing has written `path`, or a file in the folder `path`, for `seconds`."""
    try:
        stats = [path.lstat()] + ([entry.stat(follow_symlinks=False) for entry in os.scandir(path)]
                                  if path.is_dir() and not path.is_symlink() else [])
    except FileNotFoundError:
        return False
    return time.time() - max(s.st_mtime for s in stats) > seconds


def _running(pid):
    if os.name == "nt":  # there os.kill ends the process: take every id as running
        return True
    try:
        os.kill(pid, 0)  # signal 0: only asks whether the process exists
    except (ProcessLookupError, OverflowError):  # none has this id; none could (beyond the system's ids)
        return False
    except PermissionError:  # another user's process
        return True
    return True


def _remove(path):
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink(missing_ok=True)


def write_figure(path, figure, fmt="png"):
    """A matplotlib `figure` into `path` as `fmt`, whole or not at all (atomic_path): drawn in memory first,
    so that a pipe or a device takes it too (matplotlib's PNG writer seeks back in its file)."""
    data = picture_bytes(figure, fmt)
    with atomic_path(path) as tmp:
        tmp.write_bytes(data)


def owning_folder(path, marks, itself=True):
    """The first of `path` (unless not `itself`) and the folders above it that holds all the files of one of
    `marks` (each a tuple of names: a checkpoint's train_state.json, a prepared corpus's meta.json and first
    shard): whose folder a write to `path` would change; None when there is none. Symbolic links are followed,
    as the write would follow them."""
    folder = Path(os.path.realpath(path))
    for candidate in ([folder] if itself else []) + list(folder.parents):
        if _holds(candidate, marks):
            return candidate
    return None


def owned_folder_below(path, marks):
    """The first folder under `path` (not `path` itself) that holds all the files of one of `marks`; None when
    there is none. Symbolic links to folders are not followed: what they name is not in `path`'s tree."""
    top = os.path.realpath(path)
    return next((Path(root) for root, _, _ in os.walk(top) if root != top and _holds(Path(root), marks)), None)


def _holds(folder, marks):
    return any(all((folder / name).is_file() for name in mark) for mark in marks)


MAX_JSON_BYTES = 256 * 2 ** 20  # far above any file this project writes (GPT-2's vocabulary inline is 2 MB)
MAX_JSON_DEPTH = 64  # this project's files nest 4 deep, Hugging Face's configs a few more
MAX_TEXT_BYTES = 256 * 2 ** 20  # a text file read whole: far above any vocabulary's merges (GPT-2's vocab.bpe: 456 KB)


def read_bounded(path, max_bytes, kind):
    """The bytes of the regular file `path` (`kind` of file, for the messages), or a one-line error: it is missing,
    not a regular file (reading a FIFO would wait forever, a device may never end), or over `max_bytes`."""
    path = Path(path)
    if not path.is_file():  # a folder, FIFO or device of that name is no more the file than nothing is
        raise FileNotFoundError(f"{path} is missing" if not path.exists()
                                else f"{path} is not a regular file (a folder, FIFO or device)")
    size = path.stat().st_size
    if size > max_bytes:
        raise ValueError(f"{path} is {size:,} bytes, more than the {max_bytes:,} {kind} here may have")
    with open(path, "rb") as f:
        data = f.read(max_bytes + 1)  # the file may have grown since stat()
    if len(data) > max_bytes:
        raise ValueError(f"{path} is more than the {max_bytes:,} bytes {kind} here may have")
    return data


def read_json(path, max_bytes=MAX_JSON_BYTES, max_depth=MAX_JSON_DEPTH):
    """The JSON object in `path`, or a one-line error that names the file and what is wrong with it.

    A file over `max_bytes` is refused before it is read, and one that nests
    arrays and objects more than `max_depth` deep after it is parsed (Python's
    parser itself gives up at about a thousand levels, with a RecursionError).
    """
    path = Path(path)
    data = read_bounded(path, max_bytes, "a JSON file")
    try:
        obj = json.loads(data.decode("utf-8"))
    except ValueError as exc:  # not UTF-8, not JSON, or a number of more digits than Python converts
        raise ValueError(f"{path} is not valid JSON ({exc})") from None
    except RecursionError:
        obj = _TOO_DEEP
    if obj is _TOO_DEEP or _depth_exceeds(obj, max_depth):
        raise ValueError(f"{path} nests arrays or objects more than {max_depth} deep; no file here does")
    if not isinstance(obj, dict):
        raise ValueError(f"{path} should hold a JSON object {{...}}, but holds {json_type(obj)}")
    return obj


_TOO_DEEP = object()


def _depth_exceeds(obj, max_depth):
    """Whether `obj` (parsed JSON) nests lists and dicts more than `max_depth` deep; without recursion."""
    containers = (list, dict)
    level, depth = ([obj] if isinstance(obj, containers) else []), 0
    while level:
        depth += 1
        if depth > max_depth:
            return True
        level = [child for node in level for child in (node.values() if isinstance(node, dict) else node)
                 if isinstance(child, containers)]
    return False


_NPY_HEADERS = {(1, 0): np.lib.format.read_array_header_1_0, (2, 0): np.lib.format.read_array_header_2_0}


def check_npz_sizes(path, limit=None, within=""):
    """Refuse, before anything is unpacked, the npz archive `path` whose entries unpack to more than `limit`
    bytes (`within` ends the message: what that limit is), or one with an entry that is not an .npy array of the
    versions NumPy writes, or whose header claims more data than the entry holds: NumPy allocates what a header
    claims before it reads a byte, so a file of a few bytes could ask for terabytes. (An entry never unpacks to
    more than the size the archive lists for it: zipfile stops there.)"""
    with zipfile.ZipFile(path) as archive:
        entries = archive.infolist()
        total = sum(entry.file_size for entry in entries)
        if limit is not None and total > limit:
            raise ValueError(f"it unpacks to {total:,} bytes, more than {within}")
        for entry in entries:
            with archive.open(entry) as f:
                version = np.lib.format.read_magic(f)
                if version not in _NPY_HEADERS:
                    raise ValueError(f"entry {entry.filename} is an .npy of version {version}, which "
                                     "np.savez never writes")
                shape, _, dtype = _NPY_HEADERS[version](f)
            if any(n < 0 for n in shape):
                raise ValueError(f"entry {entry.filename} claims the shape {shape}, with a negative length")
            if dtype.itemsize * math.prod(shape) > entry.file_size:
                raise ValueError(f"entry {entry.filename} claims a {shape} {dtype} array, more than its "
                                 f"{entry.file_size:,} bytes hold")


def json_type(value):
    """What JSON calls the type of `value`, with its article, for error messages."""
    kinds = ((bool, "true/false"), (int, "a number"), (float, "a number"), (str, "a string"),
             (list, "an array"), (dict, "an object"))
    return next((name for kind, name in kinds if isinstance(value, kind)), "null")

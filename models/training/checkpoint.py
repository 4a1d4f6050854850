"""Training checkpoints: a folder that always holds one complete, consistent checkpoint.

A checkpoint folder (models.train's --out-dir) holds, all from one iteration:

    config.json, model.safetensors   the weights, in Hugging Face's GPT-2 format (transformers loads the folder)
    tokenizer.json                   the tokenizer whose ids the model reads and writes
    optimizer.npz                    AdamW's moment estimates by parameter position, and the iteration
    train_state.json                 the iteration, the losses so far, the checkpoint's val loss, both random
                                     generators' states, the run's options and AdamW's step counts; how an
                                     iteration's rows were made (batch x grad-accum x ranks) and, from a job
                                     of several ranks, every rank's dropout generator
    loss.png                         the loss curve, which models.train redraws at the end of a run

`save` writes a whole new checkpoint into `.NAME.tmp/` beside the folder, flushes
every file and folder to the disk, and then exchanges it with the folder in one
atomic step (Linux's renameat2 with RENAME_EXCHANGE): at every instant, so after
an interruption at any instant, NAME/ holds the previous checkpoint or the new
one, each complete. Where the system cannot exchange two folders, NAME/ is
renamed to `.NAME.prev/` and the new one then takes its name; in the instant
between those two renames only `.NAME.prev/` holds a checkpoint, so the readers
here look there when NAME/ is missing, and the next save (`recover`) moves it back.
Nothing else is left beside the folder: `.NAME.tmp/` is always safe to delete,
and every save deletes what an interrupted one left. While a run trains, it
holds `.NAME.lock`, so that a second run into the same folder is refused.

The loaders check what they read and name the file and what is wrong with it
in one line: a missing file, damaged JSON or npz, a field of the wrong type,
an optimizer of another model, a tokenizer that does not fit the weights.
"""
import contextlib
import ctypes
import errno
import fnmatch
import json
import os
import shutil
import sys
import zipfile
from pathlib import Path

import numpy as np

from models.gpt2 import GPT
from models.io import fsync, json_type, read_json
from models.tokenizer import GPT2Tokenizer, tokenizer_from_dict

CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"
TOKENIZER_FILE = "tokenizer.json"
OPTIMIZER_FILE = "optimizer.npz"
STATE_FILE = "train_state.json"
PLOT_FILE = "loss.png"
FILES = (CONFIG_FILE, WEIGHTS_FILE, TOKENIZER_FILE, OPTIMIZER_FILE, STATE_FILE)
_PLOT_DEBRIS = f".{PLOT_FILE}.tmp-*"  # what models.io.atomic_path leaves of a plot when killed

_NUMBER = (int, float)
_TYPE_NAMES = {int: "an integer", _NUMBER: "a number", list: "an array", dict: "an object"}
_STATE_FIELDS = {"iter": int, "history": list, "evals": list, "val_loss": _NUMBER, "data_rng": dict,
                 "model_rng": dict, "options": dict, "optimizer": dict}
# What models.parallel adds: how an iteration's rows were made, and in a job of several ranks each one's generator.
_JOB_FIELDS = {"batch": dict, "model_rngs": list}
_LAYOUT_FIELDS = {"batch_size": int, "grad_accum": int, "ranks": int}


def _sibling(folder, role):
    """The path beside `folder` that plays `role` in a save ("tmp", "prev") or a run ("lock")."""
    return folder.parent / f".{folder.name}.{role}"


def _real(folder):
    """`folder` with symbolic links followed: a save swaps the folder a link points to, never the link itself."""
    return Path(os.path.realpath(folder))


def _current(folder):
    """`folder`, or its previous checkpoint while a save without an atomic exchange is between its two renames."""
    prev = _sibling(_real(folder), "prev")
    return prev if not Path(folder).exists() and prev.is_dir() else Path(folder)


def recover(folder):
    """Finish or undo a save that was interrupted: its checkpoint back in `folder`, its temporaries gone."""
    folder = _real(folder)
    prev = _sibling(folder, "prev")
    if prev.exists():
        if folder.exists():
            shutil.rmtree(prev)  # the new checkpoint was in place: this is the old one on its way out
        else:
            os.rename(prev, folder)  # stopped between the two renames: the previous checkpoint returns
    shutil.rmtree(_sibling(folder, "tmp"), ignore_errors=True)
    for debris in folder.glob(_PLOT_DEBRIS):
        debris.unlink()


@contextlib.contextmanager
def writer_lock(folder):
    """Hold `.NAME.lock` beside the folder while training writes to it: a second run into it stops with one line.

    Two writers would each clear the other's half-written save. The lock is the
    operating system's (flock), so it dies with its process; the file goes when
    the run ends, and a killed run's file is simply taken over by the next.
    """
    try:
        import fcntl
    except ImportError:  # Windows: no advisory locks here
        yield
        return
    path = _sibling(_real(folder), "lock")
    path.parent.mkdir(parents=True, exist_ok=True)
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            owner = os.read(fd, 20).decode(errors="replace") or "?"
            os.close(fd)
            raise ValueError(f"another training run (process {owner}) is writing to {folder}; "
                             "wait for it to end or choose another --out-dir") from None
        if path.exists() and path.stat().st_ino == os.fstat(fd).st_ino:
            break
        os.close(fd)  # its holder removed the file as we opened it: lock the next one
    try:
        os.ftruncate(fd, 0)
        os.write(fd, str(os.getpid()).encode())
        yield
    finally:
        path.unlink()
        os.close(fd)


def check_out_dir(folder, resume, overwrite):
    """Refuse, in one line, to train into `folder` where that would lose something or find nothing to resume."""
    current = _current(folder)
    names = sorted(p.name for p in current.iterdir()) if current.is_dir() else []
    foreign = [name for name in names if name not in (*FILES, PLOT_FILE) and not fnmatch.fnmatch(name, _PLOT_DEBRIS)]
    if foreign:
        listed = ", ".join(foreign[:3]) + (", …" if len(foreign) > 3 else "")
        raise ValueError(f"--out-dir {folder} holds {listed}, which no checkpoint has; every save replaces "
                         "the whole folder, so give the checkpoints a folder of their own")
    if resume and STATE_FILE not in names:
        raise ValueError(f"--resume: no checkpoint to resume in {folder} (no {STATE_FILE} there)")
    if not resume and not overwrite and any(name in FILES for name in names):
        iteration = saved_iteration(folder)
        what = f"the checkpoint of iteration {iteration}" if iteration is not None else "a checkpoint"
        raise ValueError(f"{folder} already holds {what}; pass --resume to continue it "
                         "or --overwrite to replace it")


def save(folder, model, tokenizer, optimizer, state):
    """Write a complete checkpoint of `state` (see _STATE_FIELDS) and put it in `folder`'s place in one step."""
    folder = _real(folder)
    recover(folder)
    scratch = _sibling(folder, "tmp")
    scratch.mkdir(parents=True)
    new = scratch / "checkpoint"
    try:
        model.save_pretrained(new)
        (new / TOKENIZER_FILE).write_text(json.dumps(tokenizer.to_dict(), indent=2), encoding="utf-8")
        opt_state = optimizer.state_dict()
        arrays = {f"{i}.{k}": v for i, s in opt_state["state"].items() for k, v in s.items() if k != "step"}
        with open(new / OPTIMIZER_FILE, "wb") as f:
            np.savez(f, iter=np.int64(state["iter"]), **arrays)
        meta = {"steps": opt_state["steps"], "param_steps": {str(i): s["step"] for i, s in opt_state["state"].items()}}
        (new / STATE_FILE).write_text(json.dumps({**state, "optimizer": meta}, indent=2), encoding="utf-8")
        if (folder / PLOT_FILE).is_file():
            _link_or_copy(folder / PLOT_FILE, new / PLOT_FILE)
        for path in new.iterdir():
            fsync(path)
        fsync(new)
        _swap_in(new, folder)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _link_or_copy(source, target):
    try:
        os.link(source, target)  # no copy: the old folder's entry goes, this one stays
    except OSError:
        shutil.copy2(source, target)


def _swap_in(new, folder):
    if not folder.exists():
        os.rename(new, folder)  # the first checkpoint appears whole or not at all
    elif not _exchange(new, folder):
        prev = _sibling(folder, "prev")
        os.rename(folder, prev)
        os.rename(new, folder)
        shutil.rmtree(prev)
    fsync(folder.parent)


_AT_FDCWD, _RENAME_EXCHANGE = -100, 2  # from Linux's fcntl.h and fs.h


def _exchange(a, b):
    """Swap the paths `a` and `b` in one atomic step; False where the system cannot (not Linux, or its file system)."""
    if not sys.platform.startswith("linux"):
        return False
    renameat2 = getattr(ctypes.CDLL(None, use_errno=True), "renameat2", None)  # glibc 2.28+, musl 1.2.2+
    if renameat2 is None:
        return False
    renameat2.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    if renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    code = ctypes.get_errno()
    if code in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
        return False
    raise OSError(code, os.strerror(code), str(b))


def saved_iteration(folder):
    """The iteration of the checkpoint in `folder`, or None where there is no readable one."""
    try:
        return load_state(folder)["iter"]
    except (OSError, ValueError):
        return None


def load_state(folder):
    """train_state.json of the checkpoint in `folder`, checked field by field against what a save writes."""
    path = _current(folder) / STATE_FILE
    state = read_json(path)
    _require_fields(path, state, _STATE_FIELDS)
    _require_fields(path, state["optimizer"], {"steps": int, "param_steps": dict}, "optimizer.")
    _require_fields(path, state, {key: kind for key, kind in _JOB_FIELDS.items() if key in state})
    if "batch" in state:
        _require_fields(path, state["batch"], _LAYOUT_FIELDS, "batch.")
        if min(state["batch"][key] for key in _LAYOUT_FIELDS) < 1:
            raise ValueError(f"{path}: 'batch' should hold counts of at least 1, not {json.dumps(state['batch'])}")
    history, evals = state["history"], state["evals"]
    if len(history) != state["iter"] or not all(_is(x, _NUMBER) for x in history):
        raise ValueError(f"{path}: 'history' should list {state['iter']} losses, one per iteration "
                         f"up to 'iter', but has {len(history)} entries")
    for entry in evals:
        if not (isinstance(entry, dict) and all(_is(entry.get(k), _NUMBER) for k in ("iter", "train", "val"))):
            raise ValueError(f"{path}: every entry of 'evals' should be an object with numbers 'iter', "
                             f"'train' and 'val', but one is {json.dumps(entry)[:60]}")
    if state["optimizer"]["steps"] != state["iter"]:
        raise ValueError(f"{path}: the optimizer took {state['optimizer']['steps']} steps but 'iter' is "
                         f"{state['iter']}; the file mixes two checkpoints")
    streams = {"data_rng": state["data_rng"], "model_rng": state["model_rng"],
               **{f"model_rngs[{i}]": s for i, s in enumerate(state.get("model_rngs", []))}}
    for key, stream in streams.items():
        try:
            np.random.PCG64().state = stream  # the generator all streams use: does the state fit it?
        except (TypeError, ValueError, KeyError) as exc:
            raise ValueError(f"{path}: {key!r} is not a random generator's state ({exc})") from None
    return state


def _is(value, kinds):
    return isinstance(value, kinds) and not isinstance(value, bool)


def _require_fields(path, obj, fields, prefix=""):
    for key, kinds in fields.items():
        if key not in obj:
            raise ValueError(f"{path} lacks {prefix}{key!r}; it was not written by models.train, or was damaged")
        if not _is(obj[key], kinds):
            raise ValueError(f"{path}: {prefix}{key!r} should be {_TYPE_NAMES[kinds]}, not {json_type(obj[key])}")


def restore_optimizer(folder, optimizer, state):
    """Load optimizer.npz into `optimizer` (hyper-parameters stay as `optimizer` has them); `state` from load_state."""
    path = _current(folder) / OPTIMIZER_FILE
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing")
    try:
        with np.load(path) as f:
            arrays = {key: f[key] for key in f.files}
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as exc:
        raise ValueError(f"{path} is damaged ({type(exc).__name__}: {exc})") from None
    saved_iter = arrays.pop("iter", None)
    if saved_iter is None or saved_iter.shape != () or int(saved_iter) != state["iter"]:
        raise ValueError(f"{path} belongs to iteration {saved_iter} but {STATE_FILE} to {state['iter']}; "
                         "the folder mixes two checkpoints")
    buffers = {}
    for key, array in arrays.items():
        index, _, name = key.partition(".")
        if not index.isdigit() or not name:
            raise ValueError(f"{path} holds an entry {key!r}; expected '<parameter index>.<buffer name>'")
        buffers.setdefault(int(index), {})[name] = array
    steps = {int(i): n for i, n in state["optimizer"]["param_steps"].items() if i.isdigit()}
    if set(steps) != set(buffers) or not all(_is(n, int) for n in steps.values()):
        raise ValueError(f"{path} has buffers for parameters {sorted(buffers)} but {STATE_FILE} counts steps "
                         f"for {sorted(steps)}; the folder mixes two checkpoints")
    for index, n in steps.items():
        buffers[index]["step"] = n
    groups = [{k: v for k, v in group.items() if k != "params"} for group in optimizer.param_groups]
    try:
        optimizer.load_state_dict({"steps": state["optimizer"]["steps"], "param_groups": groups, "state": buffers})
    except ValueError as exc:
        raise ValueError(f"{path} does not fit this model: {exc}") from None


def load_model(folder, dropout=0.0):
    """The model and tokenizer of a checkpoint folder, or of a Hugging Face GPT-2 folder (with GPT-2's tokenizer).

    Refuses, in one line, a tokenizer whose vocabulary does not fit the model's
    and weights that are not finite (they could only ever produce one token).
    """
    folder = _current(folder)
    if not (folder / CONFIG_FILE).is_file():
        raise FileNotFoundError(f"no checkpoint in {folder}: expected {CONFIG_FILE} and {WEIGHTS_FILE} "
                                "(train one with `python -m models.train`)")
    model = GPT.from_pretrained(folder, dropout=dropout)
    vocab_size = model.config.vocab_size
    path = folder / TOKENIZER_FILE
    if path.exists():
        description = read_json(path)
        try:
            tokenizer = tokenizer_from_dict(description)
        except (KeyError, TypeError, ValueError, OSError) as exc:
            problem = f"it lacks {exc.args[0]!r}" if isinstance(exc, KeyError) else str(exc)
            raise ValueError(f"{path} does not describe a tokenizer: {problem}") from None
        if tokenizer.vocab_size != vocab_size:
            raise ValueError(f"{path} has {tokenizer.vocab_size} tokens but the model in {folder} has "
                             f"vocab_size {vocab_size}; the two files come from different runs")
    else:
        tokenizer = GPT2Tokenizer()
        if tokenizer.vocab_size > vocab_size:  # a larger (padded) vocabulary holds all of GPT-2's ids
            raise ValueError(f"{folder} has no {TOKENIZER_FILE}, and GPT-2's tokenizer ({tokenizer.vocab_size} "
                             f"tokens) does not fit its model (vocab_size {vocab_size}); add the {TOKENIZER_FILE} "
                             "of the run that trained it")
    for name, p in model.named_parameters():
        if not np.isfinite(p.data).all():
            raise ValueError(f"the weights in {folder} are damaged: {name} holds NaN or infinite values")
    return model, tokenizer


def resume_options(args, state, given, fixed, check, folder, more=None):
    """Put the options of a checkpoint's run into `args` wherever the command line did not set them; say what differs.

    `state` is load_state's, `given` names the options the command line set,
    options in `fixed` (the model's shape) always come from the checkpoint, and
    `check(name, value)` vets a saved value as if it had been typed. `more(args)`,
    asked once the options are in, adds what else changed (a list, such as the
    number of processes) and a remark on it (or None) to the same line. Returns
    up to two lines to print.
    """
    changed, ignored = [], []
    for name, old in state["options"].items():
        if not hasattr(args, name):
            continue
        new = getattr(args, name)
        flag = "--" + name.replace("_", "-")
        if name in given and new != old:
            if name not in fixed:
                changed.append(f"{flag} {old} → {new}")
                continue
            ignored.append(f"{flag} {new} (keeping {old})")
        if name not in fixed:
            try:
                old = check(name, old)
            except ValueError as exc:
                raise ValueError(f"{_current(folder) / STATE_FILE}: the saved option {exc}") from None
        setattr(args, name, old)
    also, remark = more(args) if more else ([], None)
    changed += also
    lines = []
    if changed:
        lines.append("resume: the command line changes " + ", ".join(changed) + "; all else as the checkpoint had it"
                     + (f"; {remark}" if remark else ""))
    if ignored:
        lines.append("resume: the checkpoint fixes the model, so it ignores " + ", ".join(ignored))
    return lines

"""Training checkpoints: a folder that always holds one complete, consistent checkpoint, and the run's state.

A checkpoint folder (models.train's --out-dir) holds, all from one iteration:

    config.json, model.safetensors   the weights, in Hugging Face's GPT-2 format (transformers loads the folder);
                                     a LoRA run (--lora-r) writes instead
    adapter_config.json, adapters.safetensors   the adapters alone, and which base folder (with its hash) they adapt
    gptgrad_tokenizer.json           the tokenizer whose ids the model reads and writes (this project's record)
    tokenizer.json, tokenizer_config.json   the same tokenizer in Hugging Face's format (AutoTokenizer loads it)
    optimizer.npz                    the optimizer's own state_dict: its step count, hyper-parameters and buffers
    train_state.json                 the `RunState`: the iteration, the losses so far, the evaluations, the
                                     checkpoint's val loss, the run's options, how an iteration's rows were
                                     made (batch x grad-accum x ranks), the random generators' states
                                     (the batches', and every rank's dropout generator) and a fingerprint
                                     of the data it trained on (check_data)
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

`resume` is the one way back in: it reads the run state, puts the checkpoint's
options into the command line's, and loads the model, tokenizer and optimizer
state; `check_data` then refuses data that changed since the checkpoint trained
on it. The loaders check what they read and name the file and what is wrong
with it in one line: a missing file, damaged JSON or npz, a field of the wrong
type, an optimizer of another model, a tokenizer that does not fit the weights.
"""
import argparse
import contextlib
import ctypes
import errno
import fnmatch
import hashlib
import json
import math
import os
import re
import shutil
import sys
import time
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

import autograd as ag
import nn
from autograd.heatmaps import picture_format
from models.cli import hub_name, input_folder, output_file, show_default
from models.gpt import hf_checkpoint
from models.training.data import Layout
from models.gpt.gpt2 import GPT, GPTConfig
from models.io import atomic_path, check_npz_sizes, fsync, json_type, owning_folder, read_json
from models.training.shards import META_FILE, PROGRESS_FILE, shard_name
from models.gpt.tokenizer import GPT2Tokenizer, tokenizer_from_dict

CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"
TOKENIZER_FILE = "gptgrad_tokenizer.json"  # this project's record; tokenizer.json is Hugging Face's
OPTIMIZER_FILE = "optimizer.npz"
STATE_FILE = "train_state.json"
PLOT_FILE = "loss.png"
# What the training app writes beside a checkpoint: the loss curve, the health report (models/training/health.py)
# and detect_anomaly's pictures (viz/anomaly.py). A folder may hold them. Every save keeps the first two; the
# anomaly's pictures show a run that stopped, so a save (a finite loss again, resumed) leaves them behind.
HEALTH_FILES = ("health.jsonl", "health.png")
ANOMALY_FILES = ("anomaly_graph.svg", "anomaly_graph.dot", "anomaly_trace.html")
KEPT_FILES = (PLOT_FILE, *HEALTH_FILES)
REPORT_FILES = (*KEPT_FILES, *ANOMALY_FILES)
ADAPTER_CONFIG_FILE = "adapter_config.json"
ADAPTERS_FILE = "adapters.safetensors"
FILES = (CONFIG_FILE, WEIGHTS_FILE, ADAPTER_CONFIG_FILE, ADAPTERS_FILE, TOKENIZER_FILE,
         *hf_checkpoint.HF_TOKENIZER_FILES, OPTIMIZER_FILE, STATE_FILE)
# The files that make a folder a checkpoint or a model's: no other command writes into or under such a folder.
CHECKPOINT_MARKS = ((STATE_FILE,), (CONFIG_FILE, WEIGHTS_FILE), (ADAPTER_CONFIG_FILE, ADAPTERS_FILE))
# And those of models.prepare's folders, finished or not.
PREPARED_MARKS = ((META_FILE, shard_name("train", 0)), (PROGRESS_FILE,))
# train_state.json holds their SHA-256 (the weights, or a LoRA run's adapters): resume finds a file of another run
_DIGESTED = (WEIGHTS_FILE, ADAPTERS_FILE, ADAPTER_CONFIG_FILE, CONFIG_FILE, TOKENIZER_FILE, OPTIMIZER_FILE)
# What models.io.atomic_path leaves of a report file when killed as it writes one (SIGTERM, SIGKILL, a crash)
_REPORT_DEBRIS = tuple(f".{name}.tmp-*" for name in REPORT_FILES)

# What a checkpoint fixes for good (its model) and what it does not store (how this run is carried out);
# every other option is stored with the checkpoint and, on --resume, used again unless the command line changes it.
MODEL_OPTIONS = ("tokenizer", "n_layer", "n_head", "n_embd", "no_bias", "init_from", "lora_r", "lora_alpha",
                 "lora_targets")
RUN_OPTIONS = ("out_dir", "resume", "overwrite", "eval_only", "device", "pad_vocab", "sample_tokens",
               "no_progress", "detect_anomaly", "health_interval")
# Options naming a file or folder: given relative, each is saved relative to the checkpoint's folder, so that a
# run resumed from another working folder finds it, and ranks laid out alike save the same options.
PATH_OPTIONS = ("data",)


def is_stored(name):
    """Whether a checkpoint stores the attribute `name` of models.train's parsed options: not a RUN_OPTIONS one,
    nor `given` (which options the command line gave)."""
    return name not in RUN_OPTIONS and name != "given"


def saved_paths(options, folder):
    """`options` as a checkpoint in `folder` keeps them: each relative PATH_OPTIONS path made relative to it."""
    return {name: os.path.relpath(os.path.abspath(value), os.path.abspath(folder))
            if name in PATH_OPTIONS and value is not None and not os.path.isabs(value) else value
            for name, value in options.items()}

FORMAT = 2  # train_state.json's layout; 1 (no "format" field) kept the optimizer's step counts apart from its buffers
_NUMBER = (int, float)
_TYPE_NAMES = {int: "an integer", _NUMBER: "a number", list: "an array", dict: "an object"}
_STATE_FIELDS = {"format": int, "iter": int, "history": list, "evals": list, "val_loss": _NUMBER, "options": dict,
                 "batch": dict, "data_rng": dict, "model_rngs": list}
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
    for pattern in _REPORT_DEBRIS:
        for debris in folder.glob(pattern):
            debris.unlink()


@contextlib.contextmanager
def writer_lock(folder, writer="training run", option="--out-dir"):
    """Hold `.NAME.lock` beside the folder while training (or `writer`, whose `option` names the folder) writes to
    it: a second run into it stops with one line, naming the holder's kind and process id (the file's "PID KIND").

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
    patience = time.monotonic() + 0.2  # a reader's probe (writer_of) holds the lock for an instant, a writer for good
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            owner, _, kind = os.read(fd, 100).decode(errors="replace").partition(" ")
            os.close(fd)
            if time.monotonic() < patience:
                time.sleep(0.01)
                continue
            raise ValueError(f"another {kind or 'training run'} (process {owner or '?'}) is writing to {folder}; "
                             f"wait for it to end or choose another {option}") from None
        if path.exists() and path.stat().st_ino == os.fstat(fd).st_ino:
            break
        os.close(fd)  # its holder removed the file as we opened it: lock the next one
    try:
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()} {writer}".encode())
        yield
    finally:
        # Only while the path still names the file this run locked: one deleted by hand (and perhaps taken by the
        # next run) is not this run's to remove, and a leftover file costs nothing (the next run takes it over), so
        # its removal failing must not turn a finished run, or the error that ended it, into an errno line.
        with contextlib.suppress(OSError):
            if path.stat().st_ino == os.fstat(fd).st_ino:
                path.unlink()
        os.close(fd)


def writer_of(folder):
    """The process id of the run writing to `folder` (holding writer_lock's lock), or None: probed, not taken, so
    a reader makes no lock file."""
    try:
        import fcntl
        fd = os.open(_sibling(_real(folder), "lock"), os.O_RDONLY)
    except (ImportError, OSError):  # Windows, or no lock file: no writer
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        return None
    except BlockingIOError:
        return os.read(fd, 100).decode(errors="replace").partition(" ")[0] or "?"
    finally:
        os.close(fd)  # which releases a lock this probe took


def _is_mount_point(path):
    """Whether `path` is a mount point: os.path.ismount sees one only where its device differs from its parent's,
    so a bind mount from the same disk (a container's volume often is) is looked up in the kernel's mount table
    too, where there is one (Linux's /proc/self/mountinfo: the fifth field, spaces written as \\040)."""
    if os.path.ismount(path):
        return True
    try:
        with open("/proc/self/mountinfo", encoding="utf-8", errors="surrogateescape") as f:
            points = {re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), line.split()[4]) for line in f}
    except OSError:
        return False
    return str(path) in points


def check_out_dir(folder, resume, overwrite):
    """Refuse, in one line, to train into `folder` where that would lose something or find nothing to resume."""
    owner = owning_folder(folder, CHECKPOINT_MARKS + PREPARED_MARKS, itself=False)
    if owner is not None:
        what = "a prepared corpus" if owning_folder(folder, PREPARED_MARKS, itself=False) == owner else "a checkpoint"
        raise ValueError(f"--out-dir {folder} is inside {owner}, which holds {what} that a save here would break; "
                         "give the checkpoints a folder of their own")
    if _is_mount_point(_real(folder)):  # a save's new folder is made beside it, on the disk above: no rename crosses
        raise ValueError(f"--out-dir {folder} is a mount point, and every save puts a whole new folder in its "
                         f"place, which a mount point cannot take; give a folder inside it, e.g. {folder / 'out'}")
    current = _current(folder)
    names = sorted(p.name for p in current.iterdir()) if current.is_dir() else []
    foreign = [name for name in names if name not in (*FILES, *REPORT_FILES)
               and not any(fnmatch.fnmatch(name, pattern) for pattern in _REPORT_DEBRIS)]
    if foreign:
        listed = ", ".join(foreign[:3]) + (", …" if len(foreign) > 3 else "")
        raise ValueError(f"--out-dir {folder} holds {listed}, which no checkpoint has; every save replaces "
                         "the whole folder, so give the checkpoints a folder of their own")
    if resume and STATE_FILE not in names:
        raise ValueError(f"--resume: no checkpoint to resume in {folder} (no {STATE_FILE} there)")
    if not resume and not overwrite and any(name in FILES for name in names):
        if STATE_FILE not in names:  # a model's folder (a downloaded GPT-2, say), not a run of models.train
            raise ValueError(f"{folder} holds a model ({', '.join(n for n in names if n in FILES)}) but no "
                             f"{STATE_FILE}, so no run to resume; to train from it, give --init-from {folder} and "
                             "another --out-dir (--overwrite would delete it)")
        iteration = saved_iteration(folder)
        what = f"the checkpoint of iteration {iteration}" if iteration is not None else "a checkpoint"
        raise ValueError(f"{folder} already holds {what}; pass --resume to continue it "
                         "or --overwrite to replace it")


class SaveFailed(OSError):
    """A save that the system refused (a full or read-only disk): one line naming the file and what the folder holds."""


def picture_file(text):
    """A `type=` function for what a command draws (a picture, a page, a graph's source): cli.output_file's checks,
    and outside every checkpoint's, model's and prepared corpus's folder, a link counting where it points. A file
    there would replace one of theirs (moons --out ck/model.safetensors wrote a PNG over the weights), or be one
    that --resume refuses; no command but models.train and models.prepare writes into them."""
    output_file(text)
    owner = owning_folder(text, CHECKPOINT_MARKS + PREPARED_MARKS, itself=False)
    if owner is not None:
        raise argparse.ArgumentTypeError(f"{text} is inside {owner}, which holds a checkpoint, a model or a prepared "
                                         "corpus that the file would break; write it outside that folder")
    return text


def figure_file(text):
    """A `type=` function for a matplotlib picture: picture_file's checks, and a name whose suffix says the format
    it is written in (heatmaps.picture_format: .png, .svg or .pdf); moons --out m.svg held PNG bytes."""
    picture_file(text)
    try:
        picture_format(text, "the name")
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def default_picture(parser, name):
    """`name`, what a command draws into the current folder when its --out is not given, held to picture_file's
    rule (the current folder may be a checkpoint's); else the parser's one-line error."""
    try:
        return picture_file(name)
    except argparse.ArgumentTypeError as exc:
        parser.error(f"the default output {exc}, or give --out")


def save(folder, model, tokenizer, optimizer, run):
    """Write a complete checkpoint of the `run` (a RunState) and put it in `folder`'s place in one step.

    Where the system refuses a write (no space left, a read-only disk), raises
    SaveFailed, saying which file and which checkpoint the folder still holds;
    nothing of the failed save is left behind.
    """
    folder = _real(folder)
    scratch = _sibling(folder, "tmp")
    new = scratch / "checkpoint"
    writing = f"{scratch}/ (clearing an earlier save's temporaries)"  # what was being written when a write failed
    try:
        recover(folder)
        writing = f"{scratch}/"
        scratch.mkdir(parents=True)
        lora = bool(getattr(model, "lora_base", None))
        weights_file = ADAPTERS_FILE if lora else WEIGHTS_FILE
        writing = f"{weights_file} and {ADAPTER_CONFIG_FILE if lora else CONFIG_FILE}"
        if lora:
            _save_adapters(new, model)
        else:
            model.save_pretrained(new)
        writing = TOKENIZER_FILE
        write_tokenizer(new, tokenizer, model.config.block_size)
        writing = OPTIMIZER_FILE
        digests = {OPTIMIZER_FILE: _save_optimizer(new / OPTIMIZER_FILE, _real_vocabulary_state(optimizer, model))}
        writing = STATE_FILE
        for name in _DIGESTED:  # every file resume relies on, of those this checkpoint has
            if name not in digests and (new / name).is_file():
                digests[name] = _sha256(new / name)
        (new / STATE_FILE).write_text(json.dumps(run.to_json(digests), indent=2), encoding="utf-8")
        writing = ", ".join(KEPT_FILES)
        for name in KEPT_FILES:
            if (folder / name).is_file():
                _link_or_copy(folder / name, new / name)
        writing = f"{new}/ (flushing it to the disk)"
        for path in new.iterdir():
            fsync(path)
        fsync(new)
        writing = f"{folder}/ (putting the new checkpoint in its place)"
        _swap_in(new, folder)
    except OSError as exc:
        raise SaveFailed(_save_failure(folder, run.iter, writing, exc)) from None
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def write_tokenizer(folder, tokenizer, max_length):
    """The tokenizer's files in `folder`: this project's record, and Hugging Face's for transformers' AutoTokenizer
    (where the tokenizer has a form there), each written atomically."""
    with atomic_path(Path(folder) / TOKENIZER_FILE) as tmp:
        tmp.write_text(json.dumps(tokenizer.to_dict(), indent=2), encoding="utf-8")
    hf_checkpoint.save_tokenizer(tokenizer, folder, max_length)


def adapt(model, base_folder, r, alpha, targets):
    """Put LoRA adapters (nn.lora) into `model`, read from the Hugging Face folder `base_folder`, and remember that
    base (its folder and fingerprint): a checkpoint of the run then holds the adapters alone."""
    replaced = nn.lora(model, r, alpha, targets)
    model.lora_base = {"folder": str(Path(base_folder).resolve()), "sha256": fingerprint(base_folder),
                       "r": r, "alpha": alpha, "targets": list(targets)}
    return replaced


def fingerprint(folder):
    """SHA-256 over a Hugging Face folder's config.json and weight files: which base a LoRA checkpoint adapts."""
    folder = Path(folder)
    # regular files only: a FIFO or a link to /dev/zero named *.safetensors would be read forever
    return _sha256(folder / CONFIG_FILE, *sorted(p for p in folder.glob("*.safetensors") if p.is_file()))


def _save_adapters(folder, model):
    from safetensors.numpy import save_file
    folder.mkdir()
    adapters = {name: np.ascontiguousarray(p.numpy()) for name, p in model.named_parameters() if p.requires_grad}
    with atomic_path(folder / ADAPTERS_FILE) as tmp:  # and the mode every other file has
        save_file(adapters, str(tmp))
    (folder / ADAPTER_CONFIG_FILE).write_text(json.dumps(model.lora_base, indent=2), encoding="utf-8")


def _adapter_config(folder):
    """(its path, its contents, the base folder it names) of `folder`'s adapter_config.json, once that base is
    there."""
    path = folder / ADAPTER_CONFIG_FILE
    config = read_json(path)
    fields = {"folder": str, "sha256": str, "r": int, "alpha": _NUMBER, "targets": list}
    _require_fields(path, config, fields)
    base = Path(config["folder"])
    if not (base / CONFIG_FILE).is_file():
        raise FileNotFoundError(f"{path} adapts the GPT-2 folder {base}, which is not there (or lacks "
                                f"{CONFIG_FILE}); put it back at that path to use these adapters")
    return path, config, base


def _load_adapted(folder, dropout):
    """The base model an adapter_config.json names (if its fingerprint still matches) with the adapters in it."""
    path, config, base = _adapter_config(folder)
    if fingerprint(base) != config["sha256"]:
        raise ValueError(f"{path} adapts {base} with SHA-256 {config['sha256'][:12]}…, but the folder there now "
                         "holds other weights; these adapters fit only the base they were trained on")
    model = GPT.from_pretrained(base, dropout=dropout)
    try:
        adapt(model, base, config["r"], config["alpha"], config["targets"])
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{path}: {exc}") from None
    adapters = hf_checkpoint.read_safetensors_file(folder / ADAPTERS_FILE)
    expected = {name for name, p in model.named_parameters() if p.requires_grad}
    lacks, extra = sorted(expected - set(adapters)), sorted(set(adapters) - expected)
    if lacks or extra:  # each named as what it is: a key the file lacks is not one it holds
        found = [f"lacks {lacks[:3]}"] * bool(lacks) + [f"holds {extra[:3]}"] * bool(extra)
        raise ValueError(f"{folder / ADAPTERS_FILE} {' and '.join(found)}: not the adapters {path} describes "
                         f"(rank {config['r']} in {', '.join(map(str, config['targets']))}); the two files come "
                         "from different runs")
    cast = next((name for name in sorted(adapters) if adapters[name].dtype.kind != "f"), None)
    if cast is not None:
        raise ValueError(f"{folder / ADAPTERS_FILE}: the adapter {cast} is {adapters[cast].dtype}, where models.train "
                         "writes floating point")
    bad = next((name for name in sorted(adapters) if not np.isfinite(adapters[name]).all()), None)
    if bad is not None:
        raise ValueError(f"{folder / ADAPTERS_FILE}: the adapter {bad} holds NaN or inf; the run that wrote it "
                         "diverged, so these adapters would only sample garbage")
    try:
        model.load_state_dict(adapters, strict=False)
    except KeyError as exc:
        raise ValueError(f"{folder / ADAPTERS_FILE} does not fit {path}: {exc.args[0]}") from None
    return model



def _save_failure(folder, iteration, writing, error):
    """The one line for a save that failed writing `writing`: the reason, and what `folder` holds now."""
    with contextlib.suppress(OSError):
        recover(folder)  # the fallback's first rename done, the second refused: the previous checkpoint goes back
    held = saved_iteration(folder)
    if held == iteration:
        holds = "the new checkpoint is in place all the same"
    elif held is not None:
        holds = f"the folder still holds the checkpoint of iteration {held}, intact"
    else:
        holds = "the folder held no checkpoint before and holds none now"
    return (f"could not save the checkpoint of iteration {iteration} into {folder}: writing {writing} failed "
            f"({error.strerror or error}); {holds}, and nothing of the failed save is left")


def _sha256(*paths):
    """The SHA-256 of a file's bytes; of several, over each one's name and bytes in turn."""
    digest = hashlib.sha256()
    for path in paths:
        if len(paths) > 1:
            digest.update(Path(path).name.encode() + b"\0")
        with open(path, "rb") as f:
            while chunk := f.read(2 ** 20):
                digest.update(chunk)
    return digest.hexdigest()


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


@dataclass
class RunState:
    """Everything of a training run that is neither the model nor the optimizer; a checkpoint saves it whole.

    `iter` counts the iterations done, `history` holds each one's training loss
    and `evals` each evaluation's ({"iter", "train", "val"}); `val_loss` and
    `saved_iter` are those of the checkpoint in the folder, which a save must
    beat. `data_rng` draws the batches (alike on every rank), and `model_rngs`
    holds every rank's dropout generator as of the last save or resume.
    """

    options: dict
    layout: Layout
    data_rng: np.random.Generator
    iter: int = 0
    history: list = field(default_factory=list)
    evals: list = field(default_factory=list)
    val_loss: float = math.inf
    saved_iter: int | None = None
    model_rngs: list = field(default_factory=list)
    digests: dict = field(default_factory=dict)  # file name → SHA-256 of each _DIGESTED file the checkpoint has
    data_fingerprint: str | None = None  # of the data it trains on (check_data); None in older checkpoints

    @classmethod
    def start(cls, options, layout, seed, world, data_fingerprint):
        """A new run's state, on the data of `data_fingerprint`. Ranks after 0 draw their dropout masks from streams
        of their own, rank 0 keeps the single process's; every rank draws the same batches."""
        if not world.is_root:
            ag.manual_seed(_rank_seed(seed, 0, world.rank))
        return cls(options=options, layout=layout, data_rng=np.random.default_rng(seed),
                   data_fingerprint=data_fingerprint)

    def record(self, loss):
        """One more iteration done, with its training loss."""
        self.history.append(loss)
        self.iter += 1

    def mark_saved(self, val_loss, world):
        """This iteration becomes the checkpoint's: its val loss, and every rank's generator (a collective)."""
        self.val_loss, self.saved_iter = val_loss, self.iter
        self.model_rngs = world.gather(ag.get_rng_state())

    def restore_rngs(self, seed, world):
        """Each rank takes back its CPU dropout stream from the checkpoint. A rank it did not have starts a fresh one,
        as a GPU's does (CuPy's generators cannot be saved), seeded by (seed, iteration, rank): a resumed run repeats
        itself, where a GPU's generator left unseeded drew from the OS's entropy, though its masks from there on
        are not the uninterrupted run's."""
        ag.manual_seed(_rank_seed(seed, self.iter, world.rank))
        if world.rank < len(self.model_rngs):
            ag.set_rng_state(self.model_rngs[world.rank])

    def to_json(self, digests):
        """train_state.json's object; `digests` are the SHA-256 of the files saved with it (name → hex)."""
        return {"format": FORMAT, "iter": self.iter, "history": self.history, "evals": self.evals,
                "val_loss": self.val_loss, "options": self.options, "batch": self.layout.to_dict(),
                "data_rng": self.data_rng.bit_generator.state, "model_rngs": self.model_rngs, "sha256": digests,
                "data_fingerprint": self.data_fingerprint}

    @classmethod
    def load(cls, folder):
        """train_state.json of the checkpoint in `folder`, checked field by field against what a save writes."""
        path = _current(folder) / STATE_FILE
        state = read_json(path)
        if state.get("format") != FORMAT:
            raise ValueError(f"{path} was written by an older models.train (format {state.get('format', 1)}, this "
                             f"one reads {FORMAT}); resume it with that version, or start again with --overwrite")
        _require_fields(path, state, _STATE_FIELDS)
        _require_fields(path, state["batch"], _LAYOUT_FIELDS, "batch.")
        if min(state["batch"][key] for key in _LAYOUT_FIELDS) < 1:
            raise ValueError(f"{path}: 'batch' should hold counts of at least 1, not {json.dumps(state['batch'])}")
        history, evals = state["history"], state["evals"]
        if len(history) != state["iter"]:
            raise ValueError(f"{path}: 'history' should list {state['iter']} losses, one per iteration "
                             f"up to 'iter', but has {len(history)} entries")
        if not all(is_finite_number(x) for x in history):
            raise ValueError(f"{path}: 'history' should hold finite numbers, the losses of the iterations, "
                             f"but holds {next(json.dumps(x) for x in history if not is_finite_number(x))[:20]}")
        for entry in evals:
            if not (isinstance(entry, dict) and all(is_finite_number(entry.get(k)) for k in ("iter", "train", "val"))):
                raise ValueError(f"{path}: every entry of 'evals' should be an object with finite numbers 'iter', "
                                 f"'train' and 'val', but one is {json.dumps(entry)[:60]}")
        if not math.isfinite(state["val_loss"]):  # a save writes the val loss it beat: always a finite one
            raise ValueError(f"{path}: 'val_loss' should be a finite number, not {state['val_loss']}")
        digests = state.get("sha256", {})  # older saves have none
        if not (isinstance(digests, dict) and set(digests) <= set(_DIGESTED)
                and all(isinstance(v, str) for v in digests.values())):
            raise ValueError(f"{path}: 'sha256' should map some of {', '.join(_DIGESTED)} to their SHA-256, "
                             f"not {json.dumps(digests)[:60]}")
        data_fingerprint = state.get("data_fingerprint")  # older saves have none
        if not (data_fingerprint is None or isinstance(data_fingerprint, str)):
            raise ValueError(f"{path}: 'data_fingerprint' should be a string (the data's tokenizer, token counts "
                             f"and CRC-32), not {json.dumps(data_fingerprint)[:60]}")
        data_rng = np.random.default_rng()
        streams = {"data_rng": state["data_rng"], **{f"model_rngs[{i}]": s for i, s in enumerate(state["model_rngs"])}}
        for key, stream in streams.items():
            try:
                np.random.PCG64().state = stream  # the generator all streams use: does the state fit it?
            except (TypeError, ValueError, KeyError, OverflowError) as exc:
                raise ValueError(f"{path}: {key!r} is not a random generator's state ({exc})") from None
        if not state["model_rngs"]:
            raise ValueError(f"{path}: 'model_rngs' is empty; it holds rank 0's dropout generator at least")
        data_rng.bit_generator.state = state["data_rng"]
        return cls(options=state["options"], layout=Layout(**state["batch"]), data_rng=data_rng, iter=state["iter"],
                   history=history, evals=evals, val_loss=state["val_loss"], saved_iter=state["iter"],
                   model_rngs=state["model_rngs"], digests=digests, data_fingerprint=data_fingerprint)


def _rank_seed(seed, step, rank):
    return int(np.random.SeedSequence([seed, step, rank]).generate_state(1)[0])


def saved_iteration(folder):
    """The iteration of the checkpoint in `folder`, or None where there is no readable one."""
    try:
        return RunState.load(folder).iter
    except (OSError, ValueError):
        return None


def _is(value, kinds):
    return isinstance(value, kinds) and not isinstance(value, bool)


def is_finite_number(value):
    """Whether a value read from JSON is a finite number (not a bool, a string, NaN or infinite, nor an integer
    beyond a float: 10**400)."""
    try:
        return _is(value, _NUMBER) and math.isfinite(value)
    except OverflowError:
        return False


def _require_fields(path, obj, fields, prefix=""):
    for key, kinds in fields.items():
        if key not in obj:
            raise ValueError(f"{path} lacks {prefix}{key!r}; it was not written by models.train, or was damaged")
        if not _is(obj[key], kinds):
            raise ValueError(f"{path}: {prefix}{key!r} should be {_TYPE_NAMES[kinds]}, not {json_type(obj[key])}")


def _save_optimizer(path, state_dict):
    """An optimizer's state_dict as one npz: its step count, its groups' hyper-parameters (JSON) and every buffer.

    Returns the SHA-256 of those arrays (`_arrays_sha256`).
    """
    arrays = {"steps": np.int64(state_dict["steps"]), "param_groups": np.str_(json.dumps(state_dict["param_groups"])),
              **{f"state.{i}.{name}": np.asarray(value) for i, buffers in state_dict["state"].items()
                 for name, value in buffers.items()}}
    with open(path, "wb") as f:
        np.savez(f, **arrays)
    return _arrays_sha256(arrays)


def _arrays_sha256(arrays):
    """One SHA-256 of named arrays: each one's name, dtype, shape and bytes. An npz's own bytes would not do: its
    zip entries carry the time they were written."""
    digest = hashlib.sha256()
    for name in sorted(arrays):
        array = np.asarray(arrays[name])
        digest.update(f"{name}:{array.dtype.str}:{array.shape}:".encode())
        digest.update(array.tobytes())
    return digest.hexdigest()


def _check_npz_sizes(path, folder):
    """Refuse, before anything is unpacked, an npz whose arrays could not be an optimizer's for the weights beside
    it (two moments a parameter: at most 3 × their file, and a little for the settings), or that
    models.io.check_npz_sizes refuses."""
    weights = next((p for p in (folder / WEIGHTS_FILE, folder / ADAPTERS_FILE) if p.is_file()), None)
    if weights is None:
        check_npz_sizes(path)
        return
    size = weights.stat().st_size
    check_npz_sizes(path, 3 * size + 2 ** 20, f"an optimizer for {weights.name} ({size:,} bytes) holds; it is not "
                                               "the file models.train wrote")


def read_optimizer(folder, iteration, digest=None):
    """The optimizer state_dict in `folder`'s optimizer.npz; it must have taken `iteration` steps, and its arrays
    must have the SHA-256 `digest` where one is given (train_state.json's)."""
    path = _current(folder) / OPTIMIZER_FILE
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing")
    if not zipfile.is_zipfile(path):  # np.load would read a lone .npy array, or refuse a pickle
        with open(path, "rb") as f:
            what = "a single .npy array" if f.read(6) == b"\x93NUMPY" else "something else"
        raise ValueError(f"{path} is damaged: it is {what}, not the npz archive (a zip of arrays) that "
                         "models.train writes")
    try:
        _check_npz_sizes(path, _current(folder))
        with np.load(path, allow_pickle=False) as f:
            arrays = {key: f[key] for key in f.files}
        found = _arrays_sha256(arrays)
        groups = json.loads(str(arrays.pop("param_groups")))
        steps = int(arrays.pop("steps"))
    except RecursionError:
        raise ValueError(f"{path} is damaged: its param_groups nest too deeply to be models.train's") from None
    except ValueError as exc:
        problem = "an entry holds Python objects, which models.train never writes" if "pickle" in str(exc) else exc
        raise ValueError(f"{path} is damaged (ValueError: {problem})") from None
    except (OSError, EOFError, KeyError, TypeError, zipfile.BadZipFile) as exc:
        raise ValueError(f"{path} is damaged ({type(exc).__name__}: {exc})") from None
    if steps != iteration:
        raise ValueError(f"{path} took {steps} steps but {STATE_FILE} is at iteration {iteration}; "
                         "the folder mixes two checkpoints")
    if digest is not None and found != digest:
        raise ValueError(_not_saved_with(path))
    state = {}
    for key, array in arrays.items():
        _, index, name = (key.split(".", 2) + ["", ""])[:3]
        if not key.startswith("state.") or not index.isdigit() or not name:
            raise ValueError(f"{path} holds an entry {key!r}; expected 'state.<parameter index>.<buffer name>'")
        is_count = array.shape == () and array.dtype.kind in "iu"  # AdamW's step; buffers are float arrays
        state.setdefault(int(index), {})[name] = int(array) if is_count else array
    return {"steps": steps, "param_groups": groups, "state": state}


def model_config(folder):
    """The file that says which model `folder` holds: a LoRA run's adapter config, else the model's config.json;
    a one-line FileNotFoundError where it holds neither."""
    for name in (ADAPTER_CONFIG_FILE, CONFIG_FILE):
        if (folder / name).is_file():
            return folder / name
    raise FileNotFoundError(f"no checkpoint in {folder}: expected {CONFIG_FILE} and {WEIGHTS_FILE} "
                            "(train one with `python -m models.train`)")


def model_folder(text):
    """A `type=` function: a folder that load_model reads, refused as the command line is read rather than once
    the text has loaded; for GPT-2's names with no such folder here, how to get one (cli.hub_name)."""
    folder = hub_name(text)
    if folder:  # '' is input_folder's to refuse
        try:
            folder = str(_current(folder))  # a save stopped between its renames: load_model reads it there too
            os.lstat(folder)
        except FileNotFoundError:  # models.sample's default, out, before any training
            raise argparse.ArgumentTypeError(f"no folder {text} (train one with `python -m models.train --out-dir "
                                             f"{text}`)") from None
        except OSError:  # a name the system cannot use (too long, a loop): input_folder says what it says
            pass
    try:
        model_config(Path(input_folder(folder)))
    except FileNotFoundError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def config_of(folder):
    """The GPTConfig of the model load_model reads from `folder`, from config files alone (a LoRA checkpoint's
    names its base, whose config.json it is): the options a model bounds (a block size, an adapter's rank) are
    checked against it as the command line is read, before a weight is."""
    folder = _current(folder)
    if model_config(folder).name == ADAPTER_CONFIG_FILE:
        folder = _adapter_config(folder)[2]
    return GPTConfig.from_pretrained(folder)


def load_tokenizer(folder):
    """The tokenizer of a checkpoint folder (its gptgrad_tokenizer.json), or GPT-2's for a Hugging Face GPT-2 folder
    without one, read before and without the weights: one whose vocabulary does not fit the model's (config_of) is
    refused in one line."""
    folder = _current(folder)
    vocab_size = config_of(folder).vocab_size
    path = folder / TOKENIZER_FILE
    if path.exists():
        description = read_json(path)
        try:
            tokenizer = tokenizer_from_dict(description)
        except (ValueError, OSError) as exc:
            raise ValueError(f"{path} does not describe a tokenizer: {exc}; put back the {TOKENIZER_FILE} of the "
                             "run that trained this model") from None
        if tokenizer.vocab_size != vocab_size:
            raise ValueError(f"{path} has {tokenizer.vocab_size} tokens but the model in {folder} has "
                             f"vocab_size {vocab_size}; the two files come from different runs")
    else:
        tokenizer = GPT2Tokenizer()
        if tokenizer.vocab_size > vocab_size:  # a larger (padded) vocabulary holds all of GPT-2's ids
            raise ValueError(f"{folder} has no {TOKENIZER_FILE}, and GPT-2's tokenizer ({tokenizer.vocab_size} "
                             f"tokens) does not fit its model (vocab_size {vocab_size}); add the {TOKENIZER_FILE} "
                             "of the run that trained it")
    return tokenizer


def load_weights(folder, dropout=0.0):
    """The model of a checkpoint folder or a Hugging Face GPT-2 folder: its weights, or a LoRA checkpoint's base with
    the adapters in it (GPT.from_pretrained refuses weights that are not finite)."""
    folder = _current(folder)
    if model_config(folder).name == ADAPTER_CONFIG_FILE:
        return _load_adapted(folder, dropout)
    return GPT.from_pretrained(folder, dropout=dropout)


def load_model(folder, dropout=0.0):
    """The model and tokenizer of a checkpoint folder, or of a Hugging Face GPT-2 folder (with GPT-2's tokenizer):
    the tokenizer first, so that one that does not fit the model is refused before a weight is read."""
    tokenizer = load_tokenizer(folder)
    return load_weights(folder, dropout), tokenizer


def _fit_rows(value, shape):
    """A 2-D buffer cut or padded with zero rows to `shape` when only its row count differs: the embedding's
    moments between a run whose vocabulary is padded (on a GPU) and a checkpoint's real vocabulary (which older
    checkpoints padded too). The padding rows never get a gradient, so their moments are zero and the cut or the
    padding is exact."""
    if getattr(value, "ndim", 0) != 2 or len(shape) != 2 or value.shape[1] != shape[1] or value.shape[0] == shape[0]:
        return value
    if value.shape[0] > shape[0]:
        return value[:shape[0]]
    return np.concatenate([value, np.zeros((shape[0] - value.shape[0], shape[1]), dtype=value.dtype)])


def _real_vocabulary_state(optimizer, model):
    """The optimizer's state_dict with wte's moments cut to the real vocabulary, as save_pretrained cuts the weights:
    a padded vocabulary (pad_vocab, a run option that is not saved) is how a run trains, and its rows' moments are
    zero, so a checkpoint is the same file whether the run that wrote it padded or not."""
    state = optimizer.state_dict()
    wte = model.transformer.wte.weight
    rows = (model.config.vocab_size, wte.shape[1])
    for i, param in enumerate(optimizer._params()):
        if param is wte and i in state["state"]:  # LoRA freezes wte: no moments
            state["state"][i] = {k: _fit_rows(v, rows) for k, v in state["state"][i].items()}
    return state


def restore_optimizer(optimizer, state_dict, folder):
    """Load a checkpoint's optimizer `state_dict` into `optimizer`, which keeps its own hyper-parameters (the
    options, as the command line may have changed them); a one-line error names the file where it does not fit."""
    groups = state_dict["param_groups"]
    if isinstance(groups, list) and len(groups) == len(optimizer.param_groups):  # else load_state_dict says so
        # this run's settings, with the saved parameters' positions (which load_state_dict counts)
        groups = [{**{k: v for k, v in group.items() if k != "params"},
                   **({"params": saved["params"]} if isinstance(saved, dict) and "params" in saved else {})}
                  for group, saved in zip(optimizer.param_groups, groups)]
    params = optimizer._params()
    state = {i: {k: _fit_rows(v, params[i].shape) for k, v in buffers.items()}
             if isinstance(i, int) and 0 <= i < len(params) and isinstance(buffers, dict) else buffers
             for i, buffers in state_dict["state"].items()}
    try:
        optimizer.load_state_dict({**state_dict, "state": state, "param_groups": groups})
    except ValueError as exc:
        raise ValueError(f"{_current(folder) / OPTIMIZER_FILE} does not fit this model: {exc}") from None


def resume(folder, args, check, world):
    """Continue the checkpoint in `folder`: (model, tokenizer, optimizer state_dict, RunState).

    The checkpoint's options go into `args` wherever the command line did not
    set them (`args.given` names those it did); the options that shape the
    model (MODEL_OPTIONS) always come from the checkpoint; `check(name, value)`
    vets a saved value as if it had been typed. Prints up to two lines saying
    what the command line changed (and the number of ranks, from `world`) and
    what it could not. The dropout generators are restored; the optimizer
    state goes into the optimizer the caller builds from `args`, through
    `restore_optimizer`. Where the command line names other data, the checkpoint's
    fingerprint of its own is dropped (check_data has nothing to compare it with);
    where the checkpoint has none, a line says so.
    """
    run = RunState.load(folder)
    changed, ignored, other_data = [], [], False
    for name, old in run.options.items():
        if not (hasattr(args, name) and is_stored(name)):  # an older version's option, or one no save writes
            continue
        if name in PATH_OPTIONS and isinstance(old, str) and not os.path.isabs(old):  # else check refuses it
            old = os.path.normpath(os.path.join(folder, old))  # saved relative to the folder (saved_paths)
        new = getattr(args, name)
        flag = "--" + name.replace("_", "-")
        if name in args.given and new != old:
            if name == "seed" and not args.eval_only:  # the saved generators go on; a seed only starts a run
                raise ValueError(f"--seed {new} would seed a new run's weights, batches and dropout, and --resume "
                                 f"continues those of the checkpoint's --seed {old} where they stopped; leave --seed "
                                 "out, or start a new run with --overwrite")
            if name not in MODEL_OPTIONS:
                changed.append(f"{flag} {_option_text(old)} → {_option_text(new)}")
                other_data |= name == "data"
                continue
            ignored.append(f"{flag} {_option_text(new)} (keeping {_option_text(old)})")
        if name not in MODEL_OPTIONS:
            try:
                old = check(name, old)
            except ValueError as exc:
                raise ValueError(f"{_current(folder) / STATE_FILE}: the saved option {exc}; give {flag} on the "
                                 "command line to replace it") from None
        setattr(args, name, old)
    layout = Layout(args.batch_size, args.grad_accum, world.size)
    also, remark = layout.change_from(run.layout, training=not args.eval_only)
    changed += also
    run.layout = layout
    model, tokenizer = load_model(folder, dropout=args.dropout)
    if changed:
        print("resume: the command line changes " + ", ".join(changed) + "; all else as the checkpoint had it"
              + (f"; {remark}" if remark else ""))
    if ignored:
        print("resume: the checkpoint fixes the model, so it ignores " + ", ".join(ignored))
    if other_data:  # named on purpose (the line above says so): the checkpoint's fingerprint is not of it
        run.data_fingerprint = None
    elif run.data_fingerprint is None:
        print(f"resume: {_current(folder) / STATE_FILE} records no fingerprint of its data (an older models.train "
              "saved it), so the data is not checked against it; the next save records its fingerprint")
    optimizer_state = read_optimizer(folder, run.iter, run.digests.get(OPTIMIZER_FILE))
    for name in _DIGESTED:
        if name != OPTIMIZER_FILE and name in run.digests and _sha256(_current(folder) / name) != run.digests[name]:
            raise ValueError(_not_saved_with(_current(folder) / name))
    run.restore_rngs(args.seed, world)
    return model, tokenizer, optimizer_state, run


def check_data(folder, run, fingerprint, path):
    """Refuse, in one line, to go on with the checkpoint in `folder` (its RunState `run`) on data other than it
    trained on: `fingerprint` is that of the data at `path` now (TokenData.fingerprint: its tokenizer, token counts
    and CRC-32; for a prepared corpus, of the shards' checksums that meta.json lists, so the same text prepared again
    is the same data). `run` then records it, for its next save."""
    saved = run.data_fingerprint
    if saved is not None and saved != fingerprint:
        raise ValueError(f"the data {path} has changed since the checkpoint in {folder} trained on it: it was "
                         f"{saved}, it is {fingerprint}; put back the data it trained on, or train on this data "
                         "from the start in a new --out-dir (to go on with it on purpose, give it another path and "
                         "pass that as --data)")
    run.data_fingerprint = fingerprint


def _option_text(value):
    """An option's value in resume's line, as typed; an option left at its default (None) says so."""
    return "(default)" if value is None else show_default(value)


def _not_saved_with(path):
    return (f"{path} is not the file saved with {STATE_FILE} (its SHA-256 differs): the folder mixes two "
            "checkpoints, or the file was changed since")

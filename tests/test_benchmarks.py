"""The benchmarks' own machinery, where a mistake would skew every figure they print."""
import importlib
import threading
import time

import pytest

from benchmarks.contention import take_turns


def test_peers_taking_turns_never_step_at_once_and_each_gets_its_turns():
    # A step that runs longer than the one before may overrun its turn, into the gap that starts the next: the
    # gap, not the turn's end, keeps the peers apart. A busy machine stretches the 3 ms steps, not past 0.1 s.
    turn, gap, turns = 0.4, 0.1, 6
    spans, timed = {0: [], 1: []}, {}

    def peer(index):
        def step():
            start = time.time()
            time.sleep(0.003)
            spans[index].append((start, time.time()))
        timed[index] = take_turns(step, begin_at, begin_at + turns * turn, index, 2, turn, gap)

    begin_at = time.time() + 0.1
    threads = [threading.Thread(target=peer, args=(i,)) for i in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for index in (0, 1):
        slots = [int((start - begin_at) // turn) for start, _ in spans[index]]
        assert sorted(set(slots)) == list(range(index, turns, 2))  # every turn of its own, and only those
        for start, end in spans[index]:
            k = int((start - begin_at) // turn)
            assert start >= begin_at + k * turn + gap and end <= begin_at + (k + 1) * turn + gap
        assert len(timed[index]) == len(spans[index]) - turns // 2  # each turn's first step untimed
        assert all(0.003 <= t < gap for t in timed[index])
    for start, end in spans[0]:
        assert all(end <= s or e <= start for s, e in spans[1])


def test_the_idle_ratio_compares_each_round_s_two_peers_not_the_pooled_steps(capsys):
    from benchmarks.contention import report

    def condition(*rounds):  # each round: one process's step times (pair: two copies alike)
        return [[list(r)] for r in rounds]
    # round 1 on a slow host (ours 40 ms against 50: 0.80), round 2 on a fast one (33.6 against 40: 0.84); ours
    # took more steps in the slow round and PyTorch in the fast, so pooled medians would read 40 against 40
    results = {
        "ours": {"idle": condition([0.040] * 30, [0.0336] * 10), "busy": condition([0.06] * 5, [0.06] * 5),
                 "pair": [[[0.06] * 6, [0.06] * 6]] * 2},
        "torch": {"idle": condition([0.050] * 10, [0.040] * 30), "busy": condition([0.1] * 5, [0.1] * 5),
                  "pair": [[[0.2] * 6, [0.2] * 6]] * 2}}
    report(results)
    line = [s for s in capsys.readouterr().out.splitlines() if "ours / torch" in s][0]
    assert "0.82× the time, the median of the rounds' 0.80, 0.84 (≤ 0.85×: met)" in line


@pytest.mark.parametrize("module, argv", [
    ("train_step", ["--steps", "0"]), ("overhead", ["--repeats", "0"]), ("overhead", ["--rounds", "0"]),
    ("cpu_kernels", ["--repeats", "0"]), ("scaling", ["--max-iters", "1"]), ("prepare", ["--iters", "1"]),
    ("gpt2", ["--seq", "0"]), ("step_profile", ["--top", "0"]),
])
def test_a_count_no_median_can_come_from_is_refused_at_parse_time(module, argv, capsys):
    """--steps 0 once ended in statistics.StatisticsError after the processes had run."""
    with pytest.raises(SystemExit) as exit_:
        importlib.import_module(f"benchmarks.{module}").main(argv)
    assert exit_.value.code == 2
    assert f"argument {argv[0]}: must be in [" in capsys.readouterr().err


def test_a_sequence_longer_than_the_models_context_is_refused_at_parse_time(capsys):
    with pytest.raises(SystemExit) as exit_:
        importlib.import_module("benchmarks.gpt2").main(["--shape", "shakespeare-char", "--seq", "300"])
    assert exit_.value.code == 2
    assert "--seq 300 exceeds shakespeare-char's block size 256" in capsys.readouterr().err


def test_each_engines_peer_runs_alone_in_its_process():
    """alone.COUNT's interval check imports the autograd package in every peer, and the PyTorch peer refused to
    run beside it: benchmarks.train_step, contention and main_job stopped at their first PyTorch round."""
    import subprocess
    import sys
    pytest.importorskip("torch")
    done = subprocess.run([sys.executable, "-m", "benchmarks.train_step", "--peers", "torch,ours", "--rounds", "1",
                           "--steps", "1", "--threads", "1"], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "\n  torch " in done.stdout and "\n  ours " in done.stdout


def test_the_step_profile_times_every_op_and_leaves_the_rest_outside_them():
    """Our peer's parts are every op's forward and backward and the optimizer's calls, none counted twice where one
    calls another; the rest of the step is "outside the ops"."""
    import json
    import subprocess
    import sys
    done = subprocess.run([sys.executable, "-m", "benchmarks.step_profile", "--peer", "ours", "--steps", "2"],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout.splitlines()[-1])
    parts = result["parts"]
    for name in ("Linear.forward", "Linear.backward", "ScaledDotProductAttention.backward", "LayerNorm.forward",
                 "AdamW.step", "AdamW.zero_grad", "clip_grad_norm_"):
        assert parts[name] > 0, name
    # the timed parts are disjoint (a call inside a timed one is its time): they fit in the step, with time left
    assert 0 < parts["outside the ops"] < result["step_s"]


def test_a_peer_measured_beside_the_other_engines_machinery_is_refused(monkeypatch):
    import sys
    from benchmarks import alone
    monkeypatch.setitem(sys.modules, "numba", sys.modules.get("numba", object()))
    with pytest.raises(RuntimeError, match="peer 'torch' loaded 'numba': each peer must run alone in its process"):
        alone.emit("torch", {})


def test_a_stretch_is_judged_by_its_steps_time_not_their_median(capsys):
    """Two stalls of 3 s among 50 ms steps, two steps apart: every 5 steps in a row holding them took 24.6× the
    idle step, where the median of the five (the figure before) read 1× and the target as met."""
    from benchmarks.contention import report
    idle, stalled = [0.05] * 20, [0.05] * 10 + [3.0, 0.05, 3.0] + [0.05] * 10
    report({"ours": {"idle": [[idle]], "busy": [[idle]], "pair": [[stalled, [0.05] * 23]]}})
    line = [s for s in capsys.readouterr().out.splitlines() if s.lstrip().startswith("ours")][0]
    assert "beside a second copy    50.0 (1.00×, ≤ 3.0×: met)" in line  # the median step is untouched
    assert "worst stretch 1230.0 (24.60×, ≤ 6.0×: NOT met)" in line


def test_a_peers_peak_memory_is_its_own_not_the_harness_s(tmp_path):
    """getrusage's ru_maxrss carries the parent's peak across exec: a peer started by a harness holding 300 MB
    read at least 300 MB whatever it used itself."""
    import json
    import subprocess
    import sys
    from pathlib import Path
    root = Path(__file__).resolve().parents[1]
    child = "from benchmarks import alone; print(alone.peak_rss_mb())"
    parent = ("import json, subprocess, sys, numpy as np\n"
              "held = np.ones(300 * 2 ** 20 // 8)  # 300 MB, every page touched\n"
              f"out = subprocess.run([sys.executable, '-c', {child!r}], capture_output=True, text=True, check=True)\n"
              "from benchmarks import alone\n"
              "print(json.dumps({'parent': alone.peak_rss_mb(), 'child': float(out.stdout)}))\n")
    done = subprocess.run([sys.executable, "-c", parent], cwd=root, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    peaks = json.loads(done.stdout.splitlines()[-1])
    assert peaks["parent"] >= 300
    assert peaks["child"] < 150  # the interpreter, NumPy and autograd's import: tens of MB


def test_scaling_gives_every_set_up_its_thread_count_in_every_blas_variable(monkeypatch, tmp_path):
    """Only OMP_NUM_THREADS was set: an OPENBLAS_NUM_THREADS the caller exported, which OpenBLAS reads first,
    reached the "1 thread" set-ups."""
    import subprocess
    from benchmarks import alone, scaling
    seen = []

    def fake_run(command, env, **kwargs):
        seen.append(env)
        return subprocess.CompletedProcess(command, 0, stdout="speed: 1,000 tokens/s over 4 iterations (9.5 ms each",
                                           stderr="")
    monkeypatch.setattr(scaling.subprocess, "run", fake_run)
    for name in alone.THREAD_VARIABLES:
        monkeypatch.setenv(name, "7")
    assert scaling.run(1, 1, 5, tmp_path) == (1000.0, 9.5, 0.0)
    assert {name: seen[0][name] for name in alone.THREAD_VARIABLES} == dict.fromkeys(alone.THREAD_VARIABLES, "1")


def test_each_idle_peer_gets_as_many_turns_for_any_seconds(monkeypatch):
    """--seconds 2 made a window of 5 turns: 3 for the first peer, 2 for the other. On a clock of its own (no
    time is measured), each peer's turns are counted as take_turns steps through them."""
    from benchmarks import contention

    class Clock:
        def __init__(self):
            self.now = 1000.0

        def time(self):
            return self.now
        perf_counter = time

        def sleep(self, seconds):
            self.now += max(0.0, seconds)

    for seconds in (2, 4, 6, 8, 8.5):
        counts = []
        for index in (0, 1):
            clock = Clock()
            monkeypatch.setattr(contention, "time", clock)
            first, turns = clock.now + contention.TURN, set()  # the first turn is nobody's, as measure() has it

            def step():
                turns.add(int((clock.now - first) // contention.TURN))
                clock.now += 0.05
            contention.take_turns(step, first, clock.now + contention.idle_window(seconds, 2), index, 2)
            counts.append(len(turns))
        assert counts[0] == counts[1] >= seconds / (contention.TURN - contention.GAP), (seconds, counts)


# --- benchmarks/gpu_check.sh: the one script a lent GPU machine runs, once, in minutes of scarce device time. None
# of it can run here, so what can be checked without a GPU is checked: the shell, each command's flags, the stop
# without CuPy, and that one failing step leaves the others their turn.

GPU_CHECK = "benchmarks/gpu_check.sh"


def _root():
    from pathlib import Path
    return Path(__file__).resolve().parents[1]


def _run_gpu_check(python, out, timeout=120, **env):
    """Run gpu_check.sh with GPU_CHECK_PYTHON=python and OUT=out: (exit status, its output). Its process group is
    killed if it overruns, so a script that ignores GPU_CHECK_PYTHON cannot leave a suite running behind the test."""
    import os
    import signal
    import subprocess
    env = {**os.environ, "GPU_CHECK_PYTHON": str(python), "OUT": str(out), **env}
    proc = subprocess.Popen(["bash", str(_root() / GPU_CHECK)], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        output, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        pytest.fail(f"{GPU_CHECK} ran past {timeout} s with GPU_CHECK_PYTHON={python}")
    return proc.returncode, output


def _recording_python(tmp_path):
    """A stand-in for the device's python3 that records each command line (one JSON list a line) and succeeds."""
    import json
    import sys
    record = tmp_path / "commands.jsonl"
    (tmp_path / "record.py").write_text(f"import json, sys\nwith open({str(record)!r}, 'a') as f:\n"
                                        "    f.write(json.dumps(sys.argv[1:]) + '\\n')\n")
    python = tmp_path / "python"
    python.write_text(f"#!/bin/sh\nexec {json.dumps(sys.executable)} {json.dumps(str(tmp_path / 'record.py'))} "
                      "\"$@\"\n")
    python.chmod(0o755)
    return python, record


def test_gpu_check_is_valid_bash_and_clean_under_shellcheck():
    """`cd "$(dirname "$0")/.."` went on in the wrong folder where cd failed (shellcheck SC2164)."""
    import shutil
    import subprocess
    assert subprocess.run(["bash", "-n", str(_root() / GPU_CHECK)], capture_output=True).returncode == 0
    if shutil.which("shellcheck") is None:
        pytest.skip("shellcheck is not installed (apt-get install shellcheck)")
    done = subprocess.run(["shellcheck", str(_root() / GPU_CHECK)], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout


def test_gpu_check_without_cupy_stops_at_once_with_one_line_and_fails(tmp_path):
    """Without CuPy the script went on to run every test on "cuda" (each failing on its own, for minutes) and the
    benchmark, and exited 0."""
    import importlib.util
    import sys
    if importlib.util.find_spec("cupy") is not None:
        pytest.skip("CuPy is installed here: the preflight would pass")
    status, output = _run_gpu_check(sys.executable, tmp_path, timeout=60)
    assert status == 1, output
    assert "no usable GPU through CuPy" in output and "gpu_check: STOPPED, the preflight failed" in output, output
    assert "== tests on cuda" not in output
    assert (tmp_path / "gpu_check.log").read_text() == output  # under $OUT, where the device tool fetches it


def test_every_command_gpu_check_runs_takes_its_flags(tmp_path):
    """Each command line the script hands python3, recorded by a stand-in, parsed by the command's own parser:
    the benchmark's parts each once, and pytest's selection collecting on --device cuda."""
    import json
    import subprocess
    import sys
    from benchmarks import gpu
    from models.cli import Parser
    python, record = _recording_python(tmp_path)
    status, output = _run_gpu_check(python, tmp_path / "out")
    assert status == 0, output
    commands = [json.loads(line) for line in record.read_text().splitlines()]
    assert commands[0] == ["-m", "benchmarks.gpu", "--preflight"], commands

    class Parsed(Exception):
        pass

    original = Parser.parse_args

    def parsed(self, args=None, namespace=None):
        raise Parsed(original(self, args, namespace))
    parts = []
    tests = [c for c in commands if c[:2] == ["-m", "pytest"]]
    for command in commands:
        if command[:2] != ["-m", "benchmarks.gpu"]:
            continue
        Parser.parse_args = parsed
        try:
            with pytest.raises(Parsed) as caught:
                gpu.main(command[2:])
        finally:
            Parser.parse_args = original
        parts += caught.value.args[0].parts if "--parts" in command else []
    assert sorted(parts) == sorted(gpu.PARTS), commands
    assert len(tests) == 1, commands
    collect = [a for a in tests[0][2:] if not a.startswith(("--junitxml", "--durations"))] + ["--collect-only"]
    done = subprocess.run([sys.executable, "-m", "pytest", *collect], cwd=_root(), capture_output=True, text=True,
                          timeout=300)
    summary = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else ""
    assert done.returncode == 0 and " tests collected" in summary and "error" not in summary, \
        done.stdout[-3000:] + done.stderr[-2000:]
    for device_test in ("tests/test_devices.py::test_gpt_logits_loss_and_grads_match_the_cpu",
                        "tests/autograd/test_kernel_twins.py::test_each_cuda_kernel_matches_its_twin_in_float64",
                        "tests/models/test_decode.py::test_graph_eager_and_cpu_give_the_same_tokens"):
        assert device_test in done.stdout, device_test


def test_gpu_check_gives_a_failed_step_s_successors_their_turn_and_exits_1(tmp_path):
    """Each step under its own limit from one budget; one that fails is named at the end, the rest still run."""
    import json
    python, record = _recording_python(tmp_path)
    (tmp_path / "record.py").write_text((tmp_path / "record.py").read_text()
                                        + "sys.exit(3 if sys.argv[-1] == 'train' else 0)\n")
    status, output = _run_gpu_check(python, tmp_path / "out")
    assert status == 1, output
    assert "== (1) training step: FAILED, exit 3" in output
    last = output.splitlines()[-1]
    assert last.startswith("gpu_check: FAILED after") and last.endswith(": (1) training step"), output
    ran = [json.loads(line)[-1] for line in record.read_text().splitlines()]
    assert [p for p in ran if p in ("train", "kernels", "generate", "char")] == ["train", "kernels", "generate", "char"]


def test_the_gpu_benchmark_hands_its_peers_flags_they_take(monkeypatch, capsys):
    """The command lines benchmarks.gpu builds for benchmarks.gpt2 and benchmarks.generate (run only on a GPU),
    each parsed by that module's parser as its peer process would parse it; a part that fails leaves the next
    ones their turn; (1)'s target is the docstring's."""
    import importlib
    from benchmarks import alone, generate, gpu
    from models.cli import Parser
    launched = []

    def fake_run(module, args, argv=None):
        launched.append((module, list(argv), args.peers.split(",")))
        return {peer: [{"step_s": 0.1, "peak_rss_mb": 1.0}] for peer in args.peers.split(",")}
    monkeypatch.setattr(alone, "run", fake_run)
    monkeypatch.setattr(generate, "main", lambda argv: launched.append(("benchmarks.generate", argv, None)))
    monkeypatch.setattr(gpu, "peak_flops", lambda: 1e15)
    monkeypatch.setitem(gpu.RUNS, "kernels", lambda args: (_ for _ in ()).throw(RuntimeError("no kernel")))
    monkeypatch.setattr("autograd.backend.xp_for", lambda device: None)  # "a GPU is there"
    with pytest.raises(SystemExit, match="part\\(s\\) failed: kernels"):
        gpu.main(["--steps", "5", "--rounds", "1", "--new-tokens", "64", "--parts", "train,kernels,generate,char"])
    out = capsys.readouterr().out
    assert f"(target >= {gpu.THROUGHPUT_TARGET:.0%})" in out
    assert f"at least {round(gpu.THROUGHPUT_TARGET * 100)} % of PyTorch's throughput" in gpu.__doc__
    assert [m for m, _, _ in launched] == ["benchmarks.gpt2", "benchmarks.generate", "benchmarks.gpt2"]

    class Parsed(Exception):
        pass

    original = Parser.parse_args

    def parsed(self, args=None, namespace=None):
        raise Parsed(original(self, args, namespace))
    monkeypatch.undo()
    monkeypatch.setattr(Parser, "parse_args", parsed)
    for module, argv, peers in launched:
        for peer in peers or [None]:
            with pytest.raises(Parsed) as caught:
                importlib.import_module(module).main(argv + (["--peer", peer] if peer else []))
            assert caught.value.args[0].device == "cuda"


def test_a_second_copy_is_judged_by_its_slower_copy_not_the_pooled_steps(capsys):
    """A copy starved to 10 steps of 200 ms beside its twin's 60 of 50 ms: the pooled median, the twin's 50 ms,
    read 1× idle and the target as met."""
    from benchmarks.contention import report
    idle = [0.05] * 20
    report({"ours": {"idle": [[idle]], "busy": [[idle]], "pair": [[[0.05] * 60, [0.2] * 10]]}})
    line = [s for s in capsys.readouterr().out.splitlines() if s.lstrip().startswith("ours")][0]
    assert "beside a second copy   200.0 (4.00×, ≤ 3.0×: NOT met)" in line


@pytest.mark.parametrize("ours, torch, judged",
                         [(86.0, 100.0, "met"), (100.0, 100.0, "met"), (100.4, 100.0, "NOT met"), (109.0, 100.0, "NOT met")])
def test_the_main_job_is_judged_against_pytorchs_time(monkeypatch, capsys, ours, torch, judged):
    from benchmarks import alone, main_job

    def run(module, args, argv=None):
        return {peer: [{"process_s": s, "peak_rss_mb": 100.0, "val_loss": 1.8}] for peer, s in
                (("ours", ours), ("torch", torch))}
    monkeypatch.setattr(alone, "run", run)
    main_job.main(["--rounds", "1"])
    out = capsys.readouterr().out
    assert f"ours / torch: {ours / torch:.2f}x the time" in out
    assert f"the target, ours / torch = {ours / torch:.3f} ≤ 1.0×: {judged}\n" in out

"""numba's fused CPU kernels (autograd/cpu.py) against the composed NumPy ops they replace, in float32.

The composed ops are the reference: their VJPs are checked against finite
differences in float64 (test_ops.py and the others), and float64 never
reaches a kernel. Each test runs the same op twice, AUTOGRAD_FUSED=1 and =0,
with a spy that proves the kernel ran, and compares values and gradients.
"""
import os
import hashlib
import pathlib
import pickle
import shutil
import signal
import subprocess
import sys
import time
from typing import NamedTuple

import numpy as np
import pytest

import autograd as ag
import nn
from autograd import kernels
from tests.nn.test_optim import adamw_by_hand

numba = pytest.importorskip("numba", reason="numba is not installed: the CPU keeps its NumPy path")
import llvmlite.binding  # noqa: E402  (numba's, after the skip)
from autograd.kernels import cpu, runtime  # noqa: E402  (after the skip: it imports numba)

RTOL, ATOL = 2e-5, 2e-6
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture
def spy(monkeypatch):
    """calls[name]: how many times the launcher `name` ran."""
    calls = {}
    for name, (launcher, smallest) in list(cpu.LAUNCHERS.items()):
        def counted(*args, _launcher=launcher, _name=name, **kwargs):
            calls[_name] = calls.get(_name, 0) + 1
            return _launcher(*args, **kwargs)
        monkeypatch.setitem(cpu.LAUNCHERS, name, (counted, smallest))
    return calls


def both(monkeypatch, run):
    """run() with the kernels, then with the composed ops."""
    monkeypatch.setenv("AUTOGRAD_FUSED", "1")
    fused = run()
    monkeypatch.setenv("AUTOGRAD_FUSED", "0")
    return fused, run()


def grads(fn, *arrays, seed=1):
    """fn's output and the gradients of Σ output ⊙ R (R fixed random) with respect to each array."""
    leaves = [ag.Tensor(a.copy(), requires_grad=True) for a in arrays]
    out = fn(*leaves)
    weights = np.random.default_rng(seed).standard_normal(out.shape).astype(np.float32)
    (out * ag.Tensor(weights)).sum().backward()
    return [out.data] + [leaf.grad for leaf in leaves]


def close(fused, composed, rtol=RTOL, atol=ATOL):
    for a, b in zip(fused, composed):
        np.testing.assert_allclose(a, b, rtol=rtol, atol=atol)


def test_exp32_is_numpys_exp_to_float32_rounding():
    @numba.njit
    def exp_all(x, out):
        for i in range(x.size):
            out[i] = cpu._exp32(x[i])
    x = np.concatenate([np.linspace(-110, 90, 400_001), [np.nan, np.inf, -np.inf, 0.0]]).astype(np.float32)
    got = np.empty_like(x)
    exp_all(x, got)
    exact = np.exp(x.astype(np.float64))
    normal = (exact > np.finfo(np.float32).tiny) & (exact < np.finfo(np.float32).max)
    assert np.max(np.abs(got[normal] - exact[normal]) / exact[normal]) < 2e-7
    subnormal = (exact > 0) & ~normal & (x < 0)
    assert np.max(np.abs(got[subnormal] - exact[subnormal])) <= 2 ** -149  # within one subnormal step
    assert np.all(got[x < -104] == 0) and np.all(np.isinf(got[x > 88.73]))
    assert np.isnan(got[-4]) and got[-3] == np.inf and got[-2] == 0 and got[-1] == 1


def in_fixed_order(terms):
    """cpu._sum's order in float32, one add at a time: eight running sums (j mod 8), the rest into the first,
    the eight added pairwise."""
    s = [np.float32(0)] * 8
    whole = len(terms) // 8 * 8
    for j, term in enumerate(terms):
        k = j % 8 if j < whole else 0
        s[k] = np.float32(s[k] + term)
    return ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]))


@numba.njit  # once for the module, not per n: each compile takes a second or two
def sums(rows, centre, scale, n):
    out = np.empty((2, rows.shape[0]), np.float32)
    for r in range(rows.shape[0]):
        out[0, r] = cpu._sum(rows[r], n)
        out[1, r] = cpu._dot(rows[r], rows[r], centre, scale, n)
    return out


@pytest.mark.parametrize("n", [0, 1, 7, 8, 9, 15, 16, 17, 31, 128, 765])
def test_row_sums_in_eight_lanes_and_in_eight_scalars_are_the_same_adds(n):
    """_sum and _dot take a contiguous row eight lanes at a time (LLVM IR written by hand) and a strided one as
    eight scalars: the same float32 adds in the same order, to the bit, with any remainder after the eights."""
    wide = np.random.default_rng(n).standard_normal((5, 2 * n + 6)).astype(np.float32) * 100
    strided = wide[:, : 2 * n + 2 : 2]
    contiguous = np.ascontiguousarray(strided)
    centre, scale = np.float32(0.25), np.float32(1.5)
    assert numba.typeof(contiguous).layout == "C" and numba.typeof(strided).layout == "A"
    expected = np.array([[in_fixed_order(row[:n]) for row in contiguous],
                         [in_fixed_order(row[:n] * ((row[:n] - centre) * scale)) for row in contiguous]])
    np.testing.assert_array_equal(sums(contiguous, centre, scale, n), expected)
    np.testing.assert_array_equal(sums(strided, centre, scale, n), expected)


def test_gelu(monkeypatch, spy):
    x = (np.random.default_rng(0).standard_normal((64, 512)) * 3).astype(np.float32)
    fused, composed = both(monkeypatch, lambda: grads(lambda t: t.gelu(), x))
    assert spy == {"gelu_forward": 1, "gelu_backward": 1}
    close(fused, composed)


def test_gelu_gradient_of_huge_inputs_is_one_or_zero_as_the_composed_ops(monkeypatch, spy):
    """x·2u′ overflowed where σ(2u) is exactly 1 or 0 (x < 0 from 1.2e13, any x from 1.8e19): inf·0 was NaN."""
    huge = np.append(np.geomspace(40, np.finfo(np.float32).max / 2, 511), np.finfo(np.float32).max)
    x = np.tile(np.concatenate([huge, -huge]), 16).astype(np.float32)  # 16384 elements: the kernels' least

    def run():
        leaf = ag.Tensor(x, requires_grad=True)
        out = leaf.gelu()
        out.backward(np.ones_like(x))
        return out.data, leaf.grad
    fused, composed = both(monkeypatch, run)
    assert spy == {"gelu_forward": 1, "gelu_backward": 1}
    for out, dx in (fused, composed):
        np.testing.assert_array_equal(out, np.where(x > 0, x, 0))
        np.testing.assert_array_equal(dx, (x > 0).astype(np.float32))


def test_a_gelu_subclass_with_its_own_backward_keeps_the_composed_forward(monkeypatch, spy):
    class Doubled(ag.ops.GELU):
        def backward(self, g):
            x, s = self.saved  # the composed forward's saved s
            return 2 * super().backward(g)
    x = np.random.default_rng(0).standard_normal((64, 512)).astype(np.float32)
    out, dx = grads(lambda t: Doubled.apply(t), x)
    assert "gelu_forward" not in spy
    _, plain = grads(lambda t: t.gelu(), x)
    np.testing.assert_allclose(dx, 2 * plain, rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("bias", [True, False])
def test_layer_norm(monkeypatch, spy, bias):
    rng = np.random.default_rng(0)
    x = (rng.standard_normal((4, 48, 128)) * 2 + 1).astype(np.float32)
    w = rng.standard_normal(128).astype(np.float32)
    b = rng.standard_normal(128).astype(np.float32)
    if bias:
        run = lambda: grads(lambda t, wt, bt: ag.layer_norm(t, wt, bt), x, w, b)  # noqa: E731
    else:
        run = lambda: grads(lambda t, wt: ag.layer_norm(t, wt, None), x, w)  # noqa: E731
    fused, composed = both(monkeypatch, run)
    assert spy == {"layer_norm_forward": 1, "layer_norm_backward": 1}
    close(fused, composed, rtol=1e-4, atol=1e-4)  # dγ, dβ: sums over 192 rows


def every_kernel(rng):
    """{name: a call of that launcher} on inputs large enough for the threaded variants and the split products."""
    rows = cpu.PARALLEL_FROM // 128 + 16
    x, g = rng.standard_normal((rows, 128)).astype(np.float32), rng.standard_normal((rows, 128)).astype(np.float32)
    w, b = rng.standard_normal(128).astype(np.float32), rng.standard_normal(128).astype(np.float32)
    stats = cpu.layer_norm_forward(x, w, b, 1e-5)[1]
    q, k, v = (rng.standard_normal((3, 4, 64, 32)).astype(np.float32) for _ in range(3))
    p, o = cpu.attention_forward(q, k, v, 0, 32 ** -0.5) if cpu.SHARED_POOL else (None, None)
    s = rng.standard_normal((3, 4, 64, 64)).astype(np.float32)
    z, t = rng.standard_normal((rows, 65)).astype(np.float32), rng.integers(0, 65, rows)
    a, m = rng.standard_normal((rows, 384)).astype(np.float32), rng.standard_normal((384, 200)).astype(np.float32)
    gm = rng.standard_normal((rows, 200)).astype(np.float32)
    params = [rng.standard_normal(70_000).astype(np.float32) for _ in range(4)]

    def adamw():
        wt, mt, vt = (a.copy() for a in params[1:])
        cpu.adamw(params[0], 0.999, 0.9, 0.99, 1e-8, -1e-3, wt, mt, vt)
        return wt, mt, vt
    pieces = [np.split(a, [5, 1029, 1541, 40_000]) for a in params]  # a part block of each size, and an empty one

    def adamw_many():
        wt, mt, vt = ([a.copy() for a in arrays] for arrays in pieces[1:])
        cpu.adamw_many(pieces[0], 0.999, 0.9, 0.99, 1e-8, -1e-3, wt, mt, vt)
        return tuple(wt + mt + vt)

    def clip_many():
        grads = [a.copy() for a in pieces[0]]
        return (np.array(cpu.clip_many(grads, 1.0)), *grads)
    calls = {
        "gelu_forward": lambda: cpu.gelu_forward(x), "gelu_backward": lambda: cpu.gelu_backward(x, g),
        "layer_norm_forward": lambda: cpu.layer_norm_forward(x, w, b, 1e-5),
        "layer_norm_backward": lambda: cpu.layer_norm_backward(g, x, w, stats),
        "attention_softmax_forward": lambda: cpu.attention_softmax_forward(s.copy(), 0, 0.2),
        "attention_softmax_backward": lambda: cpu.attention_softmax_backward(s.copy(), s, q, q, 0, 0.2),
        "cross_entropy_forward": lambda: (cpu.cross_entropy_forward(z, t, 65, None, out := np.empty_like(z)),
                                          out),
        "embedding_backward": lambda: cpu.embedding_backward(t, x, 65),
        "column_sum": lambda: cpu.column_sum(gm),  # 200 columns: three whole blocks and a part
        "adamw": adamw,
        "grad_norm": lambda: cpu.grad_norm(np.concatenate(params), 1.0),  # 280K elements: a part block at the end
        "adamw_many": adamw_many, "clip_many": clip_many,
    }
    if cpu.SHARED_POOL:
        calls.update({
            "matmul": lambda: (cpu.matmul(a, m, m[0]), cpu.matmul(a[:1], m),  # and Linear backward's two:
                               cpu.matmul(gm, m.T), cpu.matmul(a.T, gm)),
            "matmul_pair": lambda: cpu.matmul_pair(gm, m.T, a.T, gm),  # the same two in one pass
            "attention_forward": lambda: cpu.attention_forward(q, k, v, 0, 32 ** -0.5),
            "attention_backward": lambda: cpu.attention_backward(q, k, v, p, o, o, 0, 32 ** -0.5)})
    assert set(calls) == set(cpu.LAUNCHERS)  # a new kernel joins this test
    return calls


def flat(result):
    return [np.asarray(a) for a in (result if isinstance(result, tuple) else (result,)) if a is not None]


def test_every_kernel_gives_the_same_bits_on_any_thread_count():
    """Serial and threaded variants compute each element in the source's order, and split products cut their work
    by shape alone: 1, 2 and 3 threads agree to the bit (with fast math they did not, on an AVX-512 CPU)."""
    calls = every_kernel(np.random.default_rng(0))
    before = numba.get_num_threads()
    try:
        runs = {}
        for n in (1, 2, 3):
            runtime.set_threads(n)
            runs[n] = {name: flat(call()) for name, call in calls.items()}
    finally:
        runtime.set_threads(before)
    for n in (2, 3):
        for name in calls:
            for a, b in zip(runs[n][name], runs[1][name]):
                assert np.array_equal(a, b, equal_nan=True), f"{name} on {n} threads"


HASHES = """
import hashlib, numpy as np
from tests.autograd.test_cpu_kernels import every_kernel, flat
for name, call in sorted(every_kernel(np.random.default_rng(0)).items()):
    print(name, hashlib.sha256(b"".join(a.tobytes() for a in flat(call()))).hexdigest()[:16])
"""


def hashes_command(cache, **env):
    return dict(args=[sys.executable, "-c", HASHES], cwd=ROOT, env={**os.environ, "NUMBA_CACHE_DIR": str(cache), **env})


def kernel_hashes(cache, **env):
    return subprocess.run(**hashes_command(cache, **env), capture_output=True, text=True, check=True).stdout


# the tests that start processes of their own (another CPU's kernels, a cold cache, both compared, the other pool,
# a Ctrl-C)
IN_PROCESS = ("not another_cpu and not freshly_compiled and not every_cpu_with_fma and not SHARED_POOL_0 and not ctrl_c "
              "and not unreadable_cache")
OTHER_CPUS = ["generic", "haswell"]
SAME_ON_FMA = "test_the_kernels_give_the_same_bits_on_every_cpu_with_fma"  # needs the cold and haswell runs


class Started(NamedTuple):
    process: subprocess.Popen
    output: pathlib.Path
    cache: pathlib.Path  # its NUMBA_CACHE_DIR

    def finished(self):
        """The exit code and the output, once the process ends."""
        return self.process.wait(), self.output.read_text()


@pytest.fixture(scope="module")
def compiling(request, tmp_path_factory):
    """The fresh processes that compile every kernel, each into an empty cache of its own, started together for the
    tests selected: numba compiles on one core, so on two cores or more they compile side by side instead of one
    after another. Name → Started."""
    selected = {item.name for item in request.session.items}
    folder = tmp_path_factory.mktemp("compiling")
    commands = {}
    if selected & {"test_a_freshly_compiled_kernel_gives_the_bits_of_a_cached_one", SAME_ON_FMA}:
        commands["cold"] = hashes_command(folder / "cold")
    for name in OTHER_CPUS:
        if f"test_the_kernels_compiled_for_another_cpu_pass_their_tests[{name}]" in selected or (
                name == "haswell" and SAME_ON_FMA in selected):
            commands[name] = dict(
                args=[sys.executable, "-m", "pytest", "-q", "-n", "0", "-p", "no:cacheprovider", __file__,
                      "-k", IN_PROCESS],
                cwd=ROOT, env={**os.environ, "NUMBA_CPU_NAME": name, "NUMBA_CPU_FEATURES": "",
                               "NUMBA_CACHE_DIR": str(folder / name)})
    started = {}
    for name, command in commands.items():
        output = folder / f"{name}.out"
        with open(output, "w") as out:  # a file, not a pipe: a pipe no one reads yet would stall a long report
            process = subprocess.Popen(**command, stdout=out, stderr=subprocess.STDOUT)
        started[name] = Started(process, output, folder / name)
    yield started
    for run in started.values():
        run.process.kill()
        run.process.wait()


def test_a_freshly_compiled_kernel_gives_the_bits_of_a_cached_one(compiling):
    """An empty cache, then the cache that run wrote, then one thread: every kernel's outputs alike (the first run
    of a fresh clone used to end the main job at another loss than every later run)."""
    code, cold = compiling["cold"].finished()
    assert code == 0, cold[-3000:]
    assert cold.count("\n") == len(cpu.LAUNCHERS)
    cache = compiling["cold"].cache
    assert kernel_hashes(cache) == cold
    assert kernel_hashes(cache, OMP_NUM_THREADS="1") == cold


@pytest.mark.parametrize("cpu", OTHER_CPUS)
def test_the_kernels_compiled_for_another_cpu_pass_their_tests(compiling, cpu):
    """This file's tests in a fresh process, the kernels compiled for x86-64 without extensions or for AVX2, not
    for this machine's CPU (an AVX-512 host once failed where an AVX2 one passed)."""
    code, out = compiling[cpu].finished()
    assert code == 0, out[-3000:]
    assert " passed" in out.splitlines()[-1] and "failed" not in out.splitlines()[-1]


def test_the_kernels_give_the_same_bits_on_every_cpu_with_fma(compiling):
    """Compiled for AVX2 (haswell) or for this machine's own CPU (AVX-512, say), each kernel's outputs are the same
    bits: no fast math, the sums' order written by hand, and a multiply-add fused on both. So what differs between
    two machines' runs is OpenBLAS's choice of its own kernels for the products, not ours."""
    if numba.config.CPU_NAME not in (None, "host"):
        pytest.skip(f"NUMBA_CPU_NAME={numba.config.CPU_NAME}: this compares the kernels compiled for the host")
    if not llvmlite.binding.get_host_cpu_features().get("fma"):
        pytest.skip("this CPU has no FMA: its kernels round their multiply-adds twice, as x86-64's generic ones do")
    code, own = compiling["cold"].finished()
    assert code == 0, own[-3000:]
    code, out = compiling["haswell"].finished()
    assert code == 0, out[-3000:]
    haswell = kernel_hashes(compiling["haswell"].cache, NUMBA_CPU_NAME="haswell", NUMBA_CPU_FEATURES="")
    differ = [a.split()[0] for a, b in zip(own.splitlines(), haswell.splitlines()) if a != b]
    assert own.count("\n") == haswell.count("\n") == len(cpu.LAUNCHERS)
    assert not differ, f"compiled for {llvmlite.binding.get_host_cpu_name()} and for haswell, {differ} differ"


@pytest.mark.parametrize("tq, tk, causal, dv", [(64, 64, True, 64), (64, 64, False, 64), (32, 256, True, 64),
                                               (64, 64, True, 32)])
def test_attention(monkeypatch, spy, tq, tk, causal, dv):
    """(32, 256): fewer queries than keys, as with a KV cache, query i seeing keys up to i + 224. dv 32: values
    narrower than the queries and keys (64), so O's and dV's rows (H·Dv apart) and dQ's and dK's (H·D) differ."""
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal(shape).astype(np.float32) for shape in ((2, 4, tq, 64), (2, 4, tk, 64),
                                                                         (2, 4, tk, dv)))
    fused, composed = both(monkeypatch, lambda: grads(
        lambda a, b, c: ag.scaled_dot_product_attention(a, b, c, causal=causal), q, k, v))
    # with the shared pool the whole attention runs (P kept: Tk ≤ 4D); else the softmax kernels between NumPy's GEMMs
    kernels = ("attention_forward", "attention_backward") if cpu.SHARED_POOL else (
        "attention_softmax_forward", "attention_softmax_backward")
    assert spy == dict.fromkeys(kernels, 1)
    close(fused, composed, rtol=1e-4, atol=1e-5)


def test_attention_reads_the_heads_of_one_fused_projection_in_place(monkeypatch, spy):
    """q, k, v as GPT's attention cuts them from c_attn's output: views whose rows are 3C apart. The kernel's O
    is laid out with each query's heads side by side, so joining the heads again, as GPT does, copies nothing."""
    rng = np.random.default_rng(0)
    fused_qkv = rng.standard_normal((3, 64, 3 * 4 * 32)).astype(np.float32)
    joined_views = []

    def run():
        x = ag.Tensor(fused_qkv.copy(), requires_grad=True)
        q, k, v = x.reshape(3, 64, 3, 4, 32).transpose(2, 0, 3, 1, 4)  # (3, B, nh, T, hs) → three (B, nh, T, hs)
        y = ag.scaled_dot_product_attention(q, k, v, causal=True)
        joined = y.transpose(0, 2, 1, 3).reshape(3, 64, 128)  # (B, T, C)
        joined_views.append(np.shares_memory(joined.data, y.data))
        weights = np.random.default_rng(1).standard_normal(joined.shape).astype(np.float32)
        (joined * ag.Tensor(weights)).sum().backward()
        return [y.data, x.grad]
    fused, composed = both(monkeypatch, run)
    assert spy.get("attention_forward", 0) == int(cpu.SHARED_POOL)
    assert joined_views[0] == cpu.SHARED_POOL  # both() runs the kernels first
    close(fused, composed, rtol=1e-4, atol=1e-5)


@pytest.mark.skipif(not cpu.SHARED_POOL, reason="the split products need NumPy's OpenBLAS and OpenMP")
@pytest.mark.parametrize("m, k, n", [(768, 128, 384), (40, 512, 3000), (1, 768, 50304)])
def test_split_matmul_against_one_openblas_call(m, k, n):
    """Row blocks (tall), column blocks (wide, as a token's LM head), each operand also as a transposed view;
    the same inputs give the same bits again."""
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((m, k)).astype(np.float32), rng.standard_normal((k, n)).astype(np.float32)
    before = numba.get_num_threads()
    try:
        runtime.set_threads(2)
        for x, y in ((a, b), (np.ascontiguousarray(a.T).T, b), (a, np.ascontiguousarray(b.T).T)):
            split = cpu.matmul(x, y)
            np.testing.assert_allclose(split, np.matmul(x, y), rtol=1e-5, atol=1e-4)
            np.testing.assert_array_equal(cpu.matmul(x, y), split)
        bias = rng.standard_normal(n).astype(np.float32)  # added by each block, rows' or columns'
        np.testing.assert_allclose(cpu.matmul(a, b, bias), np.matmul(a, b) + bias, rtol=1e-5, atol=1e-4)
    finally:
        runtime.set_threads(before)


@pytest.mark.skipif(not cpu.SHARED_POOL, reason="the split products need NumPy's OpenBLAS and OpenMP")
@pytest.mark.parametrize("threads", [1, 2, 3])
def test_a_pair_of_products_is_two_products(threads):
    """Linear backward's dx = G Wᵀ and dW = xᵀ G in one pass over the threads: each as NumPy's product, whole
    calls or blocks by shape alone (a wide dW, 128 × 3000, is cut into blocks of columns); below SPLIT_FROM, for
    one row (matmul's matrix-vector product) or in float64, two `matmul` calls, with their bits."""
    rng = np.random.default_rng(0)
    before = numba.get_num_threads()
    try:
        runtime.set_threads(threads)
        for rows, n_in, n_out in ((768, 128, 384), (768, 512, 128), (1024, 128, 3000), (8, 16, 32), (1, 1024, 1024)):
            x, w = rng.standard_normal((rows, n_in)).astype(np.float32), rng.standard_normal((n_in, n_out))
            g = rng.standard_normal((rows, n_out)).astype(np.float32)
            dx, dw = cpu.matmul_pair(g, w.astype(np.float32).T, x.T, g)
            np.testing.assert_allclose(dx, g @ w.astype(np.float32).T, rtol=1e-5, atol=1e-4)
            np.testing.assert_allclose(dw, x.T @ g, rtol=1e-5, atol=1e-4)
            assert dx.dtype == dw.dtype == np.float32 and dx.shape == (rows, n_in) and dw.shape == (n_in, n_out)
            if rows in (1, 8):  # one row, or below SPLIT_FROM
                np.testing.assert_array_equal(dx, cpu.matmul(g, w.astype(np.float32).T))
                np.testing.assert_array_equal(dw, cpu.matmul(x.T, g))
            wide_dx, wide_dw = cpu.matmul_pair(g.astype(np.float64), w.T, x.T, g)  # a float64 product: two calls
            np.testing.assert_array_equal(wide_dx, cpu.matmul(g.astype(np.float64), w.T))
            np.testing.assert_array_equal(wide_dw, cpu.matmul(x.T, g))
    finally:
        runtime.set_threads(before)


def test_the_main_jobs_tied_lm_head_runs_on_the_threads(monkeypatch, spy):
    """The main job's head: 768 rows times wteᵀ of 65 × 128, 8,320 elements, under the row-wise kernels' SMALLEST:
    its products are still the split ones (6.4M multiply-adds each), backward's two in one pair."""
    rng = np.random.default_rng(0)
    x, wte = rng.standard_normal((12, 64, 128)).astype(np.float32), rng.standard_normal((65, 128)).astype(np.float32)
    fused, composed = both(monkeypatch, lambda: grads(lambda xt, et: xt @ et.T, x, wte))
    assert spy == ({"matmul": 1, "matmul_pair": 1} if cpu.SHARED_POOL else {})
    close(fused, composed, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("bias", [True, False])
def test_linear_and_the_lm_head_products(monkeypatch, spy, bias):
    rng = np.random.default_rng(0)
    x, w = rng.standard_normal((4, 96, 128)).astype(np.float32), rng.standard_normal((128, 384)).astype(np.float32)
    b, wte = rng.standard_normal(384).astype(np.float32), rng.standard_normal((65, 384)).astype(np.float32)

    def run():
        if bias:
            return grads(lambda xt, wt, et, bt: ag.linear(xt, wt, bt) @ et.T, x, w, wte, b)
        return grads(lambda xt, wt, et: ag.linear(xt, wt) @ et.T, x, w, wte)  # the tied LM head's wteᵀ
    fused, composed = both(monkeypatch, run)
    # forward: Linear's product and the head's; backward: the head's two in one call, then Linear's, and db's sum
    products = {"matmul": 2, "matmul_pair": 2} if cpu.SHARED_POOL else {}
    assert spy == {**products, **({"column_sum": 1} if bias else {})}
    close(fused, composed, rtol=1e-4, atol=1e-4)
    if bias:
        np.testing.assert_array_equal(fused[-1], composed[-1])  # db: the same adds in the same order


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_column_sums_are_numpys_bits_on_any_thread_count(threads):
    """Linear's db = Σ G over the rows: each column top to bottom, NumPy's order, whatever the block a thread
    takes; widths around the 64-column blocks, and one column (NumPy's pairwise sum)."""
    rng = np.random.default_rng(threads)
    before = numba.get_num_threads()
    runtime.set_threads(threads)
    try:
        for rows, n in [(768, 128), (768, 384), (257, 65), (1000, 63), (300, 129), (40_000, 1), (2, 9000)]:
            g = (rng.standard_normal((rows, n)) * rng.uniform(1e-3, 1e3, (rows, n))).astype(np.float32)
            np.testing.assert_array_equal(cpu.column_sum(g).view(np.int32), g.sum(axis=0).view(np.int32))
            if n > 1:  # the same order by another code path: what NumPy's order is, checked
                np.testing.assert_array_equal(cpu.column_sum(g), np.cumsum(g, axis=0)[-1])
        wide = rng.standard_normal((512, 300)).astype(np.float32)
        for view in (wide[:, ::2], wide.T):  # not C-contiguous: NumPy's own sum, in its own order
            np.testing.assert_array_equal(cpu.column_sum(view), view.sum(axis=0))
    finally:
        runtime.set_threads(before)


def test_attention_with_dropout_draws_the_composed_ops_masks(monkeypatch, spy):
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((2, 4, 64, 32)).astype(np.float32) for _ in range(3))

    def run():
        ag.manual_seed(7)
        return grads(lambda a, b, c: ag.scaled_dot_product_attention(a, b, c, dropout_p=0.3), q, k, v)
    fused, composed = both(monkeypatch, run)
    assert spy["attention_softmax_forward"] == 1
    close(fused, composed, rtol=1e-4, atol=1e-5)


def test_attention_scores_far_from_zero_give_the_composed_probabilities(monkeypatch):
    """Scores of 1e9 and more: the row maximum must give exp(0) = 1 exactly, or the row becomes inf / inf."""
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((2, 4, 32, 64)).astype(np.float32) * scale for scale in (1e5, 1e5, 1))
    fused, composed = both(monkeypatch, lambda: ag.scaled_dot_product_attention(
        ag.Tensor(q), ag.Tensor(k), ag.Tensor(v)).data)
    assert np.isfinite(fused).all()
    np.testing.assert_allclose(fused, composed, rtol=1e-4, atol=1e-4)


def test_embedding_gradient_adds_every_occurrence_of_a_token(monkeypatch, spy):
    """Ids repeated many times (65 rows for 768 positions): each occurrence's row of g is added, none kept alone."""
    rng = np.random.default_rng(0)
    weight = rng.standard_normal((65, 128)).astype(np.float32)
    ids = rng.integers(0, 65, size=(12, 64))
    ids[0, :10] = 7  # one token ten times in a row
    fused, composed = both(monkeypatch, lambda: grads(lambda w: ag.embedding(w, ag.Tensor(ids)), weight))
    assert spy == {"embedding_backward": 1}
    close(fused, composed, rtol=1e-5, atol=1e-5)
    counts = np.bincount(ids.reshape(-1), minlength=65)
    assert np.all((fused[1] != 0).any(axis=1) == (counts > 0))  # rows of unseen tokens stay 0


@pytest.mark.parametrize("causal", [True, False])
def test_attention_with_more_queries_than_keys_and_broadcast_keys(monkeypatch, spy, causal):
    """64 queries, 2 keys broadcast from one (row stride 0: copied for BLAS). Under the causal mask the first 62
    queries come before every key and see none: their rows are 0, as the composed op's (the kernels once wrote
    before those rows and corrupted the heap)."""
    rng = np.random.default_rng(0)
    q = rng.standard_normal((2, 4, 64, 64)).astype(np.float32)
    k, v = (np.broadcast_to(rng.standard_normal((2, 4, 1, 64)).astype(np.float32), (2, 4, 2, 64)) for _ in range(2))
    weights = rng.standard_normal(q.shape).astype(np.float32)

    def run():  # leaves holding the broadcast views themselves (grads() would copy them)
        leaves = [ag.Tensor(a, requires_grad=True) for a in (q, k, v)]
        out = ag.scaled_dot_product_attention(*leaves, causal=causal)
        (out * ag.Tensor(weights)).sum().backward()
        return [out.data] + [leaf.grad for leaf in leaves]
    assert ag.Tensor(k).data.strides[-2] == 0
    fused, composed = both(monkeypatch, run)
    assert spy.get("attention_forward", spy.get("attention_softmax_forward")) == 1
    close(fused, composed, rtol=1e-4, atol=1e-5)
    if causal:
        assert np.all(fused[0][:, :, :62] == 0) and np.abs(fused[0][:, :, 62:]).min() > 0


def test_attention_rows_without_a_visible_key_are_zero_and_rows_of_minus_inf_scores_nan(monkeypatch, spy):
    """ops.ScaledDotProductAttention's rule, on both paths: 64 queries and 40 keys under the causal mask, queries
    0–23 see no key (O = 0); query 24 sees key 0 alone, whose scores are −inf (an inf in K): NaN, as the softmax
    of −inf alone. The composed op gave query 24 zeros, the kernels NaN."""
    rng = np.random.default_rng(0)
    q = np.abs(rng.standard_normal((2, 4, 64, 64))).astype(np.float32) + 0.1  # q·k₀ = −inf
    k, v = (rng.standard_normal((2, 4, 40, 64)).astype(np.float32) for _ in range(2))
    k[:, :, 0, 0] = -np.inf
    with np.errstate(invalid="ignore"):
        fused, composed = both(monkeypatch, lambda: ag.scaled_dot_product_attention(
            ag.Tensor(q), ag.Tensor(k), ag.Tensor(v)).data)
    assert spy.get("attention_forward", spy.get("attention_softmax_forward")) == 1
    for out in (fused, composed):
        assert np.all(out[:, :, :24] == 0) and np.isnan(out[:, :, 24]).all() and np.isfinite(out[:, :, 25:]).all()
    np.testing.assert_allclose(fused, composed, rtol=1e-4, atol=1e-5)  # NaN where the other has NaN


@pytest.mark.parametrize("reuse", [False, True])
def test_cross_entropy_with_ignored_rows_and_a_padded_vocabulary(monkeypatch, spy, reuse):
    rng = np.random.default_rng(0)
    logits = (rng.standard_normal((768, 72)) * 3).astype(np.float32)
    targets = rng.integers(0, 65, size=768)
    targets[::7] = -1

    def run():
        z = ag.Tensor(logits.copy(), requires_grad=True)
        loss = ag.cross_entropy(z, ag.Tensor(targets), ignore_index=-1, classes=65, reuse_logits=reuse)
        loss.backward(retain_graph=True)
        first = z.grad.copy()
        z.grad = None
        loss.backward()  # a second backward through the same graph gives the same gradient on the CPU
        np.testing.assert_array_equal(z.grad, first)
        return [loss.data, first]
    fused, composed = both(monkeypatch, run)
    assert spy == {"cross_entropy_forward": 1}
    close(fused, composed)
    assert np.all(fused[1][:, 65:] == 0) and np.all(fused[1][::7] == 0)


def test_cross_entropy_of_huge_logits_and_of_ignored_rows_of_minus_inf_as_the_float64_reference(monkeypatch, spy):
    # the kernel's m + log Σ rounded to m for rows of 1e30 (a loss of 0, not ln 2); the composed op's ignored row
    # of a −inf class 0 was inf · 0 = NaN
    rng = np.random.default_rng(0)
    logits = (rng.standard_normal((768, 65)) * 3).astype(np.float32)
    logits[0, :2] = 1e30
    logits[1] += 1e4
    logits[2, 0] = -np.inf
    targets = rng.integers(0, 65, size=768)
    targets[0], targets[2] = 1, -1
    z = logits.astype(np.float64)
    m = z.max(axis=1)
    expected = np.log(np.exp(z - m[:, None]).sum(axis=1)) - (z[np.arange(768), targets] - m)
    expected[2] = 0

    def run():
        return [ag.cross_entropy(ag.Tensor(logits), ag.Tensor(targets), ignore_index=-1, reduction="none").data]
    fused, composed = both(monkeypatch, run)
    assert spy == {"cross_entropy_forward": 1}
    assert fused[0][0] == pytest.approx(np.log(2), rel=1e-6)
    for losses in fused + composed:
        np.testing.assert_allclose(losses, expected, rtol=2e-5, atol=1e-6)


def test_adamw_steps_with_clipping(monkeypatch, spy):
    rng = np.random.default_rng(0)
    start = [rng.standard_normal(shape).astype(np.float32) for shape in ((128, 384), (384,), (64, 128))]
    gradients = [[rng.standard_normal(w.shape).astype(np.float32) for w in start] for _ in range(5)]

    def run():
        params = [nn.Parameter(w.copy()) for w in start]
        opt = nn.optim.AdamW([{"params": params[:1] + params[2:], "weight_decay": 0.1},
                              {"params": params[1:2], "weight_decay": 0.0}], lr=2e-3, betas=(0.9, 0.99))
        for step in gradients:
            for p, g in zip(params, step):
                p.grad = g.copy()
            nn.optim.clip_grad_norm_(params, 1.0)
            opt.step()
        return [p.data for p in params] + [opt.state[p]["exp_avg_sq"] for p in params]
    fused, composed = both(monkeypatch, run)
    # a call a step for the two weights' group and one for the norm of all three; the bias's group (384 elements)
    # stays composed
    assert spy == {"adamw_many": 5, "clip_many": 5}
    close(fused, composed, rtol=1e-5, atol=1e-7)



def test_adamw_steps_a_groups_parameters_in_one_call_as_the_composed_update_does(monkeypatch, spy):
    """Without flat grads a group's parameters are stepped by one kernel call, the small ones too (one by one, the
    main job's 52 took 1.2–1.3 ms a step, 0.6–0.8 so): those that have taken as many steps together, and a
    parameter without a gradient left as it is, as PyTorch leaves it."""
    rng = np.random.default_rng(4)
    start = [rng.standard_normal(shape).astype(np.float32) for shape in ((128, 384), (384,), (7,), (64, 128))]
    gradients = [[rng.standard_normal(w.shape).astype(np.float32) for w in start] for _ in range(3)]

    def run():
        params = [nn.Parameter(w.copy()) for w in start]
        opt = nn.optim.AdamW(params, lr=2e-3, betas=(0.9, 0.99), weight_decay=0.1)
        kept = []
        for i, step in enumerate(gradients):
            opt.zero_grad()
            for p, g in zip(params, step):
                p.grad = None if (i, p.shape) == (1, (7,)) else g.copy()  # backward did not reach it once
            kept.append(params[2].data.copy())
            opt.step()
        assert opt.state[params[2]]["step"] == 2 and opt.state[params[0]]["step"] == 3
        return [p.data for p in params] + [opt.state[p]["exp_avg"] for p in params] + kept
    fused, composed = both(monkeypatch, run)
    assert spy == {"adamw_many": 4}  # one call a step, and two at the last: the small one a step behind
    close(fused, composed, rtol=1e-5, atol=1e-7)
    for kept in (fused[-3:], composed[-3:]):  # its weights before each step: the second left them
        assert np.array_equal(kept[1], kept[2]) and not np.array_equal(kept[0], kept[1])


def test_adamw_steps_a_parameter_whose_data_is_a_transposed_view(monkeypatch, spy):
    """A parameter made from a transposed array: the kernel's flat view of it was reshape's copy, which took the
    update while the parameter kept its values (its moments stepped on). It steps a contiguous copy, written back."""
    rng = np.random.default_rng(0)
    start = rng.standard_normal((96, 64)).astype(np.float32)
    gradients = [np.abs(rng.standard_normal((64, 96))).astype(np.float32) + 0.1 for _ in range(3)]  # one way

    def run():
        p = nn.Parameter(start.copy().T)
        assert not p.data.flags.c_contiguous
        opt = nn.optim.AdamW([p], lr=1e-2)
        for g in gradients:
            p.grad = g.copy()
            opt.step()
        return [p.data, opt.state[p]["exp_avg"]]
    fused, composed = both(monkeypatch, run)
    assert spy["adamw"] == 3  # the kernel stepped it, and its result is the composed ops'
    close(fused, composed, rtol=1e-5, atol=1e-6)  # weights of about 1, each moved by about lr a step
    assert (start.T - fused[0]).min() > 1e-2  # every weight moved down, by about lr a step


def test_adamw_kernel_rounds_one_minus_beta_as_torch_does(monkeypatch, spy):
    """With torch's default β₂ = 0.999 the kernel took 1 − β₂ from a float32 β₂, 1.3e-5 short of 0.001: every
    second moment came out that much small and every step 6e-6 long, a drift of 28 float32 ulps in 10 steps that
    torch.optim.AdamW (and the composed update) does not have. Both now stay within float32's rounding of float64."""
    rng = np.random.default_rng(0)
    start = rng.standard_normal(4096).astype(np.float32)
    gradients = [rng.standard_normal(4096).astype(np.float32) for _ in range(10)]

    def run():
        p = nn.Parameter(start.copy())
        opt = nn.optim.AdamW([p], lr=0.1)  # betas=(0.9, 0.999), weight_decay=0.01: torch's defaults
        for g in gradients:
            p.grad = g.copy()
            opt.step()
        return p.data, opt.state[p]["exp_avg_sq"]
    fused, composed = both(monkeypatch, run)
    assert spy == {"adamw_many": 10}
    exact = adamw_by_hand(start.astype(np.float64), gradients, 0.1, 0.9, 0.999, 1e-8, 0.01)
    second_moment = sum(0.001 * 0.999 ** (9 - t) * g.astype(np.float64) ** 2 for t, g in enumerate(gradients))
    for weights, exp_avg_sq in (fused, composed):
        np.testing.assert_allclose(weights, exact, rtol=0, atol=2e-6)  # weights of about 2: 8 ulps
        np.testing.assert_allclose(exp_avg_sq, second_moment, rtol=2e-6)


def test_a_float64_matrix_times_a_float32_weight_keeps_numpys_products(monkeypatch, spy):
    """ops.MatMul picks the split product by B; backward's Aᵀ G is then a float64 pair, which OpenBLAS's sgemm
    read as float32: dB came back NaN."""
    rng = np.random.default_rng(0)
    a = rng.standard_normal((64, 256))
    b = rng.standard_normal((256, 512)).astype(np.float32)
    weights = rng.standard_normal((64, 512))

    def run():
        leaves = ag.Tensor(a, requires_grad=True), ag.Tensor(b, requires_grad=True)
        out = leaves[0] @ leaves[1]
        (out * ag.Tensor(weights)).sum().backward()
        return [out.data] + [leaf.grad for leaf in leaves]
    fused, composed = both(monkeypatch, run)
    # asked for forward's product and backward's pair, it hands each to NumPy: every one has a float64 operand
    assert spy == {"matmul": 1, "matmul_pair": 1}
    close(fused, composed, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(fused[2], (a.T @ weights).astype(np.float32), rtol=1e-5, atol=1e-4)


def test_attention_and_layer_norm_with_operands_of_another_dtype_keep_the_composed_op(monkeypatch, spy):
    """The kernels are compiled for q's (x's) dtype: a float64 V went through float32 BLAS (NaNs), a float16 γ
    stopped numba's compile (it is widened to float32 now, as every float16 operand of an op that reduces), and a
    float64 γ would be read as float32."""
    rng = np.random.default_rng(0)
    q, k = (rng.standard_normal((2, 4, 64, 32)).astype(np.float32) for _ in range(2))
    v = rng.standard_normal((2, 4, 64, 32))
    x = rng.standard_normal((64, 300)).astype(np.float32)
    gamma, beta = rng.standard_normal(300), rng.standard_normal(300).astype(np.float32)
    fused, composed = both(monkeypatch, lambda: grads(
        lambda q, k, v: ag.scaled_dot_product_attention(q, k, v), q, k, v) + grads(ag.layer_norm, x, gamma, beta))
    assert spy == {}
    assert all(np.isfinite(a).all() for a in fused)
    close(fused, composed, rtol=0, atol=0)


def test_a_nan_in_a_key_reaches_only_the_queries_that_see_it(monkeypatch, spy):
    """Under the causal mask a NaN in key 40 makes the outputs of queries 40 on NaN, kernel or composed op: the
    composed op added −∞ to every hidden score, and NaN − ∞ is NaN, so queries 0–39 were NaN too."""
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((2, 4, 64, 32)).astype(np.float32) for _ in range(3))
    k[:, :, 40, 0] = np.nan
    fused, composed = both(monkeypatch, lambda: ag.scaled_dot_product_attention(
        ag.Tensor(q), ag.Tensor(k), ag.Tensor(v)).data)
    assert spy.get("attention_forward", spy.get("attention_softmax_forward")) == 1
    for out in (fused, composed):
        assert np.isfinite(out[:, :, :40]).all() and np.isnan(out[:, :, 40:]).all()
    close([fused[:, :, :40]], [composed[:, :, :40]], rtol=1e-5, atol=1e-6)

def flat_grads_run(start, gradients, flat, resume_after=None):
    """AdamW over `start` (two groups: decayed weights, undecayed rest) for the steps' `gradients`, clipped to 1,
    each gradient added as backward adds it; with `resume_after`, the parameters and the optimizer go through
    their state dicts into new ones after that many steps. The weights and exp_avg_sq at the end."""
    def fresh(arrays):
        params = [nn.Parameter(w.copy()) for w in arrays]
        groups = [{"params": [params[0], params[2]], "weight_decay": 0.1},
                  {"params": [params[1], params[3]], "weight_decay": 0.0}]
        return params, nn.optim.AdamW(groups, lr=2e-3, betas=(0.9, 0.99), flat_grads=flat)
    params, opt = fresh(start)
    for i, step in enumerate(gradients):
        if i == resume_after:
            saved, state = [p.data.copy() for p in params], opt.state_dict()
            params, opt = fresh([np.zeros_like(w) for w in start])
            for p, w in zip(params, saved):
                p.data = w  # as a model's load_state_dict does: a new array in place of the parameter's
            opt.load_state_dict(state)
        opt.zero_grad()
        for p, g in zip(params, step):
            if p.grad is None:
                p.grad = g.copy()
            else:
                p.grad += g
        nn.optim.clip_grad_norm_(params, 1.0)
        opt.step()
    return [p.data.copy() for p in params] + [opt.state[p]["exp_avg_sq"].copy() for p in params]


def test_adamw_with_flat_grads_steps_each_group_in_one_call(spy):
    """One adamw call per group and step, the norm from one grad_norm call; the same update as without flat grads
    (the small group composed there: float32's rounding apart), and the same bits after a state dict round trip,
    the moments and weights copied into the flat arrays."""
    rng = np.random.default_rng(0)
    start = [rng.standard_normal(shape).astype(np.float32) for shape in ((128, 384), (384,), (64, 128), (7,))]
    gradients = [[rng.standard_normal(w.shape).astype(np.float32) for w in start] for _ in range(4)]
    flat = flat_grads_run(start, gradients, flat=True)
    assert spy == {"grad_norm": 4, "adamw": 8}
    spy.clear()
    not_flat = flat_grads_run(start, gradients, flat=False)
    assert spy == {"adamw_many": 4, "clip_many": 4}  # the weights' group in one call a step; the small one composed
    close(flat, not_flat, rtol=1e-5, atol=1e-7)
    assert not np.array_equal(flat[0], start[0])
    resumed = flat_grads_run(start, gradients, flat=True, resume_after=2)
    for a, b in zip(flat, resumed):
        np.testing.assert_array_equal(a, b)


def test_adamw_with_flat_grads_passes_over_an_empty_group(spy):
    """LoRA freezes every bias and norm, so GPT.optimizer_groups' no-decay group is empty: the flat step went on
    to read that group's first state and stopped the documented LoRA run with an IndexError."""
    rng = np.random.default_rng(3)
    start = [rng.standard_normal(shape).astype(np.float32) for shape in ((64, 32), (32, 48))]
    runs = []
    for flat in (True, False):
        params = [nn.Parameter(w.copy()) for w in start]
        opt = nn.optim.AdamW([{"params": params, "weight_decay": 0.1}, {"params": [], "weight_decay": 0.0}],
                             lr=1e-2, flat_grads=flat)
        for _ in range(3):
            opt.zero_grad()
            for p in params:
                if p.grad is None:
                    p.grad = np.ones(p.shape, np.float32)
                else:
                    p.grad += 1.0  # into the flat buffer's view, as backward adds
            opt.step()
        runs.append([p.data for p in params])
    assert spy == {"adamw": 3, "adamw_many": 3}  # one call a step, flat or not
    close(runs[0], runs[1], rtol=1e-5, atol=1e-7)
    assert not np.array_equal(runs[0][0], start[0])


def test_grad_norm_is_the_buffers_norm_and_clip_grad_norm_scales_the_buffer_as_pytorch_does(spy):
    rng = np.random.default_rng(2)
    params = [nn.Parameter(rng.standard_normal(shape).astype(np.float32)) for shape in ((300, 7), (1025,))]
    opt = nn.optim.AdamW(params, flat_grads=True)
    opt.zero_grad()
    for p in params:
        p.grad += rng.standard_normal(p.shape).astype(np.float32)
    exact = np.sqrt(sum(np.sum(p.grad.astype(np.float64) ** 2) for p in params))  # 3,125: a part block at the end
    before = [p.grad.copy() for p in params]
    assert nn.optim.clip_grad_norm_(params, 2.0) == pytest.approx(exact, rel=1e-6)
    assert spy == {"grad_norm": 1}
    scale = np.float32(2.0 / (exact + 1e-6))
    for p, g, view in zip(params, before, opt.grad_buffer.views):  # in place, as PyTorch scales them
        np.testing.assert_allclose(p.grad, g * scale, rtol=1e-6)
        assert p.grad is view
    assert nn.optim.clip_grad_norm_(params, 1e6) == pytest.approx(2.0, rel=1e-5)  # the clipped norm, left as it is


def test_adamw_with_flat_grads_steps_by_step_count_where_a_groups_steps_differ(spy):
    rng = np.random.default_rng(1)
    start = [rng.standard_normal(shape).astype(np.float32) for shape in ((64, 64), (64,), (32, 64), (5,))]
    params = [nn.Parameter(w.copy()) for w in start]
    opt = nn.optim.AdamW(params, lr=1e-2, flat_grads=True)
    for _ in range(2):
        opt.zero_grad()
        params[0].grad += 1
        params[2].grad += 1
        opt.step()
    assert spy == {"adamw": 2}
    state = opt.state_dict()
    state["state"][1]["step"] = 5  # as if the bias had been stepped more often
    opt.load_state_dict(state)
    opt.zero_grad()
    params[1].grad += 1
    before = params[1].data.copy()
    opt.step()
    assert spy == {"adamw": 2, "adamw_many": 2}  # by their steps: the three at step 3 in one call, the bias in one
    assert opt.state[params[1]]["step"] == 6 and opt.state[params[0]]["step"] == 3
    assert not np.array_equal(params[1].data, before)


def test_the_composed_op_runs_for_float64_for_small_arrays_and_with_AUTOGRAD_FUSED_0(monkeypatch):
    big = np.ones((256, 256), dtype=np.float32)
    assert kernels.fused("layer_norm_forward", big) is cpu.layer_norm_forward
    assert kernels.fused("layer_norm_forward", big.astype(np.float64)) is None
    assert kernels.fused("layer_norm_forward", big[:8, :8]) is None
    monkeypatch.setenv("AUTOGRAD_FUSED", "0")
    assert kernels.fused("layer_norm_forward", big) is None


def test_turning_the_kernels_off_between_forward_and_backward_keeps_backward_working(monkeypatch):
    """switches.md: AUTOGRAD_FUSED is read at every lookup, so setting it mid-run counts. GELU's backward looked
    its kernel up again and called None."""
    x = np.linspace(-3, 3, 65536, dtype=np.float32).reshape(256, 256)  # above the kernel's smallest size
    monkeypatch.setenv("AUTOGRAD_FUSED", "0")
    composed = grads(lambda t: t.gelu(), x)
    monkeypatch.setenv("AUTOGRAD_FUSED", "1")
    leaf = ag.Tensor(x.copy(), requires_grad=True)
    out = leaf.gelu()  # the fused forward, which saves no σ(2u)
    assert out.op.saved[1] is None
    monkeypatch.setenv("AUTOGRAD_FUSED", "0")
    (out * ag.Tensor(np.random.default_rng(1).standard_normal(out.shape).astype(np.float32))).sum().backward()
    close([out.data, leaf.grad], composed)


def test_without_numba_every_op_keeps_its_numpy_path(monkeypatch):
    monkeypatch.setitem(sys.modules, "numba", None)  # `import numba` now raises ImportError
    monkeypatch.delitem(sys.modules, "autograd.kernels.cpu")
    monkeypatch.delattr(ag.kernels, "cpu")
    monkeypatch.setitem(kernels._cpu, "kernels", None)
    assert kernels.fused("gelu_forward", np.ones((256, 256), dtype=np.float32)) is None
    x = ag.Tensor(np.linspace(-3, 3, 65536, dtype=np.float32), requires_grad=True)
    x.gelu().sum().backward()
    assert x.grad.shape == (65536,) and kernels._cpu["kernels"] is False


def test_numba_disable_jit_keeps_every_op_on_its_numpy_path():
    """NUMBA_DISABLE_JIT=1 made numba's decorators return Python functions, and loading the kernels stopped the
    first op with "AttributeError: 'function' object has no attribute '_compile_for_args'"; the kernels call LLVM
    intrinsics, which Python cannot run, so the ops compose, with AUTOGRAD_FUSED=0's bits, and the byte-level
    tokenizer says why in a ValueError, which the commands print as one line."""
    script = """
import hashlib, numpy as np, autograd as ag
from autograd import kernels
x = ag.Tensor(np.linspace(-3, 3, 65536, dtype=np.float32), requires_grad=True)
x.gelu().sum().backward()
print(kernels.fused("gelu_forward", x.data), hashlib.sha256(x.grad.tobytes()).hexdigest())
from models.gpt import tokenizer
try:
    tokenizer._bpe_kernels()
except ValueError as error:
    print(error)
"""
    runs = {}
    for name, setting in (("jit off", {"NUMBA_DISABLE_JIT": "1", "AUTOGRAD_FUSED": "1"}),
                          ("composed", {"AUTOGRAD_FUSED": "0"})):
        out = subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=dict(os.environ, **setting),
                             capture_output=True, text=True)
        assert out.returncode == 0, out.stderr
        runs[name] = out.stdout.splitlines()
    fused_kernel, grad_hash = runs["jit off"][0].split()
    assert fused_kernel == "None" and grad_hash == runs["composed"][0].split()[1]
    message = runs["jit off"][1]
    assert message.startswith("NUMBA_DISABLE_JIT=1 turns numba's compiler off") and "unset NUMBA_DISABLE_JIT" in message


def test_threads_follow_omp_num_threads_and_the_ranks_share(monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    assert runtime.threads() == 1
    monkeypatch.delenv("OMP_NUM_THREADS")
    assert runtime.threads() == len(os.sched_getaffinity(0))
    before = numba.get_num_threads()
    try:
        kernels.fused("gelu_forward", np.ones((256, 256), dtype=np.float32))  # loads the kernels
        kernels.share_cpu_threads(1)
        assert numba.get_num_threads() == 1
    finally:
        monkeypatch.setitem(kernels._cpu, "threads", None)
        numba.set_num_threads(before)


def test_outputs_start_apart_from_their_inputs_within_a_page():
    """4K aliasing: an output a multiple of 4 KB plus a few bytes after an input slows a kernel several times."""
    rng = np.random.default_rng(0)
    for _ in range(20):
        inputs = [np.empty(int(rng.integers(1, 300_000)), dtype=np.float32) for _ in range(3)]
        out = cpu._apart(inputs[0], *inputs)
        assert out.shape == inputs[0].shape and out.dtype == np.float32
        for a in inputs:
            gap = (out.ctypes.data - a.ctypes.data) % 4096
            assert 512 <= gap <= 4096 - 512


def test_the_last_backward_scales_the_cross_entropy_gradient_in_place(spy):
    """No second logits-sized array: on its last use the kernel's p − onehot(y) becomes dz itself."""
    rng = np.random.default_rng(0)
    z = ag.Tensor(rng.standard_normal((768, 65)).astype(np.float32), requires_grad=True)
    loss = ag.cross_entropy(z, ag.Tensor(rng.integers(0, 65, size=768)), reuse_logits=True)
    saved = loss.op.saved[0]  # p − onehot(y), over the logits' own memory
    loss.backward(retain_graph=True)
    np.testing.assert_allclose(saved, 768 * z.grad, rtol=1e-5, atol=1e-6)  # kept: still unscaled
    z.grad = None
    loss.backward()
    np.testing.assert_array_equal(saved, z.grad)  # its last use: scaled in place (mean over 768 rows)
    assert spy == {"cross_entropy_forward": 1}


def llvm_resident_mb(field="Rss:"):
    """The resident size of libllvmlite's read-only mappings in this process (code and constants); with
    field="Private_Clean:", the part no other process maps, the only part the OS takes back (MADV_PAGEOUT
    leaves a page that another process's numba has mapped too)."""
    total, counted = 0, False
    with open("/proc/self/smaps") as smaps:
        for line in smaps:
            fields = line.split()
            if "-" in fields[0] and len(fields) > 4:  # a mapping's header line
                counted = fields[-1].endswith(runtime._LLVM_LIBRARY) and "w" not in fields[1]
            elif counted and fields[0] == field:
                total += int(fields[1])
    return total / 1024


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="MADV_PAGEOUT and /proc/self/maps are Linux's")
def test_a_kernels_first_load_hands_llvms_code_pages_back(monkeypatch):
    """Loading a kernel runs LLVM; then its tens of MB of code leave the resident set, and kernels still run."""
    released = []
    monkeypatch.setattr(runtime, "release_compiler_pages", lambda: released.append(1))
    gelu = cpu._Kernel(cpu._gelu_forward.serial.py_func)  # a dispatcher of its own: nothing loaded yet
    x = np.linspace(-3, 3, 1 << 15, dtype=np.float32)
    y, again = np.empty_like(x), np.empty_like(x)
    gelu(x, y)
    gelu(x, again)
    assert released == [1]  # the first call loaded it; the second found it loaded
    monkeypatch.undo()
    assert numba.njit(lambda v: v + 1)(1) == 2  # LLVM compiles again: its pages come back
    before, private = llvm_resident_mb(), llvm_resident_mb("Private_Clean:")
    assert before > 10 and runtime.release_compiler_pages()
    if private < before / 2:
        pytest.skip(f"another process maps {before - private:.0f} of LLVM's {before:.0f} MB too: the OS keeps those")
    assert llvm_resident_mb() < before / 4
    np.testing.assert_array_equal(cpu.gelu_forward(x), y)


TWO_POOLS = """
import numba, numpy as np, threadpoolctl
import autograd as ag
from autograd.kernels import cpu
ag.manual_seed(0)
x = ag.Tensor(np.random.default_rng(0).standard_normal((3, 64, 384)).astype(np.float32), requires_grad=True)
q, k, v = x.reshape(3, 64, 3, 4, 32).transpose(2, 0, 3, 1, 4)
y = ag.scaled_dot_product_attention(q, k, v, causal=True)
(y * y).sum().backward()
blas = [i["num_threads"] for i in threadpoolctl.threadpool_info() if i["internal_api"] == "openblas"]
print(cpu.SHARED_POOL, numba.threading_layer(), blas, float(y.data.sum()), float(x.grad.sum()))
"""


@pytest.mark.skipif(not cpu.SHARED_POOL, reason="the shared pool is not available here: nothing to compare")
def test_AUTOGRAD_SHARED_POOL_0_keeps_two_pools_and_the_same_results():
    """The other configuration, in fresh processes: OpenBLAS keeps its threads, the kernels numba's workqueue."""
    pytest.importorskip("threadpoolctl")
    runs = {}
    for shared in ("1", "0"):
        env = dict(os.environ, AUTOGRAD_SHARED_POOL=shared, OMP_NUM_THREADS="2")
        out = subprocess.run([sys.executable, "-c", TWO_POOLS], env=env, capture_output=True, text=True, check=True)
        runs[shared] = out.stdout.split()
    assert runs["1"][:2] == ["True", "omp"] and runs["1"][2] == "[1]"
    assert runs["0"][:3] == ["False", "workqueue", "[2]"]
    np.testing.assert_allclose([float(v) for v in runs["0"][3:]], [float(v) for v in runs["1"][3:]], rtol=1e-4)


DIRECT_IMPORT = """
import numba, threadpoolctl
from autograd.kernels import cpu, runtime
blas = [i["num_threads"] for i in threadpoolctl.threadpool_info() if i["internal_api"] == "openblas"]
print(cpu.SHARED_POOL, numba.get_num_threads(), runtime.pool_threads(), blas)
"""


@pytest.mark.parametrize("threads", ["1", "2"])
def test_importing_the_kernels_directly_sets_the_pool(threads):
    """A test or a benchmark that imports cpu.py without kernels.fused gets the pool a program gets: numba on
    OMP_NUM_THREADS threads and, with the shared pool, OpenBLAS on one (on its own threads inside numba's, a split
    product's blocks rounded otherwise on an AVX2 machine, and a fresh process's kernel hashes differed)."""
    pytest.importorskip("threadpoolctl")
    env = dict(os.environ, OMP_NUM_THREADS=threads)
    out = subprocess.run([sys.executable, "-c", DIRECT_IMPORT], cwd=ROOT, env=env, capture_output=True, text=True,
                         check=True).stdout.split(maxsplit=3)
    shared = out[0] == "True"
    assert out[1:3] == [threads, threads]
    assert out[3].strip() == ("[1]" if shared else f"[{threads}]")


def test_no_kernel_takes_arrays_below_the_size_at_which_the_backend_loads_them():
    """kernels.fused does not even import numba for smaller arrays (the lessons' tensors, a token's rows)."""
    assert min(smallest for _, smallest in cpu.LAUNCHERS.values()) >= kernels._CPU_SMALLEST


COMPILE_INTERRUPTED = """
import os, signal, numpy as np
from autograd.kernels import runtime
from tests.autograd.test_cpu_kernels import doubled
kernel = runtime.jitted()(doubled)
compile_now = kernel.compile

def compile_with_a_ctrl_c(signature):
    os.kill(os.getpid(), signal.SIGINT)  # while numba compiles
    return compile_now(signature)
kernel.compile = compile_with_a_ctrl_c
x = np.ones(4, np.float32)
try:
    kernel(x, np.empty_like(x))
    print("not interrupted")
except KeyboardInterrupt:
    print("interrupted once compiled:", len(kernel.overloads))
"""


def doubled(x, y):
    """A kernel of the tests' own (compiled afresh in COMPILE_INTERRUPTED)."""
    for i in range(x.size):
        y[i] = 2 * x[i]


def test_a_ctrl_c_while_numba_compiles_is_held_until_the_compile_ends(tmp_path):
    """numba drops a KeyboardInterrupt raised in its callbacks ("Exception ignored on calling ctypes callback"), and
    training went on: the compile holds it, finishes, and raises it then."""
    done = subprocess.run([sys.executable, "-c", COMPILE_INTERRUPTED], cwd=ROOT, capture_output=True, text=True,
                          env={**os.environ, "NUMBA_CACHE_DIR": str(tmp_path)}, timeout=120)
    assert done.stdout == "interrupted once compiled: 1\n", done.stdout + done.stderr
    assert "Exception ignored" not in done.stderr


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the signal is sent as a Linux user's Ctrl-C is")
def test_a_real_ctrl_c_while_the_main_job_compiles_its_kernels_is_one_line(tmp_path):
    """A fresh clone's first run compiles its kernels for tens of seconds; a Ctrl-C then ends it with one line."""
    cache = tmp_path / "numba"
    process = subprocess.Popen([sys.executable, "-m", "models.train", "--out-dir", str(tmp_path / "out")], cwd=ROOT,
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                               env={**os.environ, "NUMBA_CACHE_DIR": str(cache)})
    deadline = time.monotonic() + 60
    while not list(cache.rglob("*.nbi")) and time.monotonic() < deadline:  # the first kernel is compiled
        time.sleep(0.01)
    process.send_signal(signal.SIGINT)
    _, err = process.communicate(timeout=120)
    assert err == "\ntrain: interrupted; no checkpoint was written\n", err
    assert process.returncode == 130


GELU_HASH = """
import hashlib, numpy as np
from autograd.kernels import cpu, runtime
x = np.random.default_rng(0).standard_normal((cpu.PARALLEL_FROM // 128 + 16, 128)).astype(np.float32)
print(cpu.__file__, runtime.CACHE, hashlib.sha256(cpu.gelu_forward(x).tobytes()).hexdigest())
"""


@pytest.mark.parametrize("temporary_folder_free", [True, False])
def test_kernels_without_a_writable_cache_folder_run_with_one_line_at_most(tmp_path, temporary_folder_free):
    """A read-only install run with a read-only HOME (a container, a shared install): numba's cache=True found no
    folder (NUMBA_CACHE_DIR, __pycache__, ~/.cache) and importing the kernels raised "cannot cache function". They
    cache in this user's temporary folder instead, silently; where that is taken too, they compile in every run,
    said in one line. Both give the bits of the usual cache. Blocked by files where folders should be, which stop
    root too."""
    source = tmp_path / "source"
    shutil.copytree(pathlib.Path(ROOT) / "autograd", source / "autograd",
                    ignore=shutil.ignore_patterns("__pycache__"))
    (source / "autograd" / "kernels" / "__pycache__").write_text("")  # no cache beside the source
    (tmp_path / "blocked").write_text("")
    temporary = tmp_path / "tmp"
    temporary.mkdir()
    fallback = temporary / f"gptgrad-numba-{os.getuid()}"
    if not temporary_folder_free:
        fallback.write_text("")
    env = {name: value for name, value in os.environ.items() if name != "XDG_CACHE_HOME"}
    done = subprocess.run([sys.executable, "-c", GELU_HASH], cwd=source, capture_output=True, text=True, timeout=300,
                          env={**env, "PYTHONPATH": str(source), "HOME": str(tmp_path / "blocked" / "home"),
                               "NUMBA_CACHE_DIR": str(tmp_path / "blocked" / "numba"), "TMPDIR": str(temporary)})
    assert done.returncode == 0, done.stderr
    x = np.random.default_rng(0).standard_normal((cpu.PARALLEL_FROM // 128 + 16, 128)).astype(np.float32)
    expected = hashlib.sha256(cpu.gelu_forward(x).tobytes()).hexdigest()
    assert done.stdout.split() == [str(source / "autograd" / "kernels" / "cpu.py"), str(temporary_folder_free),
                                   expected]
    if temporary_folder_free:
        assert done.stderr == ""
        assert list(fallback.rglob("cpu._gelu_forward*.nbi"))
    else:
        assert done.stderr == (f"gptgrad: no writable folder for numba's kernel cache (beside the source, in HOME's "
                               f"cache, or {fallback}): the kernels compile afresh in every run (seconds to tens of "
                               "seconds); set NUMBA_CACHE_DIR to a writable folder to keep them\n")


@pytest.mark.parametrize("damage", ["cut short", "overwritten"])
def test_an_unreadable_cache_file_compiles_the_kernel_afresh_and_writes_it_again(tmp_path, damage):
    """Cache files cut to half their length (a full disk, an interrupted copy) or overwritten with other bytes:
    numba raised "pickle data was truncated" or "invalid load key" at the kernel's first call, in every later run.
    The kernel compiles afresh, silently, to the same bits, and its files can be read again after."""
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path / "numba")}

    def gelu_hash():
        done = subprocess.run([sys.executable, "-c", GELU_HASH], cwd=ROOT, env=env, capture_output=True, text=True,
                              timeout=300)
        assert done.returncode == 0, done.stderr
        assert done.stderr == ""
        return done.stdout

    cold = gelu_hash()
    files = sorted((tmp_path / "numba").rglob("cpu._gelu_forward*.nb[ic]"))
    # each compiled form's index and data: the serial form's, and the threaded one's where the pool may have threads
    assert len(files) == (4 if runtime.threads() > 1 else 2), files
    for file in files:
        size = file.stat().st_size
        file.write_bytes(file.read_bytes()[:size // 2] if damage == "cut short" else np.random.default_rng(
            size).bytes(size))
    assert gelu_hash() == cold
    for file in files:
        with open(file, "rb") as f:
            if file.suffix == ".nbi":
                assert pickle.load(f) == numba.__version__
            pickle.loads(f.read())


@pytest.mark.parametrize("given", [2, 1])
def test_a_kernels_first_call_loads_the_form_a_narrower_pool_runs_too(monkeypatch, given):
    """The pool narrows to one thread when another process keeps a core busy, and a kernel then runs its serial
    form: loaded only then, it stopped a warm run's step for seconds. So the first call loads both forms for its
    arguments, and a later narrowing loads nothing; on a one-thread pool the threaded form, never run, is not."""
    before = numba.get_num_threads()
    try:
        runtime.set_threads(given)
        monkeypatch.setattr(cpu, "pool_threads", lambda: given)  # no look at the machine: the width as given
        gelu = cpu._Kernel(cpu._gelu_forward.serial.py_func)  # dispatchers of its own: nothing loaded yet
        x = np.linspace(-3, 3, cpu.PARALLEL_FROM, dtype=np.float32)
        wide, narrow = np.empty_like(x), np.empty_like(x)
        gelu(x, wide)
        assert gelu.serial.signatures == [(numba.typeof(x), numba.typeof(wide))]
        assert gelu.parallel.signatures == (gelu.serial.signatures if given > 1 else [])
        monkeypatch.setattr(cpu, "pool_threads", lambda: 1)
        monkeypatch.setattr(gelu.serial, "_compile_for_args", None)  # a call that needed a load would fail here
        gelu(x, narrow)
        np.testing.assert_array_equal(narrow, wide)
    finally:
        runtime.set_threads(before)


def test_the_pool_narrows_while_other_processes_keep_the_cores_busy_and_widens_after():
    """Three looks in a row that find another process's thread running take one thread off (of 2 cores); six
    that find none give it back."""
    before = numba.get_num_threads()
    try:
        runtime.set_threads(2)
        for looks, width in (([1], 2), ([1, 1], 2), ([0, 1, 1], 2), ([1, 1, 1], 1), ([1, 1, 1, 0, 0], 1),
                             ([1, 0, 0, 0, 0, 0], 1), ([0] * 6, 2), ([2, 2, 2], 1), ([1, 0, 0, 0, 0, 0, 0], 2)):
            runtime._resize(looks, cores=2)
            assert (runtime._pool["now"], numba.get_num_threads()) == (width, width), looks
    finally:
        runtime.set_threads(before)


@pytest.mark.skipif(not os.path.exists("/proc/self/task"), reason="the look at the machine reads Linux's /proc")
def test_a_busy_process_beside_this_one_is_seen_running():
    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        time.sleep(0.3)
        looks = []
        for _ in range(20):
            looks.append(runtime._running_elsewhere())
            time.sleep(0.01)
    finally:
        spinner.kill()
        spinner.wait()
    assert all(isinstance(n, int) and n >= 0 for n in looks) and max(looks) >= 1

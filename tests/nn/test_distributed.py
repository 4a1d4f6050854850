"""nn.distributed without a second process: fake MPI and NCCL communicators stand in for the other rank.

The fakes play rank 0 or 1 of a two-rank job whose other rank holds known
gradients, so the averaged result is checked value for value; the NCCL fake
reads and writes the very memory the pointers name, so everything up to the
NCCL call itself runs here. tests/models/test_train_mpi.py runs real MPI jobs.
"""
import ctypes
import signal
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

import nn
from autograd import Tensor
from nn import distributed as dist

ROOT = Path(__file__).resolve().parents[2]
IN_PLACE = object()
SHARED = object()


class FakeMPI:
    """COMM_WORLD of a two-rank job seen from `rank`; the other rank's flat buffers are `other`, in call order."""

    def __init__(self, rank, other=(), size=2, unique_id=None):
        self.rank, self.size, self.other, self.unique_id = rank, size, list(other), unique_id
        self.sizes = []

    def Get_rank(self):
        return self.rank

    def Get_size(self):
        return self.size

    def Split_type(self, kind):
        assert kind is SHARED
        return SimpleNamespace(Get_rank=lambda: self.rank, Get_size=lambda: self.size)

    def Allreduce(self, send, recv):
        assert send is IN_PLACE
        self.sizes.append(recv.size)
        recv += self.other.pop(0)

    def Bcast(self, buf, root):
        self.sizes.append(buf.size)
        if self.rank != root:
            buf[...] = self.other.pop(0)

    def bcast(self, obj, root):
        return obj if self.rank == root else self.unique_id


def as_array(pointer, count, dtype):
    """The `count` elements of `dtype` at address `pointer`, as a NumPy view (what NCCL would touch)."""
    buffer = (ctypes.c_char * (count * np.dtype(dtype).itemsize)).from_address(pointer)
    return np.frombuffer(buffer, dtype=dtype)


class FakeNCCL:
    available = True
    NCCL_SUM, NCCL_FLOAT16, NCCL_FLOAT32, NCCL_FLOAT64 = 0, 6, 7, 8
    TYPES = {6: np.float16, 7: np.float32, 8: np.float64}

    def __init__(self, other):
        self.other, self.calls, self.created = list(other), [], []

    def get_unique_id(self):
        return (7,) * 128

    def NcclCommunicator(self, ndev, unique_id, rank):
        self.created.append((ndev, unique_id, rank))
        return self

    def allReduce(self, send, recv, count, datatype, op, stream):
        self.calls.append(("allReduce", send == recv, count, datatype, op, stream))
        as_array(recv, count, self.TYPES[datatype])[...] += self.other.pop(0)

    def bcast(self, buff, count, datatype, root, stream):
        self.calls.append(("bcast", count, datatype, root, stream))
        as_array(buff, count, self.TYPES[datatype])[...] = self.other.pop(0)


@pytest.fixture
def job(monkeypatch):
    """Two ranks: dist's module state is restored afterwards, and BLAS threads are left alone."""
    for name in ("rank", "local_rank", "_mpi", "_host", "_collectives", "comm_seconds"):
        monkeypatch.setattr(dist, name, getattr(dist, name))
    monkeypatch.setattr(dist, "world_size", 2)
    monkeypatch.setenv("OMP_NUM_THREADS", "1")


def model_with_grads(seed):
    """Four float64 parameters (6, 2, 6 and 3 values) with gradients, but the last one without any."""
    rng = np.random.default_rng(seed)
    model = nn.Sequential(nn.Linear(3, 2), nn.Linear(2, 3))
    for p in model.parameters():
        p.data = rng.standard_normal(p.shape)
        p.grad = rng.standard_normal(p.shape)
    model.parameters()[-1].grad = None
    return model


def expected_mean(model, other_grads):
    return [((p.grad if p.grad is not None else 0) + g) / 2 for p, g in zip(model.parameters(), other_grads)]


@pytest.mark.parametrize("env, expected", [
    ({"PMI_RANK": "1", "PMI_SIZE": "4"}, (1, 4)),                             # MPICH / Intel MPI (hydra)
    ({"OMPI_COMM_WORLD_RANK": "2", "OMPI_COMM_WORLD_SIZE": "3"}, (2, 3)),     # Open MPI
    ({}, (0, 1)),                                                             # no launcher
])
def test_rank_and_world_size_come_from_the_launcher(monkeypatch, env, expected):
    for names in dist.LAUNCHER_VARIABLES:
        for name in names:
            monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert dist._launched() == expected


def test_one_process_needs_no_collectives():
    assert dist.world_size == 1, "the test suite runs outside mpiexec"
    model = model_with_grads(0)
    grads = [p.grad for p in model.parameters()]
    dist.init()
    dist.all_reduce_gradients(model)
    dist.broadcast_parameters(model)
    assert [p.grad for p in model.parameters()] == grads  # the very same arrays
    assert dist.all_reduce([1.5, 2.0]) == [1.5, 2.0] and dist.all_gather("x") == ["x"]


@pytest.mark.parametrize("bucket_bytes, sizes", [(4 * 2 ** 20, [17]), (64, [8, 6, 3]), (8, [6, 2, 6, 3])])
def test_gradients_are_averaged_over_flat_buckets(job, monkeypatch, bucket_bytes, sizes):
    monkeypatch.setattr(dist, "BUCKET_BYTES", bucket_bytes)
    model = model_with_grads(0)
    other = [np.random.default_rng(1).standard_normal(p.shape) for p in model.parameters()]
    flat_other = np.concatenate([g.ravel() for g in other])
    chunks = np.split(flat_other, np.cumsum(sizes)[:-1])
    comm = FakeMPI(rank=0, other=chunks)
    dist._connect(comm, "cpu", SHARED, IN_PLACE)
    expected = expected_mean(model, other)
    dist.all_reduce_gradients(model)
    assert comm.sizes == sizes  # one call per bucket: whole parameters, at most BUCKET_BYTES unless one is larger
    for p, want in zip(model.parameters(), expected):
        np.testing.assert_array_equal(p.grad, want)
        assert p.grad.shape == p.shape and p.grad.dtype == np.float64


def test_a_flat_gradient_buffer_stays_the_gradients_home(job):
    """With AdamW's flat_grads, the mean is written into the buffer's views, so clipping and the step keep their
    one-kernel paths (views of a new buffer sent both back to one call per parameter)."""
    model = model_with_grads(0)
    grads = [p.grad for p in model.parameters()]
    opt = nn.optim.AdamW(model.parameters(), flat_grads=True)
    opt.zero_grad()
    for p, g in zip(model.parameters(), grads):
        if g is not None:
            p.grad += g
    views = [p.grad for p in model.parameters()]
    other = [np.random.default_rng(1).standard_normal(p.shape) for p in model.parameters()]
    dist._connect(FakeMPI(rank=0, other=[np.concatenate([g.ravel() for g in other])]), "cpu", SHARED, IN_PLACE)
    expected = expected_mean(model, other)
    dist.all_reduce_gradients(model)
    for p, view, want in zip(model.parameters(), views, expected):
        assert p.grad is view
        np.testing.assert_array_equal(p.grad, want)


def test_broadcast_overwrites_parameters_in_place_with_rank_0s(job):
    model = model_with_grads(0)
    root = [np.full(p.shape, float(i)) for i, p in enumerate(model.parameters())]
    arrays = [p.data for p in model.parameters()]
    dist._connect(FakeMPI(rank=1, other=[np.concatenate([r.ravel() for r in root])]), "cpu", SHARED, IN_PLACE)
    dist.broadcast_parameters(model)
    for p, array, want in zip(model.parameters(), arrays, root):
        assert p.data is array  # in place: an optimizer holding the arrays keeps seeing the model's
        np.testing.assert_array_equal(p.data, want)


def test_broadcast_is_a_change_in_place_that_a_graph_recorded_before_it_refuses(job):
    model = model_with_grads(0)
    loss = (model(Tensor(np.ones((1, 3)))) ** 2).sum()  # saves the weights' old values for its backward
    root = np.concatenate([np.full(p.size, 2.0) for p in model.parameters()])
    dist._connect(FakeMPI(rank=1, other=[root]), "cpu", SHARED, IN_PLACE)
    dist.broadcast_parameters(model)
    with pytest.raises(RuntimeError, match="was changed in place after the forward that saved it"):
        loss.backward()  # else the gradient would mix rank 1's old weights with rank 0's


def test_host_values_sum_over_ranks(job):
    comm = FakeMPI(rank=0, other=[np.array([0.5, 1.0])])
    dist._connect(comm, "cpu", SHARED, IN_PLACE)
    assert dist.all_reduce([1.0, 2.0]) == [1.5, 3.0]
    assert dist.comm_seconds > 0


@pytest.mark.parametrize("joined_on_the_cpu_first", [False, True])
def test_cuda_takes_the_gpu_of_its_local_rank_and_reduces_with_nccl(job, monkeypatch, joined_on_the_cpu_first):
    """Everything up to NCCL: device choice, the unique id over MPI, and each call's pointer, count, type, stream.

    A job may join on the CPU first (models.train does, to agree on its options) and move to the GPU later.
    """
    model = model_with_grads(0)
    other = [np.random.default_rng(1).standard_normal(p.shape) for p in model.parameters()]
    root = [np.full(p.shape, 3.0) for p in model.parameters()]
    nccl = FakeNCCL([np.concatenate([g.ravel() for g in other]), np.concatenate([r.ravel() for r in root])])
    used = []
    cupy = SimpleNamespace(cuda=SimpleNamespace(
        Device=lambda i: SimpleNamespace(use=lambda: used.append(i)),
        runtime=SimpleNamespace(getDeviceCount=lambda: 2),
        get_current_stream=lambda: SimpleNamespace(ptr=1234)))
    monkeypatch.setattr(dist.backend, "xp_for", lambda device: cupy if device == "cuda" else np)
    monkeypatch.setattr(dist.backend, "nccl", lambda: nccl)
    unique_id = nccl.get_unique_id()
    comm = FakeMPI(rank=1, size=2, unique_id=unique_id)
    if joined_on_the_cpu_first:
        dist._connect(comm, "cpu", SHARED, IN_PLACE)
        assert used == [] and nccl.created == []
        dist.init("cuda")
    else:
        dist._connect(comm, "cuda", SHARED, IN_PLACE)
    assert used == [1] and dist.local_rank == 1
    assert nccl.created == [(2, unique_id, 1)]  # joined with the id rank 0 sent over MPI
    expected = expected_mean(model, other)
    dist.all_reduce_gradients(model)
    assert nccl.calls == [("allReduce", True, 17, nccl.NCCL_FLOAT64, nccl.NCCL_SUM, 1234)]
    for p, want in zip(model.parameters(), expected):
        np.testing.assert_array_equal(p.grad, want)
    dist.broadcast_parameters(model)
    assert nccl.calls[-1] == ("bcast", 17, nccl.NCCL_FLOAT64, 0, 1234)
    for p, want in zip(model.parameters(), root):
        np.testing.assert_array_equal(p.data, want)


def test_nccl_refuses_integer_buffers(job):
    collectives = dist.NCCLCollectives(FakeMPI(rank=0), FakeNCCL([]), lambda: SimpleNamespace(ptr=0))
    with pytest.raises(TypeError, match="NCCL reduces .* got int64"):
        collectives.sum(np.zeros(3, dtype=np.int64))


def test_a_cupy_without_nccl_says_how_to_get_it(job):
    nccl = FakeNCCL([])
    nccl.available = False
    with pytest.raises(dist.DistributedError, match="CuPy finds no NCCL .* `pip install nvidia-nccl-cu12`"):
        dist.NCCLCollectives(FakeMPI(rank=0), nccl, lambda: SimpleNamespace(ptr=0))


def test_nccl_calls_run_on_a_real_gpu(device):
    """One rank alone: its sum and broadcast change nothing, but pointers, counts, types and stream are real."""
    cupy, nccl = dist.backend.xp_for(device), dist.backend.nccl()
    if not nccl.available:
        pytest.skip("CuPy finds no NCCL: pip install nvidia-nccl-cu12")
    collectives = dist.NCCLCollectives(FakeMPI(rank=0, size=1), nccl, dist.backend.current_stream)
    flat = cupy.arange(6, dtype=cupy.float32)
    collectives.sum(flat)
    collectives.broadcast(flat, 0)
    assert cupy.asnumpy(flat).tolist() == list(range(6))


def test_init_without_mpi4py_says_how_to_install_it(job, monkeypatch):
    monkeypatch.setitem(sys.modules, "mpi4py", None)  # makes `from mpi4py import MPI` fail
    with pytest.raises(dist.DistributedError, match=r"mpi4py is not installed; install it with `pip install -e"):
        dist.init()


def test_a_rank_that_cannot_join_ends_as_a_crash_does_so_the_launcher_ends_the_job():
    """MPICH's launcher ends every rank when one dies of a signal, not when one exits with a status: the ranks that
    joined would wait for this one for ever (tests/models/test_train_mpi.py runs such a job)."""
    done = subprocess.run([sys.executable, "-c", "from nn import distributed; print('said', flush=True); "
                           "distributed.end_job(); print('still here')"], cwd=ROOT, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == -signal.SIGTERM and done.stdout == "said\n"


def test_a_launcher_from_another_mpi_is_named(job):
    with pytest.raises(dist.DistributedError, match="started 2 processes but MPI sees 1: the mpiexec on PATH"):
        dist._connect(FakeMPI(rank=0, size=1), "cpu", SHARED, IN_PLACE)


def test_collectives_before_init_say_so(job):
    with pytest.raises(RuntimeError, match=r"all_reduce_gradients: this is rank \d of 2; call nn.distributed.init"):
        dist.all_reduce_gradients(nn.Linear(2, 2))

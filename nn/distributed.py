"""Data parallelism over MPI: N processes, one model each, gradients averaged so every rank takes the same step.

Launch N copies of a script with `mpiexec -n N python script.py`; in it:

    from nn import distributed as dist
    dist.init()                        # join the job (nothing to join without mpiexec)
    dist.broadcast_parameters(model)   # every rank starts from rank 0's weights
    ...                                # each rank: its own batch, loss.backward()
    dist.all_reduce_gradients(model)   # every rank now holds the mean gradient
    optimizer.step()                   # the same update everywhere

`rank` and `world_size` come from the launcher's environment as soon as this
module is imported, so a script can ask before init(). mpi4py is imported by
init() only under a launcher that started more than one process: a single
process never imports it. Gradients and weights travel in flat contiguous
buckets of about BUCKET_BYTES, one collective call per bucket rather than one
per parameter. On the CPU the collectives are MPI's (mpi4py, on NumPy arrays);
with init("cuda") each rank takes the GPU of its local rank on its machine and
the collectives are NCCL's (CuPy's cupy.cuda.nccl, from backend.nccl(), on GPU
arrays), after rank 0 has sent NCCL's unique id to the others over MPI, as
llm.c bootstraps it.
"""
import os
import signal
import sys
import time

import numpy as np

from autograd import backend, kernels

BUCKET_BYTES = 4 * 2 ** 20

# How MPI launchers tell a process its place: MPICH's and Intel MPI's hydra, Open MPI, MVAPICH.
LAUNCHER_VARIABLES = (("PMI_RANK", "PMI_SIZE"), ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"),
                      ("MV2_COMM_WORLD_RANK", "MV2_COMM_WORLD_SIZE"))


class DistributedError(RuntimeError):
    """The job cannot start: mpi4py missing, or a launcher that does not match it."""


def _launched():
    """(rank, world size) that the launcher gave this process in its environment; (0, 1) without one."""
    for rank_variable, size_variable in LAUNCHER_VARIABLES:
        if size_variable in os.environ:
            return int(os.environ.get(rank_variable, "0")), int(os.environ[size_variable])
    return 0, 1


rank, world_size = _launched()
local_rank = 0  # this rank's number among the ranks on its machine (its GPU), known after init()
comm_seconds = 0.0  # wall time in this module's collectives, waiting for other ranks included (NCCL: launching)
_mpi = None  # mpi4py's COMM_WORLD, after init() in a job of several processes
_host = None  # MPICollectives: sums and broadcasts host arrays
_collectives = None  # the same for the model's arrays: _host on the CPU, NCCLCollectives on GPUs


def init(device="cpu"):
    """Join the job mpiexec started: rank 0..world_size-1, and collectives for the model's arrays on `device`.

    Without a launcher, or with one process, there is nothing to join and
    mpi4py is not imported. A job joined on the CPU can call init("cuda")
    later, once its ranks agree on the device: the model's collectives then
    move to NCCL. In a job, an exception no one catches on any rank, from
    the import of this module on (before init() too), prints its traceback
    and then ends every rank, instead of leaving the others waiting in a
    collective forever. sys.exit() never reaches that hook (Python ends the
    rank quietly): a rank that must leave early calls end_job(). The ranks on one
    machine share its cores, one BLAS thread pool each (cores / ranks threads)
    unless OMP_NUM_THREADS or OPENBLAS_NUM_THREADS says otherwise: with every
    rank running a pool as wide as the machine, OpenBLAS's spinning threads
    crowd each other out and a step takes many times as long.
    """
    backend.check_device(device)
    if world_size == 1:
        return
    if _mpi is not None:
        if device == "cuda" and _collectives is _host:
            _use_gpu()
        return
    try:
        from mpi4py import MPI
    except ImportError:
        raise DistributedError(f"nn.distributed: this is rank {rank} of {world_size} processes, but mpi4py is "
                               "not installed; install it with `pip install -e \".[dist]\"` (mpi4py and MPICH)"
                               ) from None
    _connect(MPI.COMM_WORLD, device, MPI.COMM_TYPE_SHARED, MPI.IN_PLACE)


def end_job():
    """End this process as a crash would, so that the launcher ends every rank: for a rank that could not join the
    job (init raised), or that leaves it early, whose peers may be waiting for it in MPI. An exit with a status is
    not enough: MPICH's launcher then waits for the other ranks, and they wait for this one for ever."""
    sys.stdout.flush()
    sys.stderr.flush()
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGTERM)


def _end_job_on_uncaught_exception():
    """From import on, in a job: an uncaught exception prints its traceback and then ends every rank, whether this
    rank has joined (MPI_Abort) or not yet (end_job: its peers wait for it in init())."""
    previous_hook = sys.excepthook

    def end_every_rank(kind, value, traceback):
        previous_hook(kind, value, traceback)
        if _mpi is None:
            end_job()
        else:
            sys.stderr.flush()
            time.sleep(0.5)  # the launcher relays output through pipes that the abort tears down: let it pass first
            _mpi.Abort(1)
    sys.excepthook = end_every_rank


if world_size > 1:
    _end_job_on_uncaught_exception()


def _connect(comm, device, shared_memory_type, in_place):
    """Take rank, local rank and collectives from an MPI communicator (init's work, apart for tests)."""
    global rank, local_rank, _mpi, _host, _collectives
    if comm.Get_size() != world_size:
        raise DistributedError(f"nn.distributed: the launcher started {world_size} processes but MPI sees "
                               f"{comm.Get_size()}: the mpiexec on PATH belongs to another MPI than mpi4py's; "
                               "use the one `pip install mpich` put beside this Python")
    rank = comm.Get_rank()
    machine = comm.Split_type(shared_memory_type)  # the ranks that share this one's memory
    local_rank = machine.Get_rank()
    _share_cores(machine.Get_size())
    _mpi, _host = comm, MPICollectives(comm, in_place)
    _collectives = _host
    if device == "cuda":
        _use_gpu()


def _use_gpu():
    """This rank takes the GPU of its local rank, and the model's collectives become NCCL's there."""
    global _collectives
    backend.use_gpu(local_rank)
    _collectives = NCCLCollectives(_mpi, backend.nccl(), backend.current_stream)


def _share_cores(ranks_here):
    if any(name in os.environ for name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")):
        return
    from threadpoolctl import threadpool_limits
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    share = max(1, cores // ranks_here)
    threadpool_limits(share, user_api="blas")
    kernels.share_cpu_threads(share)  # numba's kernels too: the rank's threads never outnumber its cores


def _timed(collective, *args):
    """collective(*args), its wall time added to comm_seconds."""
    global comm_seconds
    start = time.perf_counter()
    try:
        return collective(*args)
    finally:
        comm_seconds += time.perf_counter() - start


class MPICollectives:
    """Sum and broadcast NumPy arrays in place over MPI."""

    def __init__(self, comm, in_place):
        self.comm, self.in_place = comm, in_place

    def sum(self, flat):
        self.comm.Allreduce(self.in_place, flat)

    def broadcast(self, flat, root):
        self.comm.Bcast(flat, root=root)


class NCCLCollectives:
    """Sum and broadcast GPU arrays in place with NCCL, on the current CUDA stream.

    Rank 0 makes NCCL's unique id and sends it to the others over MPI; each
    rank then joins the NCCL communicator with it. `nccl` is CuPy's binding
    module (cupy.cuda.nccl), `current_stream` returns the stream NCCL queues on.
    """
    DTYPES = {"float16": "NCCL_FLOAT16", "float32": "NCCL_FLOAT32", "float64": "NCCL_FLOAT64"}

    def __init__(self, mpi_comm, nccl, current_stream):
        if not nccl.available:
            raise DistributedError("nn.distributed: CuPy finds no NCCL (cupy.cuda.nccl.available is False); "
                                   "install NCCL for your CUDA, e.g. `pip install nvidia-nccl-cu12`")
        unique_id = nccl.get_unique_id() if mpi_comm.Get_rank() == 0 else None
        unique_id = mpi_comm.bcast(unique_id, root=0)
        self.comm = nccl.NcclCommunicator(mpi_comm.Get_size(), unique_id, mpi_comm.Get_rank())
        self.nccl, self.current_stream = nccl, current_stream

    def _type(self, flat):
        if flat.dtype.name not in self.DTYPES:
            raise TypeError(f"nn.distributed: NCCL reduces {sorted(self.DTYPES)} here, got {flat.dtype}")
        return getattr(self.nccl, self.DTYPES[flat.dtype.name])

    def sum(self, flat):
        pointer = backend.pointer(flat)
        self.comm.allReduce(pointer, pointer, flat.size, self._type(flat), self.nccl.NCCL_SUM,
                            self.current_stream().ptr)

    def broadcast(self, flat, root):
        self.comm.bcast(backend.pointer(flat), flat.size, self._type(flat), root, self.current_stream().ptr)


def _ready(what):
    if _collectives is None:
        raise RuntimeError(f"nn.distributed.{what}: this is rank {rank} of {world_size}; call "
                           "nn.distributed.init() first")


def _buckets(params):
    """Consecutive parameters grouped so each group shares device and dtype and holds about BUCKET_BYTES.

    A parameter larger than BUCKET_BYTES makes a bucket of its own.
    """
    bucket, size = [], 0
    for p in params:
        if bucket and ((p.device, p.dtype) != (bucket[0].device, bucket[0].dtype)
                       or size + p.data.nbytes > BUCKET_BYTES):
            yield bucket
            bucket, size = [], 0
        bucket.append(p)
        size += p.data.nbytes
    if bucket:
        yield bucket


def _flat(arrays, device):
    return backend.xp_for(device).concatenate([a.ravel() for a in arrays])


def _pieces(flat, params):
    """Views of `flat` shaped like each parameter, in order."""
    offset = 0
    for p in params:
        yield p, flat[offset:offset + p.data.size].reshape(p.shape)
        offset += p.data.size


def broadcast_parameters(module, root=0):
    """Overwrite every parameter of `module`, in place, with rank `root`'s values."""
    if world_size == 1:
        return
    _ready("broadcast_parameters")
    for bucket in _buckets(module.parameters()):
        flat = _flat([p.data for p in bucket], bucket[0].device)
        _timed(_collectives.broadcast, flat, root)
        for p, piece in _pieces(flat, bucket):
            p.data[...] = piece
            p.mark_changed()  # a graph recorded before holds the old values: its backward must refuse


def all_reduce_gradients(module):
    """Replace every gradient of `module` by its mean over the ranks (a missing .grad counts as zeros).

    Each bucket is one contiguous buffer, summed across ranks in place and
    divided by world_size, then copied back into the gradients: an AdamW's
    flat buffer (flat_grads) stays the gradients' home, so clipping and the
    step keep their one-kernel paths. A missing .grad becomes a view of it.
    """
    if world_size == 1:
        return
    _ready("all_reduce_gradients")
    params = [p for p in module.parameters() if p.requires_grad]
    for bucket in _buckets(params):
        xp = backend.xp_for(bucket[0].device)
        flat = _flat([p.grad if p.grad is not None else xp.zeros_like(p.data) for p in bucket], bucket[0].device)
        _timed(_collectives.sum, flat)
        flat /= world_size
        for p, piece in _pieces(flat, bucket):
            if p.grad is None:
                p.grad = piece
            else:
                p.grad[...] = piece


def all_reduce(values):
    """The sum over ranks of a list of floats, as a list (host memory, through MPI): for losses and flags."""
    if world_size == 1:
        return list(values)
    _ready("all_reduce")
    flat = np.array(values, dtype=np.float64)
    _timed(_host.sum, flat)
    return flat.tolist()


def all_gather(obj):
    """Every rank's `obj` (any picklable value), as a list in rank order."""
    if world_size == 1:
        return [obj]
    _ready("all_gather")
    return _timed(_mpi.allgather, obj)

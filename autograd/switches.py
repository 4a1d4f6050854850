"""Every environment switch of the project, in one table, and the one function that reads them.

An AUTOGRAD_* or GPT_* variable is read nowhere else (a test holds the code to
it), and docs/switches.md prints this table for people: what each switch does,
its default and when it is read, which decides whether setting it inside a
running program still counts. The engine's settings that are not switches,
such as the thread count (OMP_NUM_THREADS) and numba's own variables, are
the libraries' and read by them.
"""
import os
from dataclasses import dataclass


class SwitchError(ValueError):
    """A switch set to a value it does not take; ops pass it on as it is (it is not about their inputs)."""


@dataclass(frozen=True)
class Switch:
    default: str  # what holds when the variable is unset, as docs/switches.md says it
    read: str  # when the code reads it
    does: str
    values: tuple = ("0", "1")  # what it may be set to: anything else is refused, naming the switch


SWITCHES = {
    "AUTOGRAD_FUSED": Switch(
        default="1",
        read="each time an op looks for its fused kernel (every call of such an op)",
        does="0 turns every fused kernel off, the CPU's (numba) and the GPU's (CUDA): each op then composes its "
             "formula from array calls, the reference the kernels are tested against"),
    "AUTOGRAD_SHARED_POOL": Switch(
        default="1",
        read="once, when the CPU kernels load (the first float32 array of 1K elements or more an op sees)",
        does="0 keeps two thread pools on the CPU: OpenBLAS's own threads for the products and numba's "
             "workqueue threads for the kernels, instead of numba's OpenMP threads for both"),
    "AUTOGRAD_KEEP_FREED_MEMORY": Switch(
        default="unset",
        read="when autograd is imported (1 makes the call then) and at each keep_freed_memory() call (0 refuses it)",
        does="whether glibc keeps freed array memory for reuse (autograd.keep_freed_memory): a setting of the whole "
             "process's malloc, which creating any optimizer and the training and sampling commands make "
             "unless this is 0"),
    "GPT_DECODE": Switch(
        default="graph on cuda, dynamic on cpu",
        read="at each generate() call",
        does="how generate decodes each new token: dynamic (the model's forward with a growing KV cache), static "
             "(a preallocated cache and fixed kernels, on the CPU their NumPy twins) or graph (the static step "
             "captured once as a CUDA graph)",
        values=("dynamic", "static", "graph")),
}


def read(name):
    """The switch `name` as the environment sets it now, or None where it is unset; a value it does not take is
    refused (AUTOGRAD_FUSED=off would otherwise leave the kernels on without a word)."""
    if name not in SWITCHES:
        raise KeyError(f"{name} is not one of the project's switches ({', '.join(SWITCHES)}): add it to "
                       "autograd/switches.py and docs/switches.md")
    value = os.environ.get(name)
    if value is not None and value not in SWITCHES[name].values:
        raise SwitchError(f"{name}={value!r} is not one of {', '.join(SWITCHES[name].values)} (docs/switches.md); "
                         f"set one of those, or unset it")
    return value

"""The layers a transformer is made of, each a thin Module over one autograd function.

`Linear` stores its weight as (in_features, out_features), so y = x @ W + b
reads as the seeds' math does and as GPT-2's own checkpoints store `Conv1D`
weights (PyTorch's nn.Linear stores the transpose).
"""
import math
import numbers
import operator

import autograd as ag
from autograd.intervals import check

from .module import Module, Parameter, type_name


def _size(module, name, value):
    """`value`, once it is a positive integer: a layer of no features (or 2.5) would fail later, in NumPy's words."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise (ValueError if isinstance(value, numbers.Integral) else TypeError)(
            f"{module}: {name} must be a positive integer, got {value!r}")
    return int(value)


class Linear(Module):
    """y = x @ W + b, W of shape (in_features, out_features); PyTorch's init, U(−1/√in, 1/√in)."""

    def __init__(self, in_features, out_features, bias=True):
        in_features, out_features = _size("Linear", "in_features", in_features), _size("Linear", "out_features",
                                                                                      out_features)
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        bound = 1 / math.sqrt(in_features)
        self.weight = Parameter(ag.rand(in_features, out_features) * (2 * bound) - bound)
        self.register_parameter("bias", Parameter(ag.rand(out_features) * (2 * bound) - bound) if bias else None)

    def forward(self, x):
        return ag.linear(x, self.weight, self.bias)

    def extra_repr(self):
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}"


class Embedding(Module):
    """A table of `num_embeddings` rows of size `embedding_dim`; looking up ids picks rows."""

    def __init__(self, num_embeddings, embedding_dim):
        num_embeddings = _size("Embedding", "num_embeddings", num_embeddings)
        embedding_dim = _size("Embedding", "embedding_dim", embedding_dim)
        super().__init__()
        self.num_embeddings, self.embedding_dim = num_embeddings, embedding_dim
        self.weight = Parameter(ag.randn(num_embeddings, embedding_dim))

    def forward(self, ids):
        return ag.embedding(self.weight, ids)

    def extra_repr(self):
        return f"{self.num_embeddings}, {self.embedding_dim}"


class LayerNorm(Module):
    """Normalise the last axis, then scale (weight, ones) and shift (bias, zeros)."""

    def __init__(self, normalized_shape, eps=1e-5, bias=True):
        if isinstance(normalized_shape, (tuple, list)) and len(normalized_shape) == 1:  # PyTorch's (n,): the last axis
            normalized_shape = normalized_shape[0]
        normalized_shape = _size("LayerNorm", "normalized_shape (the last axis's size; one axis only)",
                                 normalized_shape)
        check("LayerNorm", "eps", eps, "[0, inf)")  # a negative eps makes rows of small variance NaN
        super().__init__()
        self.eps = eps
        self.weight = Parameter(ag.ones(normalized_shape))
        self.register_parameter("bias", Parameter(ag.zeros(normalized_shape)) if bias else None)

    def forward(self, x):
        return ag.layer_norm(x, self.weight, self.bias, self.eps)

    def extra_repr(self):
        return f"{self.weight.shape[0]}, eps={self.eps}"


class Dropout(Module):
    """Inverted dropout while training, identity in eval(); p = 1 drops everything, as in PyTorch."""

    def __init__(self, p=0.5):
        if isinstance(p, bool) or not isinstance(p, numbers.Real) or not 0 <= p <= 1:
            raise (ValueError if isinstance(p, numbers.Real) else TypeError)(
                f"Dropout: p must be a probability in [0, 1], got {p!r}")
        super().__init__()
        self.p = p

    def forward(self, x):
        return ag.dropout(x, self.p, self.training)

    def extra_repr(self):
        return f"p={self.p}"


class GELU(Module):
    """GPT-2's GELU (tanh approximation): PyTorch's nn.GELU(approximate="tanh"), the only form here."""

    def __init__(self, approximate="tanh"):
        if approximate != "tanh":
            raise ValueError(f"GELU: approximate={approximate!r} is not implemented: this GELU is GPT-2's tanh "
                             "approximation; pass approximate='tanh' or leave it out")
        super().__init__()

    def forward(self, x):
        return x.gelu()


class ReLU(Module):
    def forward(self, x):
        return x.relu()


class ModuleList(Module):
    """A list of modules, registered under the names '0', '1', … (as in GPT-2's `h.0`)."""

    def __init__(self, modules=()):
        super().__init__()
        self.extend(modules)

    def append(self, module):
        setattr(self, str(len(self._modules)), self._checked(module, len(self._modules)))
        return self

    def extend(self, modules):
        for module in modules:
            self.append(module)
        return self

    def _checked(self, module, position):
        if not isinstance(module, Module):  # else it would be a plain attribute, never called nor trained
            raise TypeError(f"{type(self).__name__}: item {position} ({type_name(module)}) is not an "
                            "nn.Module; wrap it in a Module whose forward calls it")
        return module

    def _position(self, index):
        """`index` (an integer, negative from the end) as a position from 0; refused as a list would, naming this."""
        try:
            return range(len(self._modules))[operator.index(index)]
        except TypeError:
            raise TypeError(f"{type(self).__name__}: index must be an integer, got {index!r}") from None
        except IndexError:
            raise IndexError(f"{type(self).__name__}: index {index} is out of range for {len(self._modules)} "
                             "modules") from None

    def __getitem__(self, index):
        """A module, or for a slice a new container of this kind holding those modules (as in PyTorch)."""
        modules = list(self._modules.values())
        if isinstance(index, slice):
            picked = type(self).__new__(type(self))
            ModuleList.__init__(picked, modules[index])
            return picked
        return modules[self._position(index)]

    def __setitem__(self, index, module):
        """Put `module` in the place of the one at `index`, under its name (`h.3` stays `h.3`), as in PyTorch."""
        position = self._position(index)
        setattr(self, str(position), self._checked(module, position))

    def __len__(self):
        return len(self._modules)

    def __iter__(self):
        return iter(self._modules.values())


class Sequential(ModuleList):
    """Modules applied one after another."""

    def __init__(self, *modules):
        super().__init__(modules)

    def forward(self, x):
        for module in self:
            x = module(x)
        return x

"""autograd: the engine. `Value` is the scalar engine of lesson one; `Tensor` its n-d sibling.

    from autograd import Tensor
    x = Tensor([[1., 2.], [3., 4.]], requires_grad=True)
    (x @ x.T).relu().sum().backward()
    x.grad

For tools that read the recorded graph (viz): `t.op` is the Function that made
t (its `name`, `rule`, `input_names`, `saved_names`, `scope`, `inputs`, `saved`),
`topological_order(t)` lists the tensors backward visits, in its order, and
`backward_steps` is backward's own walk (under create_graph=True it records
each VJP as ops: autograd/higher.py, beside `grad`, `hvp` and `hessian`). A
Value says the same with the same words: `v.name`, `v.op.name`, `v.op.rule`,
`v.inputs`, `v.topological_order()`. `diverge(fn, inputs, a, b)` replays a
recorded graph under two settings and names the first op, forward then
backward, where the runs part.
"""
from .backend import manual_seed, get_rng_state, set_rng_state, seeded, keep_freed_memory
from .tensor import (Tensor, Function, ShapeError, no_grad, enable_grad, name_scope, is_grad_enabled,
                     set_default_dtype, get_default_dtype, topological_order, backward_steps, root_grad)
from .value import Constant, Value
from . import ops  # noqa: F401  (defining the ops gives Tensor's methods theirs: tensor.py's _ops)
from .functional import (concat, stack, split, where, softmax, log_softmax, cross_entropy, embedding,
                         layer_norm, dropout, scaled_dot_product_attention, linear, checkpoint,
                         zeros, ones, randn, rand, arange)
from .gradcheck import gradcheck, GradcheckError, jacobian
from .higher import grad, hvp, hessian
from .anomaly import detect_anomaly, AnomalyError, is_anomaly_enabled
from .divergence import diverge

__all__ = [
    "Tensor", "Value", "Constant", "Function", "ShapeError", "no_grad", "enable_grad", "name_scope",
    "is_grad_enabled",
    "set_default_dtype", "get_default_dtype", "manual_seed", "get_rng_state", "set_rng_state",
    "seeded", "keep_freed_memory",
    "concat", "stack", "split", "where", "softmax", "log_softmax", "cross_entropy", "embedding",
    "layer_norm", "dropout", "scaled_dot_product_attention", "linear", "checkpoint",
    "zeros", "ones", "randn", "rand", "arange",
    "gradcheck", "GradcheckError", "topological_order", "backward_steps", "root_grad", "jacobian",
    "grad", "hvp", "hessian",
    "detect_anomaly", "AnomalyError", "is_anomaly_enabled", "diverge",
]

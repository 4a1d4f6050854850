"""nn: modules, layers and optimizers, built only on autograd's public API."""
from . import distributed, optim
from .module import Module, Parameter
from .layers import Linear, Embedding, LayerNorm, Dropout, GELU, ReLU, Sequential, ModuleList
from .lora import LoRALinear, lora

__all__ = ["Module", "Parameter", "Linear", "Embedding", "LayerNorm", "Dropout", "GELU", "ReLU",
           "Sequential", "ModuleList", "LoRALinear", "lora", "optim", "distributed"]

"""ag.checkpoint: activations recomputed in backward, bit for bit the unchecked pass, dropout included."""
import numpy as np
import pytest

import autograd as ag
import nn
from autograd import Tensor
from models.gpt.gpt2 import GPT, GPTConfig

from ._helpers import while_another_thread_pauses


def gpt_step(checkpoint_blocks, grad_accum=1):
    """Loss, every gradient and the random stream after a training step of a tiny GPT with dropout."""
    ag.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=16, block_size=8, n_layer=2, n_head=2, n_embd=8, dropout=0.2))
    model.transformer.checkpoint_blocks = checkpoint_blocks
    x = np.random.default_rng(0).integers(0, 16, size=(3, 9))
    losses = []
    for _ in range(grad_accum):
        _, loss = model(x[:, :-1], x[:, 1:])
        (loss / grad_accum).backward()
        losses.append(loss.item())
    return losses, {n: p.grad.copy() for n, p in model.named_parameters()}, ag.get_rng_state()


@pytest.mark.parametrize("grad_accum", [1, 2])
def test_checkpointed_blocks_give_the_same_loss_gradients_and_random_stream_bit_for_bit(grad_accum):
    plain, checked = gpt_step(False, grad_accum), gpt_step(True, grad_accum)
    assert plain[0] == checked[0]
    assert plain[1].keys() == checked[1].keys()
    for name in plain[1]:
        np.testing.assert_array_equal(plain[1][name], checked[1][name], err_msg=name)
    assert plain[2] == checked[2]  # dropout drew its masks once from the live stream, as without checkpointing


def test_a_frozen_model_with_lora_adapters_checkpoints_its_blocks_bit_for_bit():
    import nn
    results = []
    for checkpoint_blocks in (False, True):
        ag.manual_seed(0)
        model = GPT(GPTConfig(vocab_size=16, block_size=8, n_layer=2, n_head=2, n_embd=8, dropout=0.1))
        nn.lora(model, 2, 4, ["c_attn"])
        for p in model.parameters():
            if p.requires_grad:
                p.data = p.data + 0.1  # B nonzero: every adapter path carries gradient
        model.transformer.checkpoint_blocks = checkpoint_blocks
        x = np.random.default_rng(0).integers(0, 16, size=(3, 9))
        _, loss = model(x[:, :-1], x[:, 1:])  # the embeddings are frozen: no block input requires grad
        loss.backward()
        results.append({n: p.grad.copy() for n, p in model.named_parameters() if p.requires_grad})
    assert results[0].keys() == results[1].keys() and len(results[0]) == 4
    for name in results[0]:
        np.testing.assert_array_equal(results[0][name], results[1][name], err_msg=name)


def test_the_checkpointed_op_keeps_only_its_inputs():
    w = Tensor(np.random.default_rng(0).standard_normal((4, 4)), requires_grad=True)
    x = Tensor(np.random.default_rng(1).standard_normal((2, 4)), requires_grad=True)
    y = ag.checkpoint(lambda h: (h @ w).tanh() @ w, x)
    assert y.op.name == "Checkpoint" and y.op.inputs == (x,)
    assert ag.topological_order(y) == [y, x]  # nothing of fn's graph is recorded


def test_gradients_through_a_checkpoint_match_finite_differences():
    rng = np.random.default_rng(2)
    x, w = (Tensor(rng.standard_normal(s), requires_grad=True) for s in [(3, 4), (4, 4)])
    ag.gradcheck(lambda x, w: ag.checkpoint(lambda h, v: ((h @ v).gelu() @ v).sum(axis=0), x, w).sum(), [x, w])


def test_parameters_read_inside_fn_get_their_gradients():
    rng = np.random.default_rng(3)
    w = Tensor(rng.standard_normal((4, 3)), requires_grad=True)
    x = Tensor(rng.standard_normal((2, 4)), requires_grad=True)
    (x @ w).sigmoid().sum().backward()
    expected_w, expected_x = w.grad.copy(), x.grad.copy()
    w.grad = x.grad = None
    ag.checkpoint(lambda h: (h @ w).sigmoid(), x).sum().backward()
    np.testing.assert_array_equal(w.grad, expected_w)
    np.testing.assert_array_equal(x.grad, expected_x)


def test_an_activation_fn_closes_over_is_refused_and_as_an_input_gets_its_gradient():
    """fn closing over h = tanh(w), a result of the caller's ops: the recompute's backward ran on through Tanh,
    a pass the outer one did not know of, which then found Tanh freed ("call the first backward(retain_graph=True)")."""
    rng = np.random.default_rng(4)
    w0, x0 = rng.standard_normal((3, 3)), rng.standard_normal((2, 3))
    w = Tensor(w0, requires_grad=True)
    h = w.tanh()
    loss = ag.checkpoint(lambda t: (t @ h).tanh(), h[:2] * 2.0).sum()
    with pytest.raises(RuntimeError, match=r"^backward: Checkpoint: fn reads a tensor \(shape \(3, 3\), made by Tanh "
                                           r"outside fn\) that requires grad; .* pass it to checkpoint as an input"):
        loss.backward()
    ag.gradcheck(lambda w, x: ag.checkpoint(lambda t, v: (t @ v.tanh()).tanh(), x, w).sum() + (w * w).sum(),
                 [Tensor(w0, requires_grad=True), Tensor(x0, requires_grad=True)])
    w, x = Tensor(w0, requires_grad=True), Tensor(x0, requires_grad=True)
    h = w.tanh()
    (ag.checkpoint(lambda t, v: (t @ v).tanh(), x, h).sum() + (h * h).sum()).backward()
    expected = w.grad.copy()
    w.grad = None
    h = w.tanh()
    ((x @ h).tanh().sum() + (h * h).sum()).backward()
    np.testing.assert_array_equal(w.grad, expected)


def test_misuse_is_one_clear_line():
    x = Tensor([1.0, 2.0])
    with pytest.raises(ValueError, match="no input requires grad"):
        ag.checkpoint(lambda h: h * 2, x)
    with pytest.raises(TypeError, match="fn must return one Tensor"):
        ag.checkpoint(lambda h: [h], Tensor([1.0], requires_grad=True))
    with pytest.raises(TypeError, match="pass fn and the Tensors"):
        ag.checkpoint(lambda h: h, [1.0])
    with ag.no_grad():
        assert ag.checkpoint(lambda h: h * 2, x).tolist() == [2.0, 4.0]  # nothing to recompute: fn runs plainly


def test_a_backward_run_inside_no_grad_still_reaches_through_the_checkpoint():
    """The recompute followed the caller's mode: under no_grad() it recorded nothing and no gradient came out."""
    block = nn.Linear(3, 3)
    x = Tensor(np.ones((2, 3), np.float32), requires_grad=True)
    ag.checkpoint(block, x).sum().backward()
    expected = x.grad.copy(), block.weight.grad.copy()
    x.grad = block.weight.grad = block.bias.grad = None
    loss = ag.checkpoint(block, x).sum()
    with ag.no_grad():
        loss.backward()
    np.testing.assert_array_equal(x.grad, expected[0])
    np.testing.assert_array_equal(block.weight.grad, expected[1])


def test_ag_grad_through_a_checkpoint_is_refused_rather_than_writing_grad():
    """ag.grad writes no .grad; the checkpoint's backward adds into its parameters' .grad, so it says so."""
    block = nn.Linear(3, 3)
    x = Tensor(np.ones((2, 3), np.float32), requires_grad=True)
    with pytest.raises(RuntimeError, match=r"^checkpoint: its backward adds the gradients of fn's parameters into "
                                           r"their \.grad"):
        ag.grad(ag.checkpoint(block, x).sum(), [x])
    assert block.weight.grad is None


def test_ag_grad_in_another_thread_does_not_refuse_this_threads_checkpoint():
    """ag.grad's 'no .grad written' was the process's: a backward here through a checkpoint, while another thread's
    ag.grad walked its own graph, was refused as if it were that ag.grad."""
    class Pause(ag.Function):
        def forward(self, a):
            return a * 2

        def backward(self, g):
            self.pause()
            return (2 * g,)

    def hold(pause):
        Pause.pause = staticmethod(pause)
        w = Tensor(np.array([3.0]), requires_grad=True)
        assert ag.grad(Pause.apply(w).sum(), [w])[0].tolist() == [2.0]

    block = nn.Linear(3, 3)
    x = Tensor(np.arange(6, dtype=np.float32).reshape(2, 3), requires_grad=True)
    block(x).sum().backward()
    expected = block.weight.grad.copy(), x.grad.copy()
    block.zero_grad()
    x.grad = None
    while_another_thread_pauses(hold, lambda: ag.checkpoint(block, x).sum().backward())
    np.testing.assert_array_equal(block.weight.grad, expected[0])
    np.testing.assert_array_equal(x.grad, expected[1])

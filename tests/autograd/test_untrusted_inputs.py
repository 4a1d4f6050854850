"""Untrusted input to the engine: data of the wrong kind, impossible sizes, a checkpointed function that draws
random numbers or fails itself, and anomaly mode blaming the method that made the NaN. Each refusal is one of our
messages, naming the op or method, never a NumPy or Python internal."""
import random
import warnings

import numpy as np
import pytest

import autograd as ag
from autograd import Tensor

NUMPY_WORDS = ("inhomogeneous", "object has no attribute", "tuple index out of range", "dtype object",
               "negative dimensions", "cannot be interpreted")


def refused(error, match, call):
    """`call()` raises `error` with `match` in its message, and none of NumPy's or Python's own words."""
    with pytest.raises(error, match=match) as caught:
        call()
    assert not any(word in str(caught.value) for word in NUMPY_WORDS), caught.value
    return str(caught.value)


# --- leftovers: data and sizes ------------------------------------------------------------------


def test_leftover_data_set_to_a_list_is_refused_naming_data():
    x = Tensor([1.0, 2.0])
    refused(TypeError, r"Tensor\.data .*list", lambda: setattr(x, "data", [3.0, 4.0]))
    np.testing.assert_array_equal(x.data, [1.0, 2.0])  # unchanged
    x.data = np.array([5.0, 6.0], dtype=np.float32)  # an array of the tensor's device is taken
    assert (x * 2).tolist() == [10.0, 12.0]


def test_leftover_data_of_integers_on_a_tensor_that_requires_grad_is_refused():
    x = Tensor([1.0, 2.0], requires_grad=True)
    refused(TypeError, r"Tensor\.data .*int64.*requires grad", lambda: setattr(x, "data", np.array([1, 2])))


def test_leftover_split_along_a_missing_axis_names_split():
    x = Tensor([[1.0, 2.0], [3.0, 4.0]])
    message = refused(ag.ShapeError, r"split: axis 3", lambda: ag.split(x, 2, axis=3))
    assert "2 axes" in message
    assert [p.tolist() for p in ag.split(x, 2, axis=-1)] == [[[1.0], [3.0]], [[2.0], [4.0]]]


def test_leftover_split_into_a_float_number_of_pieces_names_split():
    refused(TypeError, r"split: indices_or_sections", lambda: ag.split(Tensor([1.0, 2.0]), 2.0))


def test_leftover_a_python_int_beyond_int64_is_refused_in_our_words():
    refused(ValueError, r"Tensor: .*1180591620717411303424.*int64", lambda: Tensor(2 ** 70))
    refused(ValueError, r"Tensor: .*int64", lambda: Tensor([1, -2 ** 64]))
    assert Tensor(2 ** 62).item() == 2 ** 62


def test_leftover_ragged_lists_are_refused_in_our_words():
    message = refused(ValueError, r"Tensor: .*ragged", lambda: Tensor([[1.0, 2.0], [3.0]]))
    assert "same length" in message


@pytest.mark.parametrize("make", [ag.zeros, ag.ones, ag.randn, ag.rand])
@pytest.mark.parametrize("shape, what", [((-1,), "-1"), ((2.5,), "2.5"), ((2, "3"), "'3'")])
def test_leftover_constructors_refuse_sizes_that_are_not_counts(make, shape, what):
    refused((ValueError, TypeError), rf"{make.__name__}: .*{what}", lambda: make(*shape))


def test_leftover_linear_on_a_0d_input_names_linear():
    w = Tensor(np.ones((2, 3), dtype=np.float32))
    refused(ag.ShapeError, r"linear: input \(\)", lambda: ag.linear(Tensor(1.0), w))


# --- ag.checkpoint with randomness, and its function's own errors -------------------------------


def noisy(x):
    """A function that draws from NumPy's and Python's global generators, as user code does."""
    noise = np.random.standard_normal(x.shape).astype(np.float32) + random.random()
    return (x * Tensor(noise)).sum()


def test_checkpoint_replays_numpys_global_random_state_in_backward():
    np.random.seed(3)
    random.seed(3)
    x = Tensor(np.arange(4, dtype=np.float32), requires_grad=True)
    out = ag.checkpoint(noisy, x)
    after_forward = np.random.get_state()[1].copy(), random.getstate()
    out.backward()
    np.random.seed(3)
    random.seed(3)
    expected = np.random.standard_normal(4).astype(np.float32) + random.random()
    np.testing.assert_array_equal(x.grad, expected)  # the forward's noise, not fresh draws
    # and backward's replay leaves the caller's streams where forward left them
    np.testing.assert_array_equal(np.random.get_state()[1], after_forward[0])
    assert random.getstate() == after_forward[1]


def test_checkpoint_lets_the_functions_own_error_through_undressed():
    def fails(x):
        raise ValueError("my own complaint")

    with pytest.raises(ValueError) as caught:
        ag.checkpoint(fails, Tensor([1.0], requires_grad=True))
    assert type(caught.value) is ValueError and str(caught.value) == "my own complaint"


# --- anomaly mode names the method -----------------------------------------------------------------


def test_anomaly_mean_of_nothing_blames_mean():
    with ag.detect_anomaly(), pytest.raises(ag.AnomalyError) as caught:
        Tensor(np.zeros(0, np.float32), requires_grad=True).mean()
    message = str(caught.value)
    assert "Mean" in message and "0 elements" in message
    assert "a leaf (the data" not in message


def test_anomaly_var_of_one_element_with_ddof_1_blames_var():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        with ag.detect_anomaly(), pytest.raises(ag.AnomalyError) as caught:
            Tensor([1.0], requires_grad=True).var(ddof=1)
    message = str(caught.value)
    assert "Var" in message and "ddof = 1" in message
    assert "a leaf (the data" not in message

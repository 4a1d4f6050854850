"""Lesson 000's commands: the softmax Jacobian printout and the bigram printout's headings and comparisons."""
import math
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from models.lessons import bigram, softmax

ROOT = Path(__file__).resolve().parents[2]
NUMBER = r"-?\d+\.\d+(?:e[-+]\d+)?"


def run(module, *args):
    result = subprocess.run([sys.executable, "-m", module, *args], cwd=ROOT, capture_output=True, text=True,
                            timeout=120)
    return result


def table_after(text, heading, rows):
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if heading in line)
    return np.array([[float(x) for x in re.findall(NUMBER, line)] for line in lines[start + 2:start + 2 + rows]])


def test_softmax_jacobian_of_the_lesson():
    # z = (2, 1, 0): Σ e^z = e² + e + 1 = 11.107338; p = (0.665241, 0.244728, 0.090031)
    p, jacobian, formula = softmax.softmax_jacobian([2.0, 1.0, 0.0])
    by_hand = np.exp([2.0, 1.0, 0.0]) / (math.e ** 2 + math.e + 1)
    np.testing.assert_allclose(p, by_hand, rtol=1e-15)
    np.testing.assert_allclose(p, [0.665241, 0.244728, 0.090031], atol=5e-7)
    # ∂p_i/∂z_j = p_i(δ_ij − p_j): the diagonal p_i(1 − p_i), off it −p_i p_j
    np.testing.assert_allclose(np.diag(jacobian), by_hand * (1 - by_hand), rtol=1e-12)
    assert jacobian[0, 1] == pytest.approx(-by_hand[0] * by_hand[1], rel=1e-12)
    np.testing.assert_allclose(jacobian, formula, atol=1e-15)


def test_softmax_command_prints_both_matrices_and_the_vjp():
    result = run("models.softmax")
    assert result.returncode == 0, result.stderr
    out = result.stdout
    p = np.exp([2.0, 1.0, 0.0]) / (math.e ** 2 + math.e + 1)
    expected = np.diag(p) - np.outer(p, p)
    assert "(7.389056, 2.718282, 1.000000) / 11.107338" in out and "(0.665241, 0.244728, 0.090031)" in out
    np.testing.assert_allclose(table_after(out, "ag.jacobian(ag.softmax, z)", 3), expected, atol=5e-7)
    np.testing.assert_allclose(table_after(out, "diag(p) − p pᵀ", 3), expected, atol=5e-7)
    difference = float(re.search(r"largest difference: (\S+);", out).group(1))
    assert difference < 1e-15
    vjp_line = next(line for line in out.splitlines() if "gᵀJ" in line)
    numbers = [float(x) for x in re.findall(NUMBER, vjp_line.split(":", 1)[1])]
    np.testing.assert_allclose(numbers, list(expected[0]) * 2, atol=5e-7)


def test_softmax_command_takes_other_logits_and_refuses_bad_ones():
    result = run("models.softmax", "--z", "1000", "0")
    assert result.returncode == 0 and "z shifted by 1000" in result.stdout
    assert table_after(result.stdout, "ag.jacobian", 2)[0, 0] == 0  # p = (1, 0): no slope left
    for args in (["--z", "1"], ["--z", "nan", "1"]):
        bad = run("models.softmax", *args)
        assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "--z" in bad.stderr


def test_softmax_command_writes_no_zero_over_zero_for_very_negative_logits():
    # e^−800 underflows to 0: unshifted, the line read (0.000000, 0.000000) / 0.000000 = (0.731059, 0.268941)
    result = run("models.softmax", "--z", "-800", "-801")
    assert result.returncode == 0, result.stderr
    e = math.exp(-1)
    assert (f"p = e^z / Σ e^z = (1.000000, {e:.6f}) / {1 + e:.6f} (z shifted by -800: the same p, its largest e^z "
            "now 1)") in result.stdout
    assert f"= ({1 / (1 + e):.6f}, {e / (1 + e):.6f})" in result.stdout  # (0.731059, 0.268941)


@pytest.fixture(scope="module")
def bigram_output():
    result = run("models.bigram")
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_bigram_printout_is_headed_by_the_lessons_sections(bigram_output):
    headings = [line[3:].split(" · ")[0] for line in bigram_output.splitlines() if line.startswith("── ")]
    assert headings == ["语料与词表", "训练", "计数下界", "预测"]


def test_bigram_printout_compares_with_the_lessons_losses(bigram_output):
    line = next(line for line in bigram_output.splitlines() if line.strip().startswith("lesson 000 prints"))
    assert "step 0 2.7320, step 100 0.6808, step 500 0.6557" in line and "the same to its 4 decimals" in line
    other = run("models.bigram", "--seed", "1", "--steps", "100")
    assert "lesson 000 prints" not in other.stdout and "its figures do not apply" in other.stdout


def test_bigram_printout_explains_the_gap_to_the_counts(bigram_output):
    model, chars, cur, nxt = bigram.lesson_setup()
    bigram.train(model, cur, nxt, lr=1.0, steps=500)
    eat = chars.index("吃")
    learned = bigram.next_distribution(model, eat)
    counts = bigram.bigram_counts(cur, nxt, len(chars))[eat]
    gap = np.abs(learned - counts / counts.sum()).max()
    printed = float(re.search(r"differ by at most (\S+):", bigram_output).group(1))
    assert printed == pytest.approx(gap, abs=5e-5)
    above = float(re.search(r"the loss ends (\S+) above the bound", bigram_output).group(1))
    bound = bigram.counting_lower_bound(cur, nxt, len(chars))
    assert above == pytest.approx(0.6556566358890349 - bound, abs=5e-5)

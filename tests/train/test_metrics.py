"""Metrics: values on known outputs, weighting by batch size, state round trips."""

import sys

import numpy as np
import pytest

from ember import train


def out(logits, target, loss=1.0, lr=None, split="train"):
    logits, target = np.asarray(logits, dtype=np.float32), np.asarray(target)
    return train.StepOutput(split, loss, logits, target, len(target), lr)


def test_accuracy_and_topk():
    logits = [[0.1, 0.9, 0.0], [0.8, 0.1, 0.1], [0.2, 0.3, 0.5], [0.5, 0.4, 0.1]]
    target = [1, 0, 0, 1]
    acc = train.Accuracy()
    acc.update(out(logits, target))
    assert acc.value() == pytest.approx(0.5) and acc.format(acc.value()) == "50.00%"
    top2 = train.TopKAccuracy(2)
    top2.update(out(logits, target))
    assert top2.name == "Top2Accuracy" and top2.value() == pytest.approx(0.75)
    acc.update(out([[1.0, 0.0, 0.0]] * 4, [0, 0, 0, 0]))
    assert acc.value() == pytest.approx(6 / 8)  # weighted by items, not batches
    acc.reset()
    assert acc.value() is None and acc.format(None) == "-"
    with pytest.raises(ValueError, match="logits"):
        acc.update(out([0.1, 0.2], [0, 1]))


def test_loss_is_weighted_by_batch_size():
    loss = train.Loss()
    loss.update(train.StepOutput("train", 2.0, None, None, 10))
    loss.update(train.StepOutput("train", 1.0, None, None, 30))
    assert loss.value() == pytest.approx(1.25) and loss.last == 1.0
    assert not loss.higher_is_better
    other = train.Loss()
    other.load_state_dict(loss.state_dict())
    assert other.value() == loss.value()


def test_learning_rate_cpu_and_memory():
    lr = train.LearningRate()
    lr.update(train.StepOutput("train", 0.0, None, None, 1, lr=0.1))
    lr.update(train.StepOutput("train", 0.0, None, None, 1, lr=0.05))
    assert lr.value() == 0.05 and lr.splits == ("train",)
    cpu = train.CpuUse()
    sum(i * i for i in range(200_000))  # some CPU work
    cpu.update(train.StepOutput("train", 0.0, None, None, 1))
    assert cpu.value() is not None and 0 <= cpu.value() < 100 * 64
    mem = train.MemoryUse()
    mem.update(train.StepOutput("train", 0.0, None, None, 1))
    if sys.platform == "emscripten":  # Pyodide cannot read its memory use: nothing recorded
        assert mem.value() is None and mem.format(None) == "-"
        return
    assert mem.value() > 1  # MB
    assert mem.format(mem.value()).endswith("MB")

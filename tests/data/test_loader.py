"""DataLoader: batching, drop_last, seeded shuffles per epoch, resuming mid-epoch, the
transform's seeding, the prefetch thread (and running without one), Tensors out."""

import threading

import numpy as np
import pytest

import ember
from ember import data
from ember.backend import NdArray


def _dataset(n=50):
    x = np.arange(n, dtype=np.float32).reshape(n, 1, 1, 1)
    return data.InMemoryDataset(x, np.arange(n))


def _labels(batches):
    return [b[1].to_numpy().tolist() if hasattr(b[1], "to_numpy") else b[1].tolist()
            for b in batches]


def test_batches_cover_the_dataset_once():
    loader = data.DataLoader(_dataset(), batch_size=16)
    batches = list(loader)
    assert len(loader) == 4 == len(batches)
    assert [len(b) for b in _labels(batches)] == [16, 16, 16, 2]
    assert sum(_labels(batches), []) == list(range(50))
    x, y = batches[0]
    assert isinstance(x, ember.Tensor) and x.dtype == "float32" and x.shape == (16, 1, 1, 1)
    assert y.dtype == "int32"
    dropped = data.DataLoader(_dataset(), batch_size=16, drop_last=True)
    assert len(dropped) == 3 and len(list(dropped)) == 3


def test_seeded_shuffle_differs_per_epoch_and_repeats_per_seed():
    a = data.DataLoader(_dataset(), batch_size=10, shuffle=True, seed=1, numpy=True)
    first, second = sum(_labels(a), []), sum(_labels(a), [])
    assert sorted(first) == list(range(50)) and first != list(range(50))
    assert first != second and a.epoch == 2  # a new order each epoch
    b = data.DataLoader(_dataset(), batch_size=10, shuffle=True, seed=1, numpy=True)
    assert sum(_labels(b), []) == first
    c = data.DataLoader(_dataset(), batch_size=10, shuffle=True, seed=2, numpy=True)
    assert sum(_labels(c), []) != first


def test_resume_mid_epoch_sees_the_same_batches():
    loader = data.DataLoader(_dataset(), batch_size=8, shuffle=True, seed=4, numpy=True,
                             transform=data.RandomShift(0))
    full = _labels(loader.batches(epoch=3))
    tail = _labels(loader.batches(epoch=3, start=4))
    assert tail == full[4:]


def test_transform_is_seeded_by_epoch_and_batch():
    x = np.zeros((40, 1, 5, 5), dtype=np.float32)
    x[:, 0, 2, 2] = 1
    ds = data.InMemoryDataset(x, np.zeros(40))
    loader = data.DataLoader(ds, batch_size=8, transform=data.RandomShift(2), numpy=True)
    one = [b[0] for b in loader.batches(0)]
    two = [b[0] for b in loader.batches(0)]
    later = [b[0] for b in loader.batches(1)]
    for a, b in zip(one, two):
        np.testing.assert_array_equal(a, b)
    assert any(not np.array_equal(a, b) for a, b in zip(one, later))
    np.testing.assert_array_equal(one[2], [b[0] for b in loader.batches(0, start=2)][0])


@pytest.mark.parametrize("prefetch", [0, 1, 3])
def test_prefetch_gives_the_same_batches(prefetch):
    ref = _labels(data.DataLoader(_dataset(), batch_size=7, shuffle=True, prefetch=0,
                                  numpy=True))
    got = _labels(data.DataLoader(_dataset(), batch_size=7, shuffle=True, prefetch=prefetch,
                                  numpy=True))
    assert got == ref


@pytest.mark.skipif(not data.threads_available(), reason="no threads here (Pyodide)")
def test_prefetch_thread_stops_when_the_consumer_stops():
    loader = data.DataLoader(_dataset(200), batch_size=2, prefetch=2, numpy=True)
    gen = loader.batches(0)
    next(gen)
    assert any(t.name == "ember-data-prefetch" for t in threading.enumerate())
    gen.close()
    assert not any(t.name == "ember-data-prefetch" and t.is_alive()
                   for t in threading.enumerate())


def test_errors_in_the_prefetch_thread_reach_the_consumer():
    class Broken(data.Dataset):
        def __len__(self):
            return 10

        def __getitem__(self, i):
            if i == 6:
                raise RuntimeError("item 6 is broken")
            return np.zeros(1, np.float32), i

    with pytest.raises(RuntimeError, match="item 6 is broken"):
        list(data.DataLoader(Broken(), batch_size=2, prefetch=2))


def test_no_threads_where_there_are_none(monkeypatch):
    # Pyodide: sys.platform == "emscripten"; batches are made in line
    monkeypatch.setattr(data.loader.sys, "platform", "emscripten")
    assert not data.threads_available()
    before = threading.active_count()
    labels = _labels(data.DataLoader(_dataset(), batch_size=5, prefetch=4, numpy=True))
    assert sum(labels, []) == list(range(50)) and threading.active_count() == before


def test_tensors_on_the_backend_asked_for():
    backend = NdArray()
    x, y = next(iter(data.DataLoader(_dataset(), batch_size=4, backend=backend)))
    assert x.backend is backend and y.backend is backend


def test_bad_arguments():
    with pytest.raises(ValueError, match="batch_size"):
        data.DataLoader(_dataset(), batch_size=0)
    with pytest.raises(TypeError, match="transform"):
        data.DataLoader(_dataset(), transform=3)


def test_shards_of_a_batch_are_its_parts_in_order():
    loader = data.DataLoader(_dataset(), batch_size=16, shuffle=True, seed=3, numpy=True)
    whole = _labels(loader.batches(1))
    parts = [_labels(loader.batches(1, shard=(i, 3))) for i in range(3)]
    for b, labels in enumerate(whole):  # rows [k*i//3, k*(i+1)//3) of each batch of k
        k = len(labels)
        assert [p[b] for p in parts] == [labels[k * i // 3:k * (i + 1) // 3] for i in range(3)]
    assert _labels(loader.batches(1, start=2, shard=(1, 3))) == parts[1][2:]


def test_each_shard_draws_its_own_transform_choices():
    seen = []
    loader = data.DataLoader(_dataset(), batch_size=8, numpy=True, prefetch=0,
                             transform=lambda x, rng: seen.append(rng.random()) or x)
    list(loader.batches(0, shard=(0, 2)))
    list(loader.batches(0, shard=(1, 2)))
    assert seen[0] == np.random.default_rng([0, 0, 0, 0]).random()
    assert seen[len(loader)] == np.random.default_rng([0, 0, 0, 1]).random()

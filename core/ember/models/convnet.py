"""ConvNet: the small convolutional classifier of `ember train` and the shipped models.

    [B, 1, 28, 28] -> conv 3x3 (c1) -> BatchNorm -> ReLU -> max-pool 2
                   -> conv 3x3 (c2) -> BatchNorm -> ReLU -> max-pool 2
                   -> flatten (c2 * 7 * 7) -> Linear (hidden) -> ReLU -> Dropout -> Linear (10)

With the defaults (32, 64, 128): 421,834 parameters, 1.7 MB of float32 weights. Inputs are
images in [0, 1] as the data sets store them (white ink on black); the first BatchNorm makes
any further normalisation unnecessary.
"""

from .. import nn

__all__ = ["ConvNet"]


class ConvNet(nn.Module):
    def __init__(self, num_classes=10, in_channels=1, channels=(32, 64), hidden=128,
                 dropout=0.25, image_size=28, backend=None):
        super().__init__()
        c1, c2 = channels
        self.config = {"num_classes": num_classes, "in_channels": in_channels,
                       "channels": [c1, c2], "hidden": hidden, "dropout": dropout,
                       "image_size": image_size}
        self.conv1 = nn.Conv2d(in_channels, c1, 3, padding=1, backend=backend)
        self.bn1 = nn.BatchNorm2d(c1, backend=backend)
        self.conv2 = nn.Conv2d(c1, c2, 3, padding=1, backend=backend)
        self.bn2 = nn.BatchNorm2d(c2, backend=backend)
        self.pool = nn.MaxPool2d(2)
        self.relu = nn.Relu()
        side = image_size // 4
        self.fc1 = nn.Linear(c2 * side * side, hidden, backend=backend)
        self.dropout = nn.Dropout(dropout)
        self.fc2 = nn.Linear(hidden, num_classes, backend=backend)

    def forward(self, x):
        x = self.pool(self.relu(self.bn1(self.conv1(x))))
        x = self.pool(self.relu(self.bn2(self.conv2(x))))
        x = self.dropout(self.relu(self.fc1(x.flatten(1))))
        return self.fc2(x)

    def extra_repr(self):
        cfg = self.config
        return f"channels={tuple(cfg['channels'])}, hidden={cfg['hidden']}"

"""The benchmark's SqueezeNet-1.1-sized CNN in ember (runs in CPython and in Pyodide alike).

SqueezeNet 1.1's layout (Iandola et al. 2016; torchvision's squeezenet1_1): conv 3x3/2 (64) ->
max-pool 3/2 (ceil) -> fire(16, 64+64) x2 -> pool -> fire(32, 128+128) x2 -> pool ->
fire(48, 192+192) x2 -> fire(64, 256+256) x2 -> conv 1x1 (1000) -> ReLU -> global average
pool. 1,235,496 parameters; input [B, 3, 224, 224]. Dropout is left out (eval mode).
"""

from ember import Tensor, nn

FIRES = ((64, 16, 64), (128, 16, 64), "pool", (128, 32, 128), (256, 32, 128), "pool",
         (256, 48, 192), (384, 48, 192), (384, 64, 256), (512, 64, 256))


class Fire(nn.Module):
    def __init__(self, cin, squeeze, expand, backend=None):
        super().__init__()
        self.squeeze = nn.Conv2d(cin, squeeze, 1, backend=backend)
        self.expand1 = nn.Conv2d(squeeze, expand, 1, backend=backend)
        self.expand3 = nn.Conv2d(squeeze, expand, 3, padding=1, backend=backend)
        self.relu = nn.Relu()

    def forward(self, x):
        s = self.relu(self.squeeze(x))
        return Tensor.cat([self.relu(self.expand1(s)), self.relu(self.expand3(s))], dim=1)


class SqueezeNet(nn.Module):
    def __init__(self, num_classes=1000, backend=None):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 64, 3, stride=2, backend=backend)
        self.pool = nn.MaxPool2d(3, stride=2, ceil_mode=True)
        self.relu = nn.Relu()
        self.names = []
        for i, f in enumerate(f for f in FIRES if f != "pool"):
            self.names.append(f"fire{i + 2}")
            setattr(self, self.names[-1], Fire(*f, backend=backend))
        self.conv10 = nn.Conv2d(512, num_classes, 1, backend=backend)
        self.gap = nn.AdaptiveAvgPool2d(1)

    def forward(self, x):
        x = self.pool(self.relu(self.conv1(x)))
        fires = iter(self.names)
        for f in FIRES:
            x = self.pool(x) if f == "pool" else getattr(self, next(fires))(x)
        return self.gap(self.relu(self.conv10(x))).flatten(1)

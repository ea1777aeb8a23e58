"""Sequential: modules called in order, named "0", "1", ... as in PyTorch's state dicts.

(Plain lists and dicts of modules need no container: Module finds parameters in them.)"""

from .module import Module


class Sequential(Module):
    """`Sequential(a, b, c)(x) == c(b(a(x)))`; also `Sequential({"name": module, ...})`."""

    def __init__(self, *modules):
        super().__init__()
        if len(modules) == 1 and isinstance(modules[0], dict):
            items = list(modules[0].items())
        else:
            items = [(str(i), m) for i, m in enumerate(modules)]
        for name, m in items:
            self._add(name, m)

    def _add(self, name, module):
        if not isinstance(module, Module) and not callable(module):
            raise TypeError(f"Sequential: {name} is a {type(module).__name__}, not a Module")
        setattr(self, str(name), module)

    def _names(self):
        return [k for k in vars(self) if not k.startswith("_") and k != "training"]

    def append(self, module):
        self._add(str(len(self)), module)
        return self

    def __len__(self):
        return len(self._names())

    def __iter__(self):
        return (getattr(self, k) for k in self._names())

    def __getitem__(self, i):
        names = self._names()
        if isinstance(i, slice):
            return Sequential({k: getattr(self, k) for k in names[i]})
        return getattr(self, names[i])

    def forward(self, x):
        for m in self:
            x = m(x)
        return x

"""ember.optim: optimizers in Burn's functional style with PyTorch's update rules.

    opt = optim.Adam(lr=1e-3)                  # SGD, Adam, AdamW, RMSProp, AdaGrad
    grads = loss.backward()
    gp = optim.GradientsParams.from_grads(grads, model)   # param_id -> gradient
    model = opt.step(model, gp)                # returns the module with updated params

`lr` is a float or a scheduler from ember.optim.lr, advanced once per step. Gradients are
values: sum or average GradientsParams from several micro-batches or threads
(`gp1 + gp2`, `GradientsParams.average([...])`, GradientsAccumulator). Clip with
`grad_clip=ClipNorm(1.0)` / `ClipValue(0.5)`. Checkpoint with `opt.state_dict(model)` and
`opt.load_state_dict(state, model)` (plain numbers and NumPy arrays keyed by param names).
"""

from . import lr
from .adagrad import AdaGrad, Adagrad
from .adam import Adam, AdamW
from .clip import ClipNorm, ClipValue, clip_grad_norm, clip_grad_value
from .grads import GradientsAccumulator, GradientsParams, OptimError
from .optimizer import Optimizer
from .rmsprop import RMSProp, RMSprop
from .sgd import SGD

__all__ = [
    "SGD", "AdaGrad", "Adagrad", "Adam", "AdamW", "ClipNorm", "ClipValue",
    "GradientsAccumulator", "GradientsParams", "OptimError", "Optimizer", "RMSProp", "RMSprop",
    "clip_grad_norm", "clip_grad_value", "lr",
]

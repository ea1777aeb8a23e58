"""ember.record: saving and loading weights and training state.

    record.save(model, "model.safetensors")          # every Param, trainable or not
    record.load(model, "model.safetensors")          # checks everything, then loads in place
    record.load_pytorch("weights.pt", model, key_map={r"^conv\\.(.*)": r"conv1.\\1"})
    record.save_state({"optim": opt.state_dict(model), "epoch": 3}, "ckpt.safetensors")
    state = record.load_state("ckpt.safetensors")

Files are safetensors (read and written with NumPy and the standard library only, so this
works in Pyodide): a JSON header and raw little-endian numbers. Names are PyTorch's state-dict
names (`fc.weight`, `bn.running_mean`, `layers.0.bias`), so weights go to and from PyTorch
with no renaming: `safetensors.torch.load_file` reads ember's files and ember reads its.

What is safe, and why:
- safetensors files hold no code: the header is parsed as JSON and the tensors as numbers,
  after every offset and size has been checked against the file (truncated or corrupt files
  are refused with the reason).
- PyTorch's `.pt` / `.pth` files are pickles, and a pickle can name and call any Python
  function. `load_pytorch` unpickles with an allow-list: the few names a state dict's pickle
  uses (torch._utils._rebuild_tensor_v2, storage types, dtypes, collections.OrderedDict, NumPy
  numbers) map to stand-ins written in ember that only build data; any other global
  (os.system, builtins.eval, subprocess.Popen, a model class, ...) raises UnsafePickleError
  naming it, before it could be imported or called. torch is never imported.
- A load compares every name, shape and dtype first and raises one RecordError listing every
  problem; nothing changes unless everything fits. Param ids and trainable flags are kept.
- Saving writes a temporary file in the same folder, fsyncs it and renames it over the target:
  a crash leaves the previous file or none, never a truncated one.
"""

from ._errors import RecordError, UnsafePickleError
from ._module import load, load_state_dict, save, state_dict
from ._pytorch import load_pytorch, read_pytorch
from ._safetensors import read as _read_safetensors
from ._safetensors import write as _write_safetensors
from ._state import load_state, save_state


def read_safetensors(path):
    """({name: NumPy array}, metadata) of any safetensors file (e.g. Hugging Face weights);
    bfloat16 and float8 tensors come back as float32, exactly."""
    return _read_safetensors(path)


def write_safetensors(tensors, path, metadata=None):
    """Write {name: NumPy array} (and str -> str metadata) as a safetensors file, atomically."""
    _write_safetensors(tensors, path, metadata)


__all__ = [
    "RecordError", "UnsafePickleError", "load", "load_pytorch", "load_state", "load_state_dict",
    "read_pytorch", "read_safetensors", "save", "save_state", "state_dict", "write_safetensors",
]

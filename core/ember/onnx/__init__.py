"""ember.onnx: run ONNX models (from PyTorch, TensorFlow, ...) as ember modules.

    model = onnx.load("model.onnx", backend=B)   # an nn.Module; model(*inputs)
    onnx.unsupported("model.onnx")               # what ember cannot run; [] = all fine
    onnx.to_python("model.onnx", "model.py")     # the graph as code (+ model.safetensors)
    onnx.save(model.eval(), "model.onnx", x)     # an ember model as ONNX (its forward on x)

ember reads the protobuf itself (proto.py), so this works in Pyodide without the onnx package.
"""

from .codegen import to_python
from .export import save
from .model import OnnxModule, Unsupported, UnsupportedError, load, unsupported
from .ops import OPS
from .proto import OnnxError

__all__ = ["OPS", "OnnxError", "OnnxModule", "Unsupported", "UnsupportedError", "load", "save",
           "to_python", "unsupported"]

"""The op table's neural-network primitives (convolution, pooling, embedding, resizing).

Declared like every other primitive (see ops/__init__.py); imported by ops/__init__.py.
"""

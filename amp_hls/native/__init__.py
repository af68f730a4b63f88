"""The native runtime: the graph compiled to C++ with the numpy runtime's semantics (docs/native.md)."""

from .codegen import NATIVE_KINDS, NativeUnsupported, unsupported_kinds
from .trainer import NativeTrainer

__all__ = ["NATIVE_KINDS", "NativeTrainer", "NativeUnsupported", "unsupported_kinds"]

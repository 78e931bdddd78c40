"""The one error hierarchy of Tolk. Every error names what the user did and how to fix it."""


class TolkError(Exception):
    """Base of every error Tolk raises on purpose."""


class ShapeError(TolkError, ValueError):
    """Shapes that do not fit: broadcasting, reshape sizes, axes out of range."""


class DTypeError(TolkError, TypeError):
    """A dtype that an operation or a device does not support."""


class ArgumentTypeError(TolkError, TypeError):
    """An argument of the wrong Python type: a float or None where a size or an axis goes, an operand that is
    neither a Tensor, a scalar nor an ndarray. Names the argument, what it got and what it takes."""


class ScalarOverflowError(TolkError, OverflowError):
    """A Python integer that the dtype it must take cannot hold (numpy 2 raises OverflowError there too):
    `Tensor([300], dtype=uint8)`, `int8_tensor + 300`, `full(shape, 2**40, dtype=int32)`."""


class BroadcastStoreError(TolkError, ValueError):
    """A store whose destination is a broadcast: several of its elements are one cell, which the
    store would write once per element, in no order."""


class DeviceError(TolkError):
    """Base of the device-selection errors."""


class UnknownDeviceError(DeviceError, KeyError):
    """A device name no installed plugin provides."""

    def __str__(self) -> str:  # KeyError quotes its message; we want it plain
        return str(self.args[0]) if self.args else ""


class DeviceUnavailableError(DeviceError):
    """A device that was demanded (argument or TOLK_DEVICE) but cannot be used here."""


class DeviceLostError(DeviceError):
    """An opened device that lost its context, driver connection or worker process: nothing more runs on it.
    The registry reports it ``lost`` and the next ``Device[name]`` opens it again (docs/plugins.md, section 7);
    buffers made on the lost device are gone with it."""


class DeviceMismatchError(TolkError, ValueError):
    """Operands of one operation live on different devices. Names the operation and both devices; the fix is
    to move one operand with `.to(device)`."""


class PluginError(TolkError):
    """A plugin that cannot be loaded or validated."""


class CollectiveError(TolkError):
    """A collective operation failed on some rank of its process group: bad or mismatched input, a rank that
    failed or exited. Raised on every rank of the group (naming the rank at fault); the group is then closed."""


class CollectiveTimeoutError(CollectiveError, TimeoutError):
    """A collective operation waited longer than its timeout (TOLK_COLLECTIVES_TIMEOUT) for another rank."""


class ConfigError(TolkError, ValueError):
    """A bad configuration value: unknown key, wrong type, unknown device."""


class CompileError(TolkError):
    """A compiler failed; carries the source and the compiler's message."""

    def __init__(self, message: str, source: str = "", log: str = ""):
        super().__init__(message)
        self.source, self.log = source, log

    def __str__(self) -> str:
        return f"{self.args[0]}\n--- compiler output ---\n{self.log}" if self.log else str(self.args[0])


class JitError(TolkError):
    """Misuse of the JIT (docs/jit.md): nested capture, empty capture, input mismatch on replay."""


class SpecError(TolkError, AssertionError):
    """A graph that breaks the spec of its stage; names the offending node. `stage`, `node` and `reason` say
    which spec, which node (None when the whole form is wrong) and how."""

    def __init__(self, message: str, stage: str | None = None, node: object = None, reason: str | None = None):
        super().__init__(message)
        self.stage, self.node, self.reason = stage, node, reason


class StageSpecError(SpecError):
    """A pass produced a graph that breaks the spec of the form it must produce (raised with SPEC>=1). Names the
    pass (`producer`), the stage and the bad node."""

    def __init__(self, message: str, stage: str | None = None, node: object = None, reason: str | None = None,
                 producer: str | None = None):
        super().__init__(message, stage, node, reason)
        self.producer = producer


class BufferSizeError(TolkError, ValueError):
    """A copy or view whose byte size does not match the buffer's."""


class CopyRequiredError(TolkError, ValueError):
    """A share of memory asked for without a copy (`copy=False`: `np.asarray(t, copy=False)`, `__dlpack__`,
    `Tensor.from_dlpack`) where one is needed. Names why (docs/interop.md)."""


class DiskError(TolkError, ValueError):
    """A disk device (``DISK:<path>``, copy-only) asked to do more than be copied, viewed or bitcast, or a
    file that does not hold the storage asked of it. Names the device and the operation."""


class StateDictError(TolkError, KeyError):
    """A state dict that does not fit the model or optimizer it loads into: missing or unexpected keys."""

    def __str__(self) -> str:  # KeyError quotes its message; we want it plain
        return str(self.args[0]) if self.args else ""


class SafetensorsError(StateDictError, ValueError):
    """A file that is not a well-formed safetensors file: a short or oversized header, a header that is not a
    JSON object, an entry without its dtype, shape or data offsets, offsets outside the data or overlapping.
    Names the file and the tensor."""


class CallArgumentError(TolkError, ValueError):
    """An inline call's argument that does not fit its parameter (docs/prepare.md, inline calls): a storage
    parameter's size, a scalar parameter's shape, or the data type. Names the call, the argument and the
    parameter."""


class CompileTimeoutError(CompileError):
    """A compiler that did not finish within COMPILE_TIMEOUT seconds (docs/configuration.md); it was stopped.
    Names the limit and how to raise it."""


class OutOfMemoryError(TolkError, MemoryError):
    """An allocation that the device cannot hold: larger than the device's largest allocation, its memory, or
    the host memory still available. Names the size, the device and the limit it exceeds."""


class CacheCorruptionWarning(UserWarning):
    """An on-disk cache entry (a compiled binary, a rendered source, ...) that is truncated or damaged: it was
    ignored and rebuilt. The message names the file."""


class IndexWidthError(TolkError, ValueError):
    """A kernel whose index values (element offsets, loop counters, work-item ids) pass the 32-bit range, on a
    device whose renderer computes 32-bit indices only (`Renderer.index64` False). Names the kernel's largest
    index, the largest buffer and the device (docs/dtypes.md, index width)."""


class ShardingError(TolkError, ValueError):
    """A sharding a value cannot take (docs/multi-device.md): an axis it does not have, more shards than the
    axis has elements, sharding a value that is sharded already, or an op that has no sharded form. Names the
    shape, the axis and the devices."""


class ArgumentError(TolkError, ValueError):
    """A layer or function argument outside what it accepts (a probability outside [0, 1], sizes that do not
    divide, an unknown option). Names the argument, its value and what is accepted."""


class UnsupportedError(TolkError, NotImplementedError):
    """A torch option that Tolk's version of a layer or function does not implement. Names the option and what
    to do instead."""


class UnsupportedOnnxOpError(UnsupportedError):
    """An ONNX model holding operators (or operator versions) that tolk_core.onnx has no converter for, or an
    opset outside the supported range (docs/onnx.md). Lists every unsupported (op, opset) of the model at once;
    `ops` holds them."""

    def __init__(self, message: str, ops: tuple[tuple[str, int], ...] = ()):
        super().__init__(message)
        self.ops = ops

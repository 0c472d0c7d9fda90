"""The GE2E speaker encoder (Resemblyzer's weights) as ONNX, without torch; its mel frontend.

Resemblyzer ships its trained encoder only as a legacy PyTorch pickle (``pretrained.pt``). This
module reads that file with a restricted unpickler (only the handful of globals a state dict
needs; anything else is refused) plus the raw little-endian storages that follow the pickle,
and writes the same network as an ONNX graph:

    mels [batch, frames, 40] -> LSTM 256 -> LSTM 256 -> LSTM 256 -> last hidden state
    -> Gemm 256 -> ReLU -> L2 normalise -> embeds [batch, 256]

PyTorch keeps LSTM gates in the order (i, f, g, o) with two biases; ONNX wants (i, o, f, c)
with ``B = [Wb, Rb]``; ``onnx_lstm_weights`` does that reordering (tests check it against a
numpy LSTM in the PyTorch convention).

The frontend follows Resemblyzer's ``audio.py`` / ``voice_encoder.py`` / ``hparams.py``
(16 kHz, 25 ms Hann window, 10 ms hop, 40 Slaney mel bands of the *power* spectrum, no log;
volume raised to -30 dBFS if quieter; partial utterances of 160 frames every 77 frames, i.e.
rate 1.3 per second, the last kept if it is at least 75 % covered; the utterance embedding is
the L2-normalised mean of the partial embeddings). One difference: Resemblyzer shortens
silences with webrtcvad, which we do not have. ``voiced_windows`` takes an optional voiced
mask (e.g. from the Silero VAD) or, without one, flags 30 ms windows by energy against the
utterance's own noise floor; the flags then get Resemblyzer's smoothing (moving average of
8 windows) and dilation (7 windows), and the unvoiced rest is cut out.
"""

from __future__ import annotations

import functools
import hashlib
import io
import logging
import os
import pickle
import struct
import tempfile
import zipfile
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import numpy as np
import numpy.typing as npt

from models.errors import ModelError

log = logging.getLogger(__name__)

WHAT = "speaker embedding"

# Resemblyzer hparams
SAMPLE_RATE = 16_000
N_FFT = 400
"""25 ms window"""
HOP = 160
"""10 ms step"""
N_MELS = 40
PARTIAL_FRAMES = 160
"""1.6 s per partial utterance"""
PARTIALS_RATE = 1.3
"""partial utterances per second (a step of 77 frames)"""
MIN_COVERAGE = 0.75
NORM_TARGET_DBFS = -30.0
VAD_WINDOW = 480
"""30 ms windows for the voiced flags"""
VAD_AVERAGE_WIDTH = 8
VAD_MAX_SILENCE = 6
HIDDEN = 256
EMBED_DIM = 256
LAYERS = 3

# energy trim (our stand-in for webrtcvad)
ENERGY_FLOOR_DBFS = -55.0
"""a 30 ms window quieter than this is never voiced"""
ENERGY_ABOVE_FLOOR_DB = 6.0
"""voiced: this far above the utterance's noise floor (its 10th-percentile window) ..."""
ENERGY_BELOW_PEAK_DB = 20.0
"""... or at least within this of its loudest window"""

INT16_MAX = 2**15 - 1
OPSET = 17
IR_VERSION = 8
INPUT_NAME = "mels"
OUTPUT_NAME = "embeds"
MAX_PT_BYTES = 256 << 20
"""a weights file larger than this is refused"""
LEGACY_MAGIC = 0x1950A86A20F9469CFC6C
LEGACY_PROTOCOL = 1001

Floats = npt.NDArray[np.float32]
Weights = dict[str, npt.NDArray[Any]]
Progress = Callable[[float], None]


# --- reading the torch pickle without torch ----------------------------------------------

_STORAGE_DTYPES: dict[str, np.dtype[Any]] = {
    "FloatStorage": np.dtype("<f4"),
    "DoubleStorage": np.dtype("<f8"),
    "HalfStorage": np.dtype("<f2"),
    "LongStorage": np.dtype("<i8"),
    "IntStorage": np.dtype("<i4"),
    "ShortStorage": np.dtype("<i2"),
    "CharStorage": np.dtype("i1"),
    "ByteStorage": np.dtype("u1"),
    "BoolStorage": np.dtype("?"),
}


@dataclass(frozen=True)
class _StorageType:
    dtype: np.dtype[Any]


@dataclass
class _Storage:
    key: str
    dtype: np.dtype[Any]
    numel: int
    data: npt.NDArray[Any] | None = None


@dataclass(frozen=True)
class _TensorRef:
    storage: _Storage
    offset: int
    size: tuple[int, ...]
    stride: tuple[int, ...]


def _rebuild_tensor(storage: Any, offset: Any, size: Any, stride: Any, *_rest: Any) -> _TensorRef:
    if not isinstance(storage, _Storage):
        raise pickle.UnpicklingError("tensor without a storage")
    try:
        ref = _TensorRef(storage, int(offset), tuple(map(int, size)), tuple(map(int, stride)))
    except (TypeError, ValueError) as exc:
        raise pickle.UnpicklingError(f"bad tensor metadata: {exc}") from None
    if len(ref.size) != len(ref.stride) or len(ref.size) > 8:
        raise pickle.UnpicklingError("bad tensor shape")
    return ref


def _rebuild_parameter(data: Any, *_rest: Any) -> Any:
    return data


class _Unpickler(pickle.Unpickler):
    """Only what a state dict of tensors needs; storages become placeholders."""

    def __init__(self, file: IO[bytes], storages: dict[str, _Storage]) -> None:
        super().__init__(file)
        self._storages = storages

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) == ("collections", "OrderedDict"):
            return OrderedDict
        if module == "torch._utils" and name in ("_rebuild_tensor", "_rebuild_tensor_v2"):
            return _rebuild_tensor
        if (module, name) == ("torch._utils", "_rebuild_parameter"):
            return _rebuild_parameter
        if module == "torch" and name in _STORAGE_DTYPES:
            return _StorageType(_STORAGE_DTYPES[name])
        raise pickle.UnpicklingError(f"refusing global {module}.{name}")

    def persistent_load(self, pid: Any) -> Any:
        if not (isinstance(pid, tuple) and len(pid) >= 5 and pid[0] == "storage"):
            raise pickle.UnpicklingError("unknown persistent id")
        kind, key, numel = pid[1], str(pid[2]), pid[4]
        if not isinstance(kind, _StorageType) or not isinstance(numel, int) or numel < 0:
            raise pickle.UnpicklingError("bad storage reference")
        if len(pid) > 5 and pid[5] is not None:
            raise pickle.UnpicklingError("storage views are not supported")
        storage = self._storages.get(key)
        if storage is None:
            storage = self._storages[key] = _Storage(key, kind.dtype, numel)
        elif storage.dtype != kind.dtype or storage.numel != numel:
            raise pickle.UnpicklingError(f"storage {key} declared twice differently")
        return storage


def _unpickle(data: IO[bytes], storages: dict[str, _Storage]) -> Any:
    return _Unpickler(data, storages).load()


def _read_legacy(f: IO[bytes], size: int) -> tuple[Any, dict[str, _Storage]]:
    storages: dict[str, _Storage] = {}
    if _unpickle(f, storages) != LEGACY_MAGIC:
        raise pickle.UnpicklingError("not a torch file (magic number)")
    if _unpickle(f, storages) != LEGACY_PROTOCOL:
        raise pickle.UnpicklingError("unsupported torch protocol version")
    sys_info = _unpickle(f, storages)
    if not isinstance(sys_info, dict) or sys_info.get("little_endian") is not True:
        raise pickle.UnpicklingError("only little-endian torch files are supported")
    root = _unpickle(f, storages)
    keys = _unpickle(f, storages)
    if not isinstance(keys, list) or not all(isinstance(k, str) for k in keys):
        raise pickle.UnpicklingError("bad storage key list")
    for key in keys:
        storage = storages.get(key)
        if storage is None:
            raise pickle.UnpicklingError(f"storage {key} is not referenced")
        head = f.read(8)
        if len(head) != 8:
            raise pickle.UnpicklingError("truncated storage header")
        (numel,) = struct.unpack("<q", head)
        if numel != storage.numel:
            raise pickle.UnpicklingError(
                f"storage {key}: {numel} elements, expected {storage.numel}"
            )
        nbytes = numel * storage.dtype.itemsize
        if f.tell() + nbytes > size:
            raise pickle.UnpicklingError(f"storage {key} is truncated")
        raw = f.read(nbytes)
        storage.data = np.frombuffer(raw, dtype=storage.dtype)
    return root, storages


def _read_zip(path: Path) -> tuple[Any, dict[str, _Storage]]:
    storages: dict[str, _Storage] = {}
    with zipfile.ZipFile(path) as z:
        names = z.namelist()
        pkl = next((n for n in names if n.endswith("/data.pkl") or n == "data.pkl"), None)
        if pkl is None:
            raise pickle.UnpicklingError("no data.pkl in the zip")
        prefix = pkl[: -len("data.pkl")]
        root = _unpickle(io.BytesIO(z.read(pkl)), storages)
        for key, storage in storages.items():
            raw = z.read(f"{prefix}data/{key}")
            if len(raw) != storage.numel * storage.dtype.itemsize:
                raise pickle.UnpicklingError(f"storage {key} has the wrong size")
            storage.data = np.frombuffer(raw, dtype=storage.dtype)
    return root, storages


def _materialise(ref: _TensorRef) -> npt.NDArray[Any]:
    data = ref.storage.data
    if data is None:
        raise pickle.UnpicklingError(f"storage {ref.storage.key} has no data")
    if any(s < 0 for s in ref.size) or any(s < 0 for s in ref.stride) or ref.offset < 0:
        raise pickle.UnpicklingError("negative tensor metadata")
    last = ref.offset + sum((n - 1) * s for n, s in zip(ref.size, ref.stride, strict=True) if n)
    if any(n == 0 for n in ref.size):
        return np.zeros(ref.size, dtype=data.dtype)
    if last >= len(data):
        raise pickle.UnpicklingError("tensor reaches past its storage")
    item = data.dtype.itemsize
    view = np.lib.stride_tricks.as_strided(
        data[ref.offset :], shape=ref.size, strides=tuple(s * item for s in ref.stride)
    )
    return np.array(view, copy=True)


def load_state_dict(pt_path: Path) -> Weights:
    """The ``model_state`` tensors of a torch checkpoint as numpy arrays (no torch needed).

    Reads the legacy format (pickles followed by raw storages, torch < 1.6: Resemblyzer's
    ``pretrained.pt``) and the zip format. ModelError if the file is unreadable or holds
    anything but plain tensors in dicts.
    """
    try:
        size = pt_path.stat().st_size
        if size > MAX_PT_BYTES:
            raise pickle.UnpicklingError(f"file is {size} bytes; the limit is {MAX_PT_BYTES}")
        if zipfile.is_zipfile(pt_path):
            root, _ = _read_zip(pt_path)
        else:
            with pt_path.open("rb") as f:
                root, _ = _read_legacy(f, size)
        state = root.get("model_state", root) if isinstance(root, dict) else None
        if not isinstance(state, dict):
            raise pickle.UnpicklingError("no model_state dict")
        out: Weights = {}
        for name, value in state.items():
            if isinstance(value, _TensorRef):
                out[str(name)] = _materialise(value)
        return out
    except ModelError:
        raise
    except (OSError, EOFError, pickle.UnpicklingError, zipfile.BadZipFile, KeyError) as exc:
        raise ModelError("model.unreadable", what=WHAT, path=pt_path, reason=str(exc)) from None
    except (ValueError, TypeError, AttributeError, IndexError, struct.error) as exc:
        # a malformed pickle can raise nearly anything from inside the unpickler
        raise ModelError(
            "model.unreadable", what=WHAT, path=pt_path, reason=f"{type(exc).__name__}: {exc}"
        ) from None


# --- the ONNX graph -----------------------------------------------------------------------

_TORCH_TO_ONNX_GATES = (0, 3, 1, 2)
"""PyTorch (i, f, g, o) -> ONNX (i, o, f, c)"""


def _reorder_gates(a: npt.NDArray[Any]) -> npt.NDArray[Any]:
    blocks = np.split(a, 4, axis=0)
    return np.concatenate([blocks[i] for i in _TORCH_TO_ONNX_GATES], axis=0)


def onnx_lstm_weights(
    w_ih: npt.NDArray[Any], w_hh: npt.NDArray[Any], b_ih: npt.NDArray[Any], b_hh: npt.NDArray[Any]
) -> tuple[Floats, Floats, Floats]:
    """PyTorch LSTM layer weights -> ONNX ``W [1, 4H, in]``, ``R [1, 4H, H]``, ``B [1, 8H]``."""
    w = _reorder_gates(w_ih).astype(np.float32)[None]
    r = _reorder_gates(w_hh).astype(np.float32)[None]
    b = np.concatenate([_reorder_gates(b_ih), _reorder_gates(b_hh)]).astype(np.float32)[None]
    return w, r, b


def _expect(weights: Weights, name: str, shape: tuple[int, ...]) -> npt.NDArray[Any]:
    value = weights.get(name)
    if value is None:
        raise ModelError("model.unreadable", what=WHAT, path="weights", reason=f"no {name}")
    if value.shape != shape or not np.issubdtype(value.dtype, np.floating):
        raise ModelError(
            "model.unreadable",
            what=WHAT,
            path="weights",
            reason=f"{name} has shape {value.shape} {value.dtype}, expected {shape} float",
        )
    if not np.all(np.isfinite(value)):
        raise ModelError("model.unreadable", what=WHAT, path="weights", reason=f"{name}: NaN/inf")
    return value


def build_model(weights: Weights) -> Any:
    """The encoder as an ``onnx.ModelProto``: ``mels [B, T, 40]`` -> ``embeds [B, 256]``."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    nodes: list[Any] = []
    inits: list[Any] = []

    def const(name: str, value: npt.NDArray[Any]) -> str:
        inits.append(numpy_helper.from_array(np.ascontiguousarray(value), name))
        return name

    const("squeeze_axes_1", np.array([1], dtype=np.int64))
    const("squeeze_axes_0", np.array([0], dtype=np.int64))
    const("norm_eps", np.array(1e-12, dtype=np.float32))
    nodes.append(helper.make_node("Transpose", [INPUT_NAME], ["x0"], perm=[1, 0, 2]))
    x = "x0"  # [T, B, in]
    h_last = ""
    for layer in range(LAYERS):
        n_in = N_MELS if layer == 0 else HIDDEN
        w, r, b = onnx_lstm_weights(
            _expect(weights, f"lstm.weight_ih_l{layer}", (4 * HIDDEN, n_in)),
            _expect(weights, f"lstm.weight_hh_l{layer}", (4 * HIDDEN, HIDDEN)),
            _expect(weights, f"lstm.bias_ih_l{layer}", (4 * HIDDEN,)),
            _expect(weights, f"lstm.bias_hh_l{layer}", (4 * HIDDEN,)),
        )
        y, h_last = f"y{layer}", f"h{layer}"
        nodes.append(
            helper.make_node(
                "LSTM",
                [x, const(f"W{layer}", w), const(f"R{layer}", r), const(f"B{layer}", b)],
                [y, h_last],
                hidden_size=HIDDEN,
                direction="forward",
                name=f"lstm{layer}",
            )
        )
        if layer < LAYERS - 1:  # Y [T, 1, B, H] -> [T, B, H]
            x = f"x{layer + 1}"
            nodes.append(helper.make_node("Squeeze", [y, "squeeze_axes_1"], [x]))
    lin_w = _expect(weights, "linear.weight", (EMBED_DIM, HIDDEN)).astype(np.float32)
    lin_b = _expect(weights, "linear.bias", (EMBED_DIM,)).astype(np.float32)
    nodes += [
        helper.make_node("Squeeze", [h_last, "squeeze_axes_0"], ["hidden"]),  # [B, H]
        helper.make_node(
            "Gemm",
            ["hidden", const("linear_w", lin_w), const("linear_b", lin_b)],
            ["lin"],
            transB=1,
        ),
        helper.make_node("Relu", ["lin"], ["raw"]),
        helper.make_node("ReduceL2", ["raw"], ["norm"], axes=[1], keepdims=1),
        helper.make_node("Max", ["norm", "norm_eps"], ["norm_safe"]),
        helper.make_node("Div", ["raw", "norm_safe"], [OUTPUT_NAME]),
    ]
    graph = helper.make_graph(
        nodes,
        "ge2e_speaker_encoder",
        [helper.make_tensor_value_info(INPUT_NAME, TensorProto.FLOAT, ["batch", "frames", N_MELS])],
        [helper.make_tensor_value_info(OUTPUT_NAME, TensorProto.FLOAT, ["batch", EMBED_DIM])],
        inits,
    )
    model = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", OPSET)],
        producer_name="yimi-mesh models.ge2e",
        producer_version="1",
        doc_string="GE2E speaker encoder (Resemblyzer 0.1.4 pretrained.pt, Apache-2.0)",
    )
    model.ir_version = IR_VERSION
    onnx.checker.check_model(model)
    return model


def convert(pt_path: Path, out_path: Path, progress: Progress | None = None) -> str:
    """Convert Resemblyzer's ``pretrained.pt`` to ONNX at ``out_path``; its SHA-256 (hex).

    The file is written atomically (a temporary file in the same folder, fsynced, renamed),
    and the output is deterministic: the same weights always give the same bytes.
    ``progress`` gets fractions 0..1.
    """

    def report(fraction: float) -> None:
        if progress is not None:
            progress(fraction)

    report(0.0)
    weights = load_state_dict(pt_path)
    report(0.5)
    data = build_model(weights).SerializeToString(deterministic=True)
    report(0.8)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{out_path.name}.", suffix=".tmp", dir=out_path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, out_path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    digest = hashlib.sha256(data).hexdigest()
    log.info("converted %s to %s (%d bytes, sha256 %s)", pt_path, out_path, len(data), digest)
    report(1.0)
    return digest


def resemblyzer_weights_path() -> Path | None:
    """The installed ``resemblyzer/pretrained.pt`` (without importing the package), or None."""
    import importlib.util

    spec = importlib.util.find_spec("resemblyzer")
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    path = Path(locations[0]) / "pretrained.pt" if locations else None
    return path if path is not None and path.is_file() else None


# --- the mel frontend (numpy) -------------------------------------------------------------


def _hz_to_mel(f: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    """Slaney's mel scale (librosa ``htk=False``)."""
    f_sp, min_log_hz, min_log_mel, logstep = 200.0 / 3, 1000.0, 15.0, np.log(6.4) / 27.0
    mels = f / f_sp
    log_part = min_log_mel + np.log(np.maximum(f, min_log_hz) / min_log_hz) / logstep
    return np.where(f >= min_log_hz, log_part, mels)


def _mel_to_hz(m: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    f_sp, min_log_hz, min_log_mel, logstep = 200.0 / 3, 1000.0, 15.0, np.log(6.4) / 27.0
    freqs = f_sp * m
    log_part = min_log_hz * np.exp(logstep * (m - min_log_mel))
    return np.where(m >= min_log_mel, log_part, freqs)


@functools.cache
def mel_filters() -> npt.NDArray[np.float32]:
    """librosa ``filters.mel(sr=16000, n_fft=400, n_mels=40)`` (Slaney scale and area norm)."""
    fft_freqs = np.linspace(0, SAMPLE_RATE / 2, 1 + N_FFT // 2)
    lo, hi = _hz_to_mel(np.array([0.0, SAMPLE_RATE / 2]))
    mel_f = _mel_to_hz(np.linspace(float(lo), float(hi), N_MELS + 2))
    fdiff = np.diff(mel_f)
    ramps = np.subtract.outer(mel_f, fft_freqs)
    weights = np.zeros((N_MELS, len(fft_freqs)))
    for i in range(N_MELS):
        lower = -ramps[i] / fdiff[i]
        upper = ramps[i + 2] / fdiff[i + 1]
        weights[i] = np.maximum(0, np.minimum(lower, upper))
    weights *= (2.0 / (mel_f[2 : N_MELS + 2] - mel_f[:N_MELS]))[:, None]
    out = weights.astype(np.float32)
    out.flags.writeable = False
    return out


@functools.cache
def _window() -> npt.NDArray[np.float64]:
    n = np.arange(N_FFT)
    return 0.5 - 0.5 * np.cos(2 * np.pi * n / N_FFT)  # periodic Hann (scipy fftbins=True)


def mel_spectrogram(wav: npt.NDArray[np.floating[Any]]) -> Floats:
    """Mel power spectrogram ``[frames, 40]`` (not log), frames = 1 + len // 160.

    librosa ``feature.melspectrogram`` with ``center=True`` and reflect padding (the version
    Resemblyzer was trained with).
    """
    x = np.asarray(wav, dtype=np.float64)
    pad = N_FFT // 2
    x = np.pad(x, pad, mode="reflect") if len(x) > pad else np.pad(x, pad)
    n_frames = 1 + (len(x) - N_FFT) // HOP
    frames = np.lib.stride_tricks.as_strided(
        x, shape=(n_frames, N_FFT), strides=(x.strides[0] * HOP, x.strides[0])
    )
    power = np.abs(np.fft.rfft(frames * _window(), axis=1)) ** 2  # [frames, 201]
    return (power @ mel_filters().T.astype(np.float64)).astype(np.float32)


def normalize_volume(wav: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    """Raise (never lower) the level to -30 dBFS RMS, as Resemblyzer does."""
    rms = float(np.sqrt(np.mean((wav * INT16_MAX) ** 2))) if len(wav) else 0.0
    if rms <= 0:
        return wav
    change = NORM_TARGET_DBFS - 20 * np.log10(rms / INT16_MAX)
    return wav if change < 0 else wav * (10 ** (change / 20))


def _moving_average(flags: npt.NDArray[Any], width: int) -> npt.NDArray[np.float64]:
    padded = np.concatenate((np.zeros((width - 1) // 2), flags, np.zeros(width // 2)))
    ret = np.cumsum(padded, dtype=float)
    ret[width:] = ret[width:] - ret[:-width]
    return ret[width - 1 :] / width


def _dilate(flags: npt.NDArray[np.bool_], width: int) -> npt.NDArray[np.bool_]:
    """scipy ``binary_dilation(flags, np.ones(width))`` (centred structure, odd width)."""
    if not flags.any():
        return flags
    return np.convolve(flags.astype(np.int32), np.ones(width, dtype=np.int32), "same") > 0


def energy_flags(samples: npt.NDArray[np.int16]) -> npt.NDArray[np.bool_]:
    """Voiced flags per 30 ms window by energy (the stand-in for webrtcvad).

    A window is voiced when its RMS is above -55 dBFS and above a threshold set by the
    utterance itself: 6 dB over its noise floor (its 10th-percentile window: a VAD segment
    carries pre-roll and hang-over, so that is background) but never more than 20 dB below
    its loudest window (a segment that is all speech keeps its quieter sounds).
    """
    n = len(samples) // VAD_WINDOW
    if n == 0:
        return np.zeros(0, dtype=bool)
    x = samples[: n * VAD_WINDOW].astype(np.float64).reshape(n, VAD_WINDOW)
    db = 10 * np.log10(np.mean(x * x, axis=1) / (32768.0**2) + 1e-12)
    floor = float(np.percentile(db, 10)) + ENERGY_ABOVE_FLOOR_DB
    threshold = max(ENERGY_FLOOR_DBFS, min(floor, float(db.max()) - ENERGY_BELOW_PEAK_DB))
    return db > threshold


def mask_flags(mask: npt.NDArray[Any], n_samples: int) -> npt.NDArray[np.bool_]:
    """A caller's voiced mask -> flags per 30 ms window (voiced if half of it is voiced).

    ``mask`` has one entry per sample or per frame of equal length (the last frame may be
    short): entry ``k`` covers samples ``k*step .. (k+1)*step`` with
    ``step = ceil(n_samples / len(mask))``. Non-zero means voiced.
    """
    per_sample = expand_mask(mask, n_samples)
    n = n_samples // VAD_WINDOW
    per_window = per_sample[: n * VAD_WINDOW].reshape(n, VAD_WINDOW)
    return np.asarray(per_window.mean(axis=1) >= 0.5)


def expand_mask(mask: npt.NDArray[Any], n_samples: int) -> npt.NDArray[np.bool_]:
    """``mask`` (per sample or per equal frame) as one flag per sample."""
    flags = np.asarray(mask).reshape(-1) != 0
    if len(flags) == 0 or len(flags) > n_samples:
        raise ModelError(
            "speaker.mask",
            reason=f"{len(flags)} mask entries for {n_samples} samples (want 1..{n_samples})",
        )
    step = -(-n_samples // len(flags))
    if (len(flags) - 1) * step >= n_samples:
        raise ModelError(
            "speaker.mask", reason=f"{len(flags)} mask entries do not tile {n_samples} samples"
        )
    return np.repeat(flags, step)[:n_samples]


def trim_mask(flags: npt.NDArray[np.bool_]) -> npt.NDArray[np.bool_]:
    """Resemblyzer's smoothing and dilation of per-window voiced flags (what is kept)."""
    if len(flags) == 0:
        return flags
    smooth = np.round(_moving_average(flags.astype(np.float64), VAD_AVERAGE_WIDTH)).astype(bool)
    return _dilate(smooth, VAD_MAX_SILENCE + 1)


def partial_slices(
    n_samples: int, rate: float = PARTIALS_RATE, min_coverage: float = MIN_COVERAGE
) -> list[slice]:
    """Mel-frame slices of the partial utterances (Resemblyzer ``compute_partial_slices``)."""
    n_frames = int(np.ceil((n_samples + 1) / HOP))
    frame_step = int(np.round((SAMPLE_RATE / rate) / HOP))
    if not 0 < frame_step <= PARTIAL_FRAMES:
        raise ValueError(f"partials rate {rate} out of range")
    steps = max(1, n_frames - PARTIAL_FRAMES + frame_step + 1)
    slices = [slice(i, i + PARTIAL_FRAMES) for i in range(0, steps, frame_step)]
    last = slices[-1]
    coverage = (n_samples - last.start * HOP) / ((last.stop - last.start) * HOP)
    if coverage < min_coverage and len(slices) > 1:
        slices.pop()
    return slices


def partial_mels(wav: npt.NDArray[np.float64]) -> Floats:
    """The batch of partial-utterance mel spectrograms ``[n, 160, 40]`` for ``wav``."""
    slices = partial_slices(len(wav))
    needed = slices[-1].stop * HOP
    if needed >= len(wav):
        wav = np.pad(wav, (0, needed - len(wav)))
    mel = mel_spectrogram(wav)
    return np.stack([mel[s] for s in slices]).astype(np.float32)

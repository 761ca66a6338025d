"""Resize (and the older Upsample): nearest, linear and cubic interpolation, one axis at a time.

For each resized axis the source positions and weights of every output position are computed in Python from the
sizes alone; the data is then gathered at those positions and weighted (1 tap for nearest, 2 for linear, 4 for
cubic). Interpolating axis by axis is exact because ONNX's linear and cubic modes are separable.
"""

from __future__ import annotations

import math

from glassgrad.dtype import dtypes
from glassgrad.onnx.registry import OpContext, onnx_op
from glassgrad.tensor import Tensor


def _source_position(mode: str, j: int, n_in: int, n_out: int, scale: float, roi: tuple[float, float]) -> float:
    """Where output position j falls in the input, for a coordinate_transformation_mode. As the reference, modes
    that divide by the output length use n_in * scale, which need not be a whole number."""
    length = n_in * scale
    if mode == "half_pixel":
        return (j + 0.5) / scale - 0.5
    if mode == "half_pixel_symmetric":
        adjustment = n_out / (scale * n_in)
        return n_in / 2 * (1 - adjustment) + (j + 0.5) / scale - 0.5
    if mode == "pytorch_half_pixel":
        return (j + 0.5) / scale - 0.5 if length != 1 else -0.5
    if mode == "align_corners":
        return j * (n_in - 1) / (length - 1) if length != 1 else 0.0
    if mode == "asymmetric":
        return j / scale
    if mode == "tf_crop_and_resize":
        start, end = roi
        step = j * (end - start) * (n_in - 1) / (length - 1) if length != 1 else (end - start) * (n_in - 1) / 2
        return start * (n_in - 1) + step
    raise ValueError(f"coordinate_transformation_mode {mode!r} is not supported")


NEAREST = {
    "round_prefer_floor": lambda x: math.ceil(x - 0.5),
    "round_prefer_ceil": lambda x: math.floor(x + 0.5),
    "floor": math.floor,
    "ceil": math.ceil,
}


def _cubic(a: float, d: float) -> float:
    """Keys' cubic convolution kernel at distance d."""
    d = abs(d)
    if d <= 1:
        return ((a + 2) * d - (a + 3)) * d * d + 1
    if d < 2:
        return ((a * d - 5 * a) * d + 8 * a) * d - 4 * a
    return 0.0


def _taps(mode: str, x: float, n_in: int, scale: float, opts: dict) -> list[tuple[int, float]]:
    """(input index, weight) pairs whose weighted sum is the value at source position x; edges are replicated.

    As the reference: `base` is the input position left of x (x itself counts as right of base when whole), the
    kernel (linear: a triangle of half-width 1, cubic: Keys' of half-width 2) is sampled at each neighbour, and with
    antialias it is stretched by 1 / scale when downsampling and the weights normalized."""
    if mode == "nearest":
        return [(min(max(NEAREST[opts["nearest"]](x), 0), n_in - 1), 1.0)]
    base = math.ceil(x) - 1
    ratio = x - base
    stretch = min(scale, 1.0) if opts["antialias"] else 1.0
    support = 1 if mode == "linear" else 2
    start = math.floor(-support / stretch) + 1
    kernel = (lambda d: max(0.0, 1 - abs(d))) if mode == "linear" else (lambda d: _cubic(opts["cubic_a"], d))
    taps = [(base + i, kernel((i - ratio) * stretch)) for i in range(start, 2 - start)]
    if opts["exclude_outside"]:
        taps = [(i, w) if 0 <= i < n_in else (i, 0.0) for i, w in taps]
    if opts["exclude_outside"] or opts["antialias"]:
        total = sum(w for _, w in taps)
        taps = [(i, w / total) for i, w in taps]
    return [(min(max(i, 0), n_in - 1), w) for i, w in taps]


def _resize_axis(x: Tensor, axis: int, n_out: int, scale: float, roi: tuple[float, float], opts: dict) -> Tensor:
    n_in = x.shape[axis]
    positions = [_source_position(opts["transform"], j, n_in, n_out, scale, roi) for j in range(n_out)]
    taps = [_taps(opts["mode"], p, n_in, scale, opts) for p in positions]
    width = len(taps[0]) if taps else 0
    shape = [1] * x.ndim
    shape[axis] = n_out
    out = None
    for k in range(width):
        index = Tensor([t[k][0] for t in taps], dtype=dtypes.int64, device=x.device)
        picked = x[(slice(None),) * axis + (index,)]
        if opts["mode"] != "nearest":
            picked = picked * Tensor([t[k][1] for t in taps], dtype=x.dtype, device=x.device).reshape(shape)
        out = picked if out is None else out + picked
    if opts["transform"] == "tf_crop_and_resize":  # positions outside the input read extrapolation_value
        outside = Tensor([not 0 <= p <= n_in - 1 for p in positions], device=x.device).reshape(shape)
        out = outside.where(opts["extrapolation_value"], out)
    return out.cast(x.dtype)


@onnx_op("Resize")
def resize(ctx: OpContext, x: Tensor, roi: Tensor | None = None, scales: Tensor | None = None,
           sizes: Tensor | None = None, *, antialias: int = 0, axes=None,
           coordinate_transformation_mode: str = "half_pixel", cubic_coeff_a: float = -0.75, exclude_outside: int = 0,
           extrapolation_value: float = 0.0, keep_aspect_ratio_policy: str = "stretch", mode: str = "nearest",
           nearest_mode: str = "round_prefer_floor") -> Tensor:  # fmt: skip
    if ctx.opset < 11:  # Resize-10: (X, scales), asymmetric coordinates
        roi, scales, coordinate_transformation_mode = None, roi, "asymmetric"
    if mode not in ("nearest", "linear", "cubic"):
        raise ctx.error(f"mode {mode!r} is not one of nearest, linear, cubic")
    chosen = [a + x.ndim if a < 0 else a for a in (axes if axes is not None else range(x.ndim))]
    scale_list = ctx.values(scales) if scales is not None and scales.numel() else None
    size_list = ctx.ints(sizes) if sizes is not None and sizes.numel() else None
    in_sizes = [x.shape[a] for a in chosen]
    if size_list is not None:
        if keep_aspect_ratio_policy != "stretch":
            pick = min if keep_aspect_ratio_policy == "not_larger" else max
            common = pick(s / n for s, n in zip(size_list, in_sizes))
            scale_list = [common] * len(chosen)
            size_list = [int(math.floor(common * n + 0.5)) for n in in_sizes]
        else:
            scale_list = [s / n for s, n in zip(size_list, in_sizes)]
    elif scale_list is not None:
        size_list = [int(math.floor(n * s)) for n, s in zip(in_sizes, scale_list)]
    else:
        raise ctx.error("needs either scales or sizes")
    roi_list = ctx.values(roi) if roi is not None and roi.numel() else None
    opts = dict(transform=coordinate_transformation_mode, mode=mode, nearest=nearest_mode, cubic_a=cubic_coeff_a,
                exclude_outside=bool(exclude_outside), extrapolation_value=extrapolation_value,
                antialias=bool(antialias))  # fmt: skip
    if nearest_mode not in NEAREST:
        raise ctx.error(f"nearest_mode {nearest_mode!r} is not supported", unsupported=True)
    for i, a in enumerate(chosen):
        if size_list[i] == x.shape[a] and scale_list[i] == 1 and coordinate_transformation_mode != "tf_crop_and_resize":
            continue
        region = (roi_list[i], roi_list[i + len(chosen)]) if roi_list else (0.0, 1.0)
        x = _resize_axis(x, a, size_list[i], scale_list[i], region, opts)
    return x


@onnx_op("Upsample")
def upsample(ctx: OpContext, x: Tensor, scales: Tensor | None = None, *, mode: str = "nearest",
             **old) -> Tensor:  # fmt: skip
    """Resize's predecessor: asymmetric coordinates, nearest rounds down."""
    factors = ctx.values(scales) if scales is not None else list(old.pop("scales"))
    opts = dict(transform="asymmetric", mode="linear" if mode in ("linear", "bilinear") else mode, nearest="floor",
                cubic_a=-0.75, exclude_outside=False, extrapolation_value=0.0, antialias=False)  # fmt: skip
    for a, s in enumerate(factors):
        if s != 1:
            x = _resize_axis(x, a, int(math.floor(x.shape[a] * s)), s, (0.0, 1.0), opts)
    return x

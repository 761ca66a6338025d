"""Sampling at computed positions: AffineGrid builds a grid of positions, GridSample reads the input there."""

from __future__ import annotations

import itertools

from glassgrad.dtype import dtypes
from glassgrad.helpers import prod
from glassgrad.onnx.registry import OpContext, onnx_op
from glassgrad.tensor import Tensor


def _base_coordinates(n: int, align_corners: int) -> list[float]:
    """Normalized positions in [-1, 1] of n pixels: their centers, or with align_corners the corner pixels' centers
    at -1 and 1 (as the reference's arange, which gives [-1] for one pixel)."""
    if align_corners:
        return [-1.0 + 2.0 * i / (n - 1) for i in range(n)] if n > 1 else [-1.0]
    return [-1.0 + (2 * i + 1) / n for i in range(n)]


@onnx_op("AffineGrid")
def affine_grid(ctx: OpContext, theta: Tensor, size: Tensor, *, align_corners: int = 0) -> Tensor:
    """theta (N, 2, 3) or (N, 3, 4) applied to every (x, y[, z], 1): a grid (N, H, W, 2) or (N, D, H, W, 3)."""
    n, _, *spatial = ctx.ints(size)
    axes = [_base_coordinates(s, align_corners) for s in spatial]
    points = [(*reversed(p), 1.0) for p in itertools.product(*axes)]  # x varies fastest: (x, y[, z], 1)
    homogeneous = Tensor(points, dtype=theta.dtype, device=theta.device)  # (positions, nd + 1)
    grid = homogeneous.matmul(theta.transpose(1, 2))  # (N, positions, nd)
    return grid.reshape(n, *spatial, len(spatial)).cast(theta.dtype)


def _reflect(x: Tensor, low: float, high: float) -> Tensor:
    """Reflect x at the borders (repeatedly) until it lies in [low, high]."""
    span = high - low
    below, above = low - x, x - high
    out = x
    for dist, near, far in ((below, low, high), (above, high, low)):
        n = (dist / span).trunc() if span > 0 else dist * 0
        rest = dist - n * span
        even = (n % 2) == 0
        direction = 1 if near == low else -1
        reflected = even.where(near + direction * rest, far - direction * rest)
        out = (dist > 0).where(reflected, out)
    return out


@onnx_op("GridSample")
def grid_sample(ctx: OpContext, x: Tensor, grid: Tensor, *, align_corners: int = 0, mode: str = "linear",
                padding_mode: str = "zeros") -> Tensor:  # fmt: skip
    """Each output position reads the input at the grid's normalized position (x first), interpolated by `mode`
    (nearest, linear, cubic); positions outside read zeros, the border, or a reflection, as padding_mode says."""
    mode = {"bilinear": "linear", "bicubic": "cubic"}.get(mode, mode)
    if mode not in ("nearest", "linear", "cubic") or padding_mode not in ("zeros", "border", "reflection"):
        raise ctx.error(f"mode {mode!r} with padding_mode {padding_mode!r} is not supported", unsupported=True)
    n, c, *dims = x.shape
    nd, out_spatial = len(dims), grid.shape[1:-1]
    work = grid.float() if grid.dtype != dtypes.float64 else grid
    coords = []  # per input dim (slowest first): positions in pixels, (N, *out_spatial)
    for d, size in enumerate(dims):
        g = work[..., nd - 1 - d]
        pos = (g + 1) / 2 * (size - 1) if align_corners else ((g + 1) * size - 1) / 2
        if mode == "nearest":
            pos = pos.round()
        low, high = (0.0, size - 1.0) if align_corners else (-0.5, size - 0.5)
        if padding_mode == "border":
            pos = ((pos < low) | (pos > high)).where(pos.clip(0, size - 1), pos)
        elif padding_mode == "reflection":
            pos = _reflect(pos, low, high)
        coords.append((pos, low, high))
    flat = x.reshape(n, c, prod(dims))
    out = None
    for taps in itertools.product(*[_taps_1d(pos, mode) for pos, _, _ in coords]):
        index, weight, inside = None, None, None
        for (i, w), size, (_, low, high) in zip(taps, dims, coords):
            if padding_mode == "border":
                i = i.clip(0, size - 1)
            elif padding_mode == "reflection":
                i = _reflect(i.float(), low, high).trunc()
            ok = (i >= 0) & (i <= size - 1)
            inside = ok if inside is None else inside & ok
            i = ok.where(i, 0).cast(dtypes.int32)
            index = i if index is None else index * size + i
            weight = w if weight is None else weight * w
        picked = flat.gather(2, index.reshape(n, 1, -1).expand(n, c, index[0].numel()))
        picked = inside.reshape(n, 1, -1).where(picked, 0)
        if weight is not None:
            picked = picked * weight.reshape(n, 1, -1).cast(x.dtype)
        out = picked if out is None else out + picked
    return out.reshape(n, c, *out_spatial).cast(x.dtype)


def _taps_1d(pos: Tensor, mode: str) -> list[tuple[Tensor, Tensor | None]]:
    """(integer position, weight) of each neighbour that `mode` reads around pos."""
    if mode == "nearest":
        return [(pos, None)]
    base = pos.floor()
    t = pos - base
    if mode == "linear":
        return [(base, 1 - t), (base + 1, t)]
    a = -0.75  # cubic: Keys' kernel at the distances of the 4 neighbours, as polynomials in t
    weights = [_cubic_poly(a, t + 1), _cubic_poly(a, t), _cubic_poly(a, 1 - t), _cubic_poly(a, 2 - t)]
    return [(base + k, w) for k, w in zip((-1, 0, 1, 2), weights)]


def _cubic_poly(a: float, d: Tensor) -> Tensor:
    """Keys' kernel (ops_resize._cubic) for a tensor of distances known to lie in [0, 2]."""
    near = ((a + 2) * d - (a + 3)) * d * d + 1
    far = ((a * d - 5 * a) * d + 8 * a) * d - 4 * a
    return (d <= 1).where(near, far)


@onnx_op("DeformConv")
def deform_conv(ctx: OpContext, x: Tensor, w: Tensor, offset: Tensor, b: Tensor | None = None,
                mask: Tensor | None = None, *, dilations=None, group: int = 1, kernel_shape=None,
                offset_group: int = 1, pads=None, strides=None) -> Tensor:  # fmt: skip
    """A 2-D convolution whose every tap reads the input at its own learned offset (bilinear, zeros outside), as
    the reference: GridSample at the shifted tap positions, times the mask, then a grouped matrix product."""
    n, c, ih, iw = x.shape
    oc, _, kh, kw = w.shape
    (sh, sw), (dh, dw) = tuple(strides or (1, 1)), tuple(dilations or (1, 1))
    top, left, bottom, right = tuple(pads or (0, 0, 0, 0))
    oh, ow = (ih + top + bottom - (kh - 1) * dh - 1) // sh + 1, (iw + left + right - (kw - 1) * dw - 1) // sw + 1
    taps, positions = kh * kw, oh * ow
    offset = offset.reshape(n, offset_group, taps, 2, positions)
    mask = mask.reshape(n, offset_group, taps, positions) if mask is not None else None
    # where each tap sits before its offset: (taps, positions) for rows and for columns
    ky, kx = [[dh * (t // kw) for t in range(taps)], [dw * (t % kw) for t in range(taps)]]
    row = (Tensor.arange(oh, device=x.device) * sh - top).reshape(oh, 1).expand(oh, ow).reshape(1, positions)
    col = (Tensor.arange(ow, device=x.device) * sw - left).reshape(1, ow).expand(oh, ow).reshape(1, positions)
    base_y, base_x = (
        Tensor(ky, device=x.device).reshape(taps, 1) + row,
        Tensor(kx, device=x.device).reshape(taps, 1) + col,
    )
    per_group = c // offset_group
    columns = []
    for g in range(offset_group):
        y = base_y + offset[:, g, :, 0]  # (n, taps, positions), in pixels
        xx = base_x + offset[:, g, :, 1]
        grid = (xx / (iw - 1) * 2 - 1).stack(y / (ih - 1) * 2 - 1, dim=-1)  # GridSample wants (x, y)
        sampled = grid_sample(ctx, x[:, g * per_group : (g + 1) * per_group], grid.cast(x.dtype), align_corners=1)
        columns.append(sampled * mask[:, g].unsqueeze(1) if mask is not None else sampled)
    cols = columns[0].cat(*columns[1:], dim=1) if len(columns) > 1 else columns[0]  # (n, c, taps, positions)
    cols = cols.reshape(n, group, (c // group) * taps, positions)
    out = w.reshape(group, oc // group, (c // group) * taps).unsqueeze(0).matmul(cols)  # (n, group, oc/g, positions)
    out = out.reshape(n, oc, oh, ow)
    return (out + b.reshape(1, oc, 1, 1) if b is not None else out).cast(x.dtype)

"""conv_general_dilated on NumPy arrays (its impl, eager and inside compiled programs): im2col
fused with GEMM, split into tasks; grouped convolutions take one whole-matrix product instead.

The padded input is viewed as every one of its windows at once. The output is cut into blocks
of a few hundred rows; each block's windows are copied into a small buffer (it stays in cache)
laid out to suit the input's memory order, and multiplied with the kernel by one BLAS call
writing straight into the result. Blocks run on kiln's threads with BLAS pinned to each calling
thread. Which blocks exist depends on the shapes only, never on the thread count, so every
thread count computes the same bits.

Two families of blocks cover the convolutions a network needs:
* per row (an ordinary convolution: many output positions, a small kernel): the rows of the
  product are (example, position), the columns (tap, feature) for a channels-last input or
  (feature, tap) with positions minor for a channels-first one;
* per contraction block (a kernel gradient: the "kernel" is the whole cotangent image and the
  output is kernel-sized, so the product is short and very deep): the contraction over
  (feature, tap) is cut into blocks of features; each block's windows form one matrix (rows
  (position, batch), batch minor as a channels-last forward input stores it) whose product
  with its slice of the kernel is a partial result, and the partials are summed in block order.
"""

from __future__ import annotations

import itertools
import math
import threading
from typing import Sequence

import numpy as np

from kiln.core import dtypes
from kiln.primitives import blas
from kiln.primitives.blas import num_threads

__all__ = ["convolve", "gemm_conv", "reference_conv", "dilate_and_pad", "num_threads"]

# Patch elements a block copies at most: about 1 MiB of float32, so the copy stays in cache.
_BLOCK_ELEMENTS = 1 << 18
# Below this many multiply-adds a convolution runs on the calling thread only.
_PARALLEL_MIN_WORK = 1 << 22
# A kernel gradient sums at most this many partial products.
_MAX_PARTIALS = 64


def _pool(threads: int):
    return blas.worker_pool("conv", threads)


# --- shapes, padding, dtypes ---------------------------------------------------------------


def _dilate_dim(size: int, dilation: int) -> int:
    return 0 if size == 0 else 1 + dilation * (size - 1)


def _dilate_shape(shape: Sequence[int], dilation: Sequence[int]) -> tuple:
    if not all(d > 0 for d in dilation):
        raise TypeError(f"All dilations must be positive, got {tuple(dilation)}.")
    dilation = (1,) * (len(shape) - len(dilation)) + tuple(dilation)
    return tuple(_dilate_dim(s, d) for s, d in zip(shape, dilation))


def _stride_dim(size: int, window: int, stride: int) -> int:
    return max(0, (size - window) // stride + 1)


def dilate_and_pad(x: np.ndarray, dilation, padding, fill) -> np.ndarray:
    """x with `dilation - 1` fill values between neighbours and (low, high) fill values at the
    ends of every dimension (negative padding crops)."""
    if any(d != 1 for d in dilation):
        shape = _dilate_shape(x.shape, dilation)
        dilated = np.full(shape, fill, x.dtype)
        dilated[tuple(slice(None, None, d) for d in dilation)] = x
        x = dilated
    if any(lo or hi for lo, hi in padding):
        grow = [(max(lo, 0), max(hi, 0)) for lo, hi in padding]
        if any(lo or hi for lo, hi in grow):
            x = np.pad(x, grow, constant_values=np.asarray(fill, x.dtype))
        x = x[tuple(slice(-min(lo, 0), n + min(hi, 0)) for n, (lo, hi) in zip(x.shape, padding))]
    return x


def compute_dtype(in_dtype: np.dtype, out_dtype: np.dtype) -> np.dtype:
    """Half-precision floats accumulate in float32, as XLA does on CPU."""
    if dtypes.bfloat16 in (in_dtype, out_dtype) or np.float16 in (in_dtype, out_dtype):
        return np.dtype(np.float32)
    return np.promote_types(in_dtype, out_dtype)


# --- the engine ------------------------------------------------------------------------------

_local = threading.local()
# Scratch buffers up to this many bytes are kept per thread between calls: a fresh large
# allocation is a fresh mapping whose every page faults on first write.
_SCRATCH_KEEP = 1 << 23


def _scratch(shape, dtype) -> np.ndarray:
    """An uninitialized array of `shape`, from this thread's reusable scratch memory."""
    nbytes = math.prod(shape) * dtype.itemsize
    if nbytes > _SCRATCH_KEEP:
        return np.empty(shape, dtype)
    memory = getattr(_local, "memory", None)
    if memory is None or memory.size < nbytes:
        memory = _local.memory = np.empty(max(nbytes, 1 << 16), np.uint8)
    return memory[:nbytes].view(dtype).reshape(shape)


def _reshaped_view(a: np.ndarray, shape) -> np.ndarray:
    """a reshaped without a copy (a block of a result must be written in place)."""
    view = a.view()
    view.shape = shape
    return view


def _blocks(grid, unit: int, first_level: int = 0):
    """Cut an index grid into blocks of about _BLOCK_ELEMENTS // unit cells: each block is a
    list of slices, single indices on the leading axes, a range on one axis, whole axes after
    it, so that its cells are contiguous in a C-ordered array of the grid's shape."""
    target = max(1, _BLOCK_ELEMENTS // max(1, unit))
    level = first_level
    while level < len(grid) - 1 and math.prod(grid[level + 1 :]) > target:
        level += 1
    step = max(1, target // max(1, math.prod(grid[level + 1 :])))
    for prefix in np.ndindex(*grid[:level]):
        for lo in range(0, grid[level], step):
            head = [slice(p, p + 1) for p in prefix]
            yield (
                head
                + [slice(lo, min(lo + step, grid[level]))]
                + [slice(None)] * (len(grid) - level - 1)
            )


def _run(tasks, work: int) -> None:
    """Run the tasks: on the calling thread when the work is small, else on kiln's threads,
    each taking the next task as it gets free (on a busy machine a thread may be descheduled
    for a while; the others then do its share)."""
    threads = min(num_threads(), len(tasks))
    with blas.blas_on_calling_thread():
        if threads < 2 or work < _PARALLEL_MIN_WORK:
            for task in tasks:
                task()
            return
        queue = iter(tasks)  # a list iterator hands each task out once, across threads
        futures = [_pool(threads).submit(_drain, queue) for _ in range(threads - 1)]
        _drain(queue)
        for future in futures:
            future.result()


def _drain(queue) -> None:
    with blas.blas_on_calling_thread():
        for task in queue:
            task()


def gemm_conv(x, lhs_spec, w, rhs_spec, window_strides, rhs_dilation) -> np.ndarray:
    """An ungrouped convolution of an already dilated and padded input.

    Args:
      x: the input in its own layout (`lhs_spec` names its batch, feature and spatial axes),
        C-contiguous; w: the kernel in its layout (`rhs_spec`: out, in, spatial...). Both of
        the compute dtype.
    Returns:
      the result in the canonical (batch, feature, spatial...) order, possibly a strided view.
    """
    xc = np.transpose(x, lhs_spec)
    wc = np.transpose(w, rhs_spec)
    n, c, *in_spatial = xc.shape
    o, _, *kernel = wc.shape
    nsp = len(kernel)
    extent = [1 + d * (k - 1) for k, d in zip(kernel, rhs_dilation)]
    out_spatial = [
        max(0, (s - e) // st + 1) for s, e, st in zip(in_spatial, extent, window_strides)
    ]
    positions, taps = math.prod(out_spatial), math.prod(kernel)
    depth = c * taps
    if n * o * positions * depth == 0:
        return np.zeros((n, o, *out_spatial), x.dtype)
    strides = xc.strides
    windows = np.lib.stride_tricks.as_strided(
        xc,
        (n, c, *out_spatial, *kernel),
        (
            strides[0],
            strides[1],
            *(strides[2 + d] * window_strides[d] for d in range(nsp)),
            *(strides[2 + d] * rhs_dilation[d] for d in range(nsp)),
        ),
        writeable=False,
    )
    innermost = list(lhs_spec).index(x.ndim - 1)  # 0 batch, 1 feature, else spatial
    out_axes = list(range(2, 2 + nsp))
    kernel_axes = list(range(2 + nsp, 2 + 2 * nsp))
    dtype = x.dtype
    work = n * o * positions * depth
    tasks = []
    if taps <= positions:
        grid = (n, *out_spatial)
        if innermost == 1:
            # Rows (example, position), columns (tap, feature): result (n, positions..., o).
            weights = np.ascontiguousarray(wc.transpose(*range(2, 2 + nsp), 1, 0))
            weights = weights.reshape(depth, o)
            out = np.empty((n, *out_spatial, o), dtype)
            order = (0, *out_axes, *kernel_axes, 1)

            def task(block):
                shape = [len(range(n)[block[0]])] + _sizes(block[1:], out_spatial)
                buf = _scratch(shape + kernel + [c], dtype)
                np.copyto(buf, windows[(block[0], slice(None), *block[1:])].transpose(order))
                rows = buf.size // depth
                np.matmul(
                    _reshaped_view(buf, (rows, depth)),
                    weights,
                    out=_reshaped_view(out[tuple(block)], (rows, o)),
                )

            tasks = [lambda b=b: task(b) for b in _blocks(grid, depth)]
            result = out.transpose(0, nsp + 1, *range(1, nsp + 1))
        else:
            # Per example, the kernel (o, (feature, tap)) times the windows ((feature, tap),
            # positions): positions minor, as a channels-first input stores them.
            weights = np.ascontiguousarray(wc).reshape(o, depth)
            out = np.empty((n, o, *out_spatial), dtype)
            order = (1, *kernel_axes, *out_axes)

            def task(block):
                sel = (block[0], slice(None), *block[1:])
                buf = _scratch([c] + kernel + _sizes(block[1:], out_spatial), dtype)
                np.copyto(buf, windows[sel][0].transpose([a - 1 for a in order]))
                cols = buf.size // depth
                np.matmul(
                    weights,
                    _reshaped_view(buf, (depth, cols)),
                    out=_reshaped_view(out[sel], (o, cols)),
                )

            tasks = [lambda b=b: task(b) for b in _blocks(grid, depth, first_level=1)]
            result = out
    else:
        # Split the contraction over blocks of the input's features (a kernel gradient's
        # "features" are the forward batch); the partial products are summed in block order.
        per_feature = taps * positions * n
        limit = 4 * _BLOCK_ELEMENTS
        weights = np.ascontiguousarray(wc.transpose(1, *range(2, 2 + nsp), 0))
        weights = weights.reshape(depth, o)
        if per_feature <= limit:
            step = max(limit // per_feature, -(-c // _MAX_PARTIALS))
            blocks = [(lo, min(lo + step, c), 0, kernel[0]) for lo in range(0, c, step)]
        else:  # one feature is already large (a big image): also cut its first kernel axis
            rows = max(1, limit // (per_feature // kernel[0]))
            blocks = [
                (f, f + 1, lo, min(lo + rows, kernel[0]))
                for f in range(c)
                for lo in range(0, kernel[0], rows)
            ]
        partials = [None] * len(blocks)
        tap_rows = taps // kernel[0]  # taps per index of the first kernel axis
        if innermost == 0:
            # The batch is innermost: the windows as ((feature, tap), (position, batch)).
            order = (1, *kernel_axes, *out_axes, 0)
        else:
            order = (0, *out_axes, 1, *kernel_axes)

        def task(k, block):
            lo, hi, first, last = block
            index = [slice(None), slice(lo, hi)] + [slice(None)] * (2 * nsp)
            index[2 + nsp] = slice(first, last)
            view = windows[tuple(index)].transpose(order)
            buf = _scratch(view.shape, dtype)
            np.copyto(buf, view)
            rows = (hi - lo) * (last - first) * tap_rows
            if innermost == 0:
                patches = _reshaped_view(buf, (rows, positions * n)).T
            else:
                patches = _reshaped_view(buf, (n * positions, rows))
            start = lo * taps + first * tap_rows
            partials[k] = np.matmul(patches, weights[start : start + rows])

        tasks = [lambda k=k, b=b: task(k, b) for k, b in enumerate(blocks)]
        _run(tasks, work)
        total = partials[0]
        for part in partials[1:]:
            total += part
        if innermost == 0:
            out = total.reshape(*out_spatial, n, o)
            return out.transpose(nsp, nsp + 1, *range(nsp))
        return total.reshape(n, *out_spatial, o).transpose(0, nsp + 1, *range(1, nsp + 1))
    _run(tasks, work)
    return result


def _sizes(block, sizes) -> list:
    """The extent of each slice of a block along axes of the given sizes."""
    return [len(range(s)[b]) for b, s in zip(block, sizes)]


# --- the impl: the engine where it applies, the whole-matrix product elsewhere -------------------


def convolve(
    lhs,
    rhs,
    *,
    window_strides,
    padding,
    lhs_dilation,
    rhs_dilation,
    dimension_numbers,
    feature_group_count,
    batch_group_count,
    preferred_element_type=None,
) -> np.ndarray:
    """conv_general_dilated on NumPy arrays: ungrouped convolutions through the engine,
    grouped ones (and empty operands) through reference_conv."""
    lhs_spec, rhs_spec, out_spec = dimension_numbers
    out_dtype = np.dtype(preferred_element_type or lhs.dtype)
    compute = compute_dtype(lhs.dtype, out_dtype)
    params = dict(
        window_strides=window_strides,
        padding=padding,
        lhs_dilation=lhs_dilation,
        rhs_dilation=rhs_dilation,
        dimension_numbers=dimension_numbers,
        feature_group_count=feature_group_count,
        batch_group_count=batch_group_count,
        preferred_element_type=preferred_element_type,
    )
    if _splits_into_phases(lhs, rhs, params):
        return _convolve_by_phases(lhs, rhs, params)
    if feature_group_count == batch_group_count == 1 and lhs.ndim > 2 and lhs.size and rhs.size:
        x = dilate_and_pad_in_layout(
            lhs.astype(compute, copy=False), lhs_spec, lhs_dilation, padding
        )
        if x.size:
            w = rhs.astype(compute, copy=False)
            with np.errstate(all="ignore"):
                result = gemm_conv(x, lhs_spec, w, rhs_spec, window_strides, rhs_dilation)
            result = np.ascontiguousarray(np.transpose(result, np.argsort(out_spec)))
            return result.astype(out_dtype, copy=False)
    return reference_conv(lhs, rhs, **params)


# A dilated input (the lhs gradient of a strided convolution) is mostly zeros. With unit window
# strides and kernel dilation, the outputs of one phase (index mod the dilation, per axis) meet
# the input's real elements only through the kernel taps of one phase: each phase is an
# ordinary convolution of the undilated input with a slice of the kernel.


def _splits_into_phases(lhs, rhs, params) -> bool:
    dilated = [d > 1 for d in params["lhs_dilation"]]
    return (
        any(dilated)
        and all(s == 1 for s in params["window_strides"])
        and all(r == 1 for r, x in zip(params["rhs_dilation"], dilated) if x)
        and lhs.size > 0
        and rhs.size > 0
    )


def _convolve_by_phases(lhs, rhs, params) -> np.ndarray:
    lhs_spec, rhs_spec, out_spec = params["dimension_numbers"]
    nsp = lhs.ndim - 2
    sizes = [lhs.shape[a] for a in lhs_spec[2:]]
    kernel = [rhs.shape[a] for a in rhs_spec[2:]]
    out_sizes = []
    for n, k, d, r, (lo, hi) in zip(
        sizes, kernel, params["lhs_dilation"], params["rhs_dilation"], params["padding"]
    ):
        out_sizes.append(max(0, _dilate_dim(n, d) + lo + hi - _dilate_dim(k, r) + 1))
    full = None
    for phase in itertools.product(
        *(range(min(d, m)) for d, m in zip(params["lhs_dilation"], out_sizes))
    ):
        kernel_index, out_index = [slice(None)] * rhs.ndim, [slice(None)] * rhs.ndim
        padding = list(params["padding"])
        for a in range(nsp):
            d = params["lhs_dilation"][a]
            if d == 1:
                continue
            lo = params["padding"][a][0]
            first_tap = (lo - phase[a]) % d
            offset = (phase[a] + first_tap - lo) // d
            taps = len(range(first_tap, kernel[a], d))
            count = len(range(phase[a], out_sizes[a], d))
            padding[a] = (-offset, count + taps - 1 - sizes[a] + offset)
            kernel_index[rhs_spec[2 + a]] = slice(first_tap, None, d)
            out_index[out_spec[2 + a]] = slice(phase[a], None, d)
        sub_kernel = rhs[tuple(kernel_index)]
        sub_params = dict(params, padding=tuple(padding), lhs_dilation=(1,) * nsp)
        if sub_kernel.size == 0:
            continue  # no tap of this phase meets the input: those outputs stay zero
        part = convolve(lhs, sub_kernel, **sub_params)
        if full is None:
            shape = list(part.shape)
            for a in range(nsp):
                shape[out_spec[2 + a]] = out_sizes[a]
            full = np.zeros(shape, part.dtype)
        full[tuple(out_index)] = part
    if full is None:  # every phase was empty: let the general path build the zeros
        return reference_conv(lhs, rhs, **params)
    return full


def dilate_and_pad_in_layout(lhs: np.ndarray, lhs_spec, lhs_dilation, padding) -> np.ndarray:
    """The input dilated and padded in its own axis order, C-contiguous: one zeroed buffer
    and one strided copy of the elements that survive the (possibly negative) padding."""
    dilation, pads = [1] * lhs.ndim, [(0, 0)] * lhs.ndim
    for k, axis in enumerate(lhs_spec[2:]):
        dilation[axis], pads[axis] = lhs_dilation[k], padding[k]
    if all(d == 1 for d in dilation) and not any(lo or hi for lo, hi in pads):
        return np.ascontiguousarray(lhs)
    shape, target, source = [], [], []
    for size, d, (lo, hi) in zip(lhs.shape, dilation, pads):
        total = _dilate_dim(size, d) + lo + hi
        first = -(-max(0, -lo) // d)  # the first input element inside the result
        end = min(size, -(-(total - lo) // d))
        shape.append(total)
        if end <= first:
            return np.zeros(_padded_shape(lhs.shape, dilation, pads), lhs.dtype)
        start = lo + first * d
        target.append(slice(start, start + (end - first - 1) * d + 1, d))
        source.append(slice(first, end))
    out = np.zeros(shape, lhs.dtype)
    out[tuple(target)] = lhs[tuple(source)]
    return out


def _padded_shape(shape, dilation, pads) -> tuple:
    return tuple(_dilate_dim(s, d) + lo + hi for s, d, (lo, hi) in zip(shape, dilation, pads))


def reference_conv(
    lhs,
    rhs,
    *,
    window_strides,
    padding,
    lhs_dilation,
    rhs_dilation,
    dimension_numbers,
    feature_group_count,
    batch_group_count,
    preferred_element_type=None,
):
    """Every convolution as one batched product over groups of a whole im2col matrix: the
    general path (grouped convolutions) and the reference the fast engine is tested against."""
    lhs_spec, rhs_spec, out_spec = dimension_numbers
    out_dtype = np.dtype(preferred_element_type or lhs.dtype)
    compute = compute_dtype(lhs.dtype, out_dtype)
    x = np.transpose(lhs, lhs_spec).astype(compute, copy=False)
    w = np.transpose(rhs, rhs_spec).astype(compute, copy=False)
    x = dilate_and_pad(x, (1, 1) + tuple(lhs_dilation), ((0, 0), (0, 0)) + tuple(padding), 0)
    n, c, *in_spatial = x.shape
    o, i, *kernel = w.shape
    nsp = len(kernel)
    extent = [_dilate_dim(k, d) for k, d in zip(kernel, rhs_dilation)]
    out_spatial = [_stride_dim(p, e, s) for p, e, s in zip(in_spatial, extent, window_strides)]
    gf, gb = feature_group_count, batch_group_count
    groups, nb = gf * gb, n // gb
    og = o // groups
    positions, taps = (
        int(np.prod(out_spatial, dtype=np.int64)),
        int(np.prod(kernel, dtype=np.int64)),
    )
    if nb * o * positions == 0:
        result = np.zeros([nb, o] + out_spatial, compute)
    else:
        # Every window as a view (batch, feature, out positions..., kernel taps...).
        strides = x.strides
        windows = np.lib.stride_tricks.as_strided(
            x,
            (n, c, *out_spatial, *kernel),
            (
                strides[0],
                strides[1],
                *(strides[2 + d] * window_strides[d] for d in range(nsp)),
                *(strides[2 + d] * rhs_dilation[d] for d in range(nsp)),
            ),
            writeable=False,
        )
        windows = windows.reshape(gb, nb, gf, c // gf, *out_spatial, *kernel)
        # Rows of patches are (group, example, position); columns (tap, channel), so that the
        # copy reads channels in memory order for channels-last inputs.
        order = (0, 2, 1, *range(4, 4 + 2 * nsp), 3)
        patches = windows.transpose(order).reshape(groups, nb * positions, taps * i)
        weights = w.reshape(groups, og, i, taps).transpose(0, 3, 2, 1).reshape(groups, taps * i, og)
        with np.errstate(all="ignore"):
            product = blas.matmul(patches, weights)  # (groups, nb * positions, og)
        product = product.reshape(gb, gf, nb, *out_spatial, og)
        order = (2, 0, 1, 3 + nsp, *range(3, 3 + nsp))
        result = product.transpose(order).reshape(nb, o, *out_spatial)
    return np.ascontiguousarray(np.transpose(result, np.argsort(out_spec))).astype(
        out_dtype, copy=False
    )

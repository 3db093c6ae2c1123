"""Workloads of the auto-scheduler benchmark: conv2d (+bias+relu, NCHW and NHWC) and dense."""

from __future__ import annotations

from templtune import auto_scheduler, te, topi

CONV = (1, 7, 7, 512, 512, 3, 3, (1, 1), (1, 1))
DENSE = (1024, 1024, 1024)
#: the auto-scheduler's conv2d workload per ``--conv-layout`` (registered below)
CONV_WORKLOADS = {"nchw": "bench_conv2d_bias_relu", "nhwc": "bench_conv2d_nhwc_bias_relu"}


def _window(H, W, CI, KH, KW, stride, padding):
    """The reduction axes (input channel, kernel row, kernel column) and the output size of a
    convolution, whatever its layout."""
    (sh, sw), (ph, pw) = stride, padding
    axes = tuple(te.reduce_axis((0, n), name=name) for n, name in ((CI, "rc"), (KH, "ry"),
                                                                   (KW, "rx")))
    return axes, (H + 2 * ph - KH) // sh + 1, (W + 2 * pw - KW) // sw + 1


@auto_scheduler.register_workload("bench_conv2d_bias_relu", override=True)
def conv2d_bias_relu(N, H, W, CO, CI, KH, KW, stride, padding):
    data = te.placeholder((N, CI, H, W), name="data")
    kernel = te.placeholder((CO, CI, KH, KW), name="kernel")
    bias = te.placeholder((1, CO, 1, 1), name="bias")
    # NOTE: topi.nn.conv2d_nchw's compute, with the kernel marked layout-free (a constant of
    # the layer; the x86 template packs it inside the kernel, the auto-scheduler re-lays it)
    (sh, sw), (ph, pw) = stride, padding
    pad = topi.nn.pad(data, (0, 0, ph, pw), (0, 0, ph, pw), name="pad_temp")
    (rc, ry, rx), oh, ow = _window(H, W, CI, KH, KW, stride, padding)
    conv = te.compute((N, CO, oh, ow), lambda nn, ff, yy, xx: te.sum(
        pad[nn, rc, yy * sh + ry, xx * sw + rx] * kernel[ff, rc, ry, rx], axis=[rc, ry, rx]),
        name="conv2d_nchw", tag="conv2d_nchw", attrs={"layout_free_placeholders": [kernel]})
    return [data, kernel, bias, topi.nn.relu(conv + bias)]


@auto_scheduler.register_workload("bench_conv2d_nhwc_bias_relu", override=True)
def conv2d_nhwc_bias_relu(N, H, W, CO, CI, KH, KW, stride, padding):
    """The same layer in NHWC (kernel HWIO, layout-free): the layout TVM converts convolutions
    to when the auto-scheduler compiles a network for a CPU (its output channels are
    contiguous, so the register block can vectorize them)."""
    data = te.placeholder((N, H, W, CI), name="data")
    kernel = te.placeholder((KH, KW, CI, CO), name="kernel")
    bias = te.placeholder((1, 1, 1, CO), name="bias")
    (sh, sw), (ph, pw) = stride, padding
    pad = topi.nn.pad(data, (0, ph, pw, 0), (0, ph, pw, 0), name="pad_temp")
    (rc, ry, rx), oh, ow = _window(H, W, CI, KH, KW, stride, padding)
    conv = te.compute((N, oh, ow, CO), lambda nn, yy, xx, ff: te.sum(
        pad[nn, yy * sh + ry, xx * sw + rx, rc] * kernel[ry, rx, rc, ff], axis=[rc, ry, rx]),
        name="conv2d_nhwc", tag="conv2d_nhwc", attrs={"layout_free_placeholders": [kernel]})
    return [data, kernel, bias, topi.nn.relu(conv + bias)]


@auto_scheduler.register_workload("bench_dense", override=True)
def dense(M, N, K):
    data = te.placeholder((M, K), name="data")
    weight = te.placeholder((N, K), name="weight")
    k = te.reduce_axis((0, K), name="k")
    # NOTE: the weight is a constant of the layer: marked layout-free (as TVM's topi.nn.dense
    # does), so the auto-scheduler re-lays it to follow its tiles, inside the kernel, as the
    # template packs it inside the kernel.
    out = te.compute((M, N), lambda i, j: te.sum(data[i, k] * weight[j, k], axis=k), name="out",
                     attrs={"layout_free_placeholders": [weight]})
    return [data, weight, out]

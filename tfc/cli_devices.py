"""The ``tfc`` commands about devices: ``calibrate``, ``devices``, ``bench`` and ``viz``,
and the partition dump of ``tfc ir --device``.

    tfc calibrate [--devices cpu:0,gpu:0] [-o devices.json]   # GPUs measured with cupy
    tfc calibrate --cluster local                             # also a Ray cluster's costs
    tfc devices                                               # CPUs, GPUs, CUDA here?
    tfc bench model.tfc --entry train_step [--steps N] [--feed x=x.npy] [--trace trace.json]
    tfc viz model.tfc [--entry NAME] -o graph.html
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

from tfc.errors import TfcError

if TYPE_CHECKING:
    from tfc.devices import DeviceProfile


def partitions_text(module: Any, device: str, elide_above: int | None = None) -> str:
    """Every entry's partition for ``device`` as textual IR (one graph each: the
    ``partition`` pass's stages on that device glued back together with their sends and
    receives), headed by ``//`` comments naming the devices, so the text stays parseable
    graph by graph."""
    from tfc.devices import parse_devices
    from tfc.ir.printer import print_graph
    from tfc.passes.partition import Partition, device_graphs, single_device
    from tfc.pipeline import lower_for_devices

    (device,) = parse_devices([device])
    devices = module.devices or ["/cpu:0"]
    if device not in devices:
        raise TfcError(f"the module is compiled for {', '.join(devices)}; it has no "
                       f"partition on {device} (compile with --devices)")
    out = [f"// partitions on {device} of a module placed on {', '.join(devices)}"
           + (" (fp16 transfers)" if module.fp16_transfers else "")]
    lowered = lower_for_devices(module, "reference")  # the tables only: no backend's passes
    for name, graph in lowered.entries.items():
        if name in lowered.partitions:
            part = device_graphs(lowered, name).get(device)
        else:  # its ops all run on one device: the whole graph runs there
            part = (Partition(device, graph) if device == single_device(graph, devices[0])
                    else None)
        if part is None:
            out.append(f"// @{name}: nothing runs on {device}")
            continue
        out.append(f"// @{name} on {device}: {len(part.graph.ops)} ops, "
                   f"{len(part.sends)} sends, {len(part.recvs)} recvs")
        out.append(print_graph(part.graph, elide_above=elide_above))
    return "\n".join(out) + "\n"


# ---- tfc calibrate -----------------------------------------------------------------

def cmd_calibrate(args: argparse.Namespace) -> int:
    from tfc.cli import check_output_path
    from tfc.devices import gpu_count, local_devices, parse_device, parse_devices, save_profile
    from tfc.runtime.calibrate import calibrate
    from tfc.runtime.calibrate_gpu import measure_gpu

    check_output_path(args.output, "-o")
    if args.cluster is not None:  # (checked before the host's long measurement)
        from tfc.distributed.runtime import check_cluster_argument
        if check_cluster_argument(args.cluster) == "inprocess":
            raise TfcError("--cluster inprocess runs tasks as threads: there is no cluster "
                           "to measure (local, auto or HOST:PORT)")
    devices = parse_devices(args.devices) if args.devices is not None else local_devices(1)
    cpus = [d for d in devices if parse_device(d).kind == "cpu"]
    gpus = [d for d in devices if parse_device(d).kind == "gpu"]
    for d in devices:
        if parse_device(d).job is not None:
            raise TfcError(f"tfc calibrate measures local devices; {d} is not one")
    calibration = calibrate(cpus or ["/cpu:0"], backend=args.backend,
                            progress=lambda m: print(m, file=sys.stderr))
    profile = calibration.profile
    # a GPU is measured when there is one; else the profile keeps the default GPU rates
    visible = gpu_count() if gpus else 0
    for gpu in gpus:
        if parse_device(gpu).index >= visible:
            print(f"{gpu}: no CUDA device here ({visible} visible to cupy): the profile keeps "
                  f"the default GPU rates (an H100-class card on PCIe)", file=sys.stderr)
            continue
        print(f"measuring {gpu} with cupy", file=sys.stderr)
        measure_gpu(gpu).apply(profile)
    cluster = None
    if args.cluster is not None:  # the Ray cluster's own costs (predict_tasks uses them)
        from tfc.distributed.calibrate import calibrate_cluster
        cluster = calibrate_cluster(args.cluster, progress=lambda m: print(m, file=sys.stderr))
        cluster.apply(profile)
    path = save_profile(profile, args.output)
    print(profile_summary(profile, gpus))
    if cluster is not None:
        print(cluster.summary())
    print("runs min/median/max:")
    print(calibration.spread_summary())
    print(f"wrote {path}")
    return 0


def profile_summary(profile: DeviceProfile, gpus: Sequence[str] = ()) -> str:
    """What a profile says, in a few lines: the host, the fixed costs, and per thread
    count the GEMM, stream, vector, serial, short-row, f64 GEMM and linalg rates at
    each measured size; for each of
    ``gpus`` its rates (measured or default) and its host link."""
    from tfc.devices import parse_device
    lines = [f"{profile.describe()}: a step {profile.step_s * 1e6:.1f} us, a feed "
             f"{profile.feed_s * 1e6:.2f} us, a fetch {profile.fetch_s * 1e6:.2f} us, a "
             f"variable {profile.variable_s * 1e6:.2f} us, an update "
             f"{profile.update_s * 1e6:.2f} us, a kernel "
             f"{profile.cpu.kernel_s * 1e6:.2f} us; multi-device: a step "
             f"{profile.executor_step_s * 1e6:.1f} us, a stage {profile.stage_s * 1e6:.1f} "
             f"us, a hand-off {profile.handoff_s * 1e6:.1f} us, a send and recv "
             f"{profile.transfer_s * 1e6:.1f} us"]
    for label, curves, unit in (("GEMM", profile.cpu.gemm, "GFLOP/s at flops"),
                                ("stream", profile.cpu.stream, "GB/s at bytes"),
                                ("vector", profile.cpu.vector or {}, "GFLOP/s at flops"),
                                ("serial", profile.cpu.serial or {}, "GFLOP/s at flops"),
                                ("short-row", profile.cpu.short_row or {}, "GFLOP/s at flops"),
                                ("f64 GEMM", profile.cpu.gemm_f64 or {}, "GFLOP/s at flops"),
                                ("linalg", profile.cpu.linalg or {}, "GFLOP/s at flops")):
        for threads, c in sorted(curves.items()):
            rates = ", ".join(f"{x / t / 1e9:.3g}@{x:.3g}" for x, t in zip(c.sizes, c.seconds))
            lines.append(f"  {label} {threads} thread{'s' if threads > 1 else ''} ({unit}): "
                         f"{rates}")
    for gpu in gpus:
        local = f"/gpu:{parse_device(gpu).index}"
        rates_of = profile.rates(local)
        how = "measured" if local in profile.devices else "default, H100-class"
        lines.append(f"{gpu} ({how}): a kernel {rates_of.kernel_s * 1e6:.1f} us")
        for label, curves, unit in (("GEMM", rates_of.gemm, "GFLOP/s at flops"),
                                    ("stream", rates_of.stream, "GB/s at bytes")):
            c = curves[max(curves)]
            rates = ", ".join(f"{x / t / 1e9:.3g}@{x:.3g}" for x, t in zip(c.sizes, c.seconds))
            lines.append(f"  {label} ({unit}): {rates}")
        up, down = profile.host_link(local, True), profile.host_link(local, False)
        lines.append(f"  host->device {up.bytes_per_s / 1e9:.1f} GB/s + "
                     f"{up.latency_s * 1e6:.1f} us, device->host "
                     f"{down.bytes_per_s / 1e9:.1f} GB/s + {down.latency_s * 1e6:.1f} us")
    return "\n".join(lines)


# ---- tfc devices -------------------------------------------------------------------

def devices_report() -> list[str]:
    """What this machine offers tfc, a line each: its CPU cores, each GPU cupy sees, and
    whether the CUDA backend can compile (NVRTC or nvcc; no GPU needed) and run (cupy, a
    driver, a GPU) here."""
    import importlib
    from tfc.devices import cpu_count, gpu_count
    from tfc.pipeline import cuda_compile_unavailable
    cores = cpu_count()
    lines = [f"/cpu:N: {cores} core{'s' if cores != 1 else ''}, shared by the logical CPUs "
             f"(backends llvm, reference)"]
    for i in range(gpu_count()):
        lines.append(f"/gpu:{i}: {_gpu_name(i)} (cuda)")
    reason = cuda_compile_unavailable()
    lines.append("CUDA compile: " + ("yes (kernels compile to PTX; no GPU needed)"
                                     if reason is None else f"no: {reason}"))
    try:
        device = importlib.import_module("tfc.backends.cuda.device")
        device.cuda_device()
        lines.append("CUDA run: yes")
    except ImportError as e:
        lines.append(f"CUDA run: no: this tfc has no CUDA backend ({e})")
    except TfcError as e:
        lines.append(f"CUDA run: no: {e}")
    return lines


def _gpu_name(index: int) -> str:
    """GPU ``index``'s name and compute capability, as cupy reports them."""
    try:
        import cupy
        props = cupy.cuda.runtime.getDeviceProperties(index)
        name = props["name"]
        name = name.decode() if isinstance(name, bytes) else str(name)
        return f"{name}, compute capability {props['major']}.{props['minor']}"
    except Exception as e:  # a driver that lists the GPU but cannot describe it
        return f"a GPU cupy cannot describe ({type(e).__name__}: {e})"


def cmd_devices(args: argparse.Namespace) -> int:
    print("\n".join(devices_report()))
    return 0


# ---- tfc bench ---------------------------------------------------------------------

def cmd_bench(args: argparse.Namespace) -> int:
    from tfc.cli import _table, check_at_least, check_output_path, load_artifact_arg, parse_feeds
    from tfc.runtime.feeds import check_feed_names, synthetic_feeds
    from tfc.runtime.profiler import bench_entry
    from tfc.runtime.trace import Tracer

    check_at_least("--steps", args.steps, 1)
    check_at_least("--batch", args.batch, 1)
    check_output_path(args.trace, "--trace")
    program = load_artifact_arg(args.artifact, args.backend)
    entry = args.entry if args.entry is not None else next(iter(program.entries), None)
    if entry is None:
        raise TfcError(f"{args.artifact} has no entries")
    sig = program.entries.get(entry) or program.entry(entry)
    feeds = parse_feeds(args.feed)
    # before synthetic feeds are made and announced
    check_feed_names(program.entry(entry), feeds, f"entry '{entry}'")
    synthetic = synthetic_feeds(sig, args.batch, given=feeds)
    feeds.update(synthetic)
    if synthetic:
        print(f"synthetic feeds (batch {args.batch}): {', '.join(synthetic)}", file=sys.stderr)
    tracer = Tracer()
    report = bench_entry(program, entry, feeds, args.steps, tracer=tracer,
                         kernels=bool(args.trace))  # kernel timing only for a trace
    print(report.summary())
    n = report.steps
    rows = [[d, f"{st.busy_s / n * 1e3:.3f} ms", f"{st.wait_s / n * 1e3:.3f} ms",
             f"{st.handoffs // n}", f"{st.handoff_bytes // n}", f"{st.peak_bytes / 2**20:.2f} MiB"]
            for d, st in report.devices.items()]
    _table("Per device (per step)", ["device", "compute", "waiting in recv", "hand-offs",
                                     "bytes handed over", "peak memory"], rows)
    if any(st.handoffs for st in report.devices.values()):
        print("(transfers between devices of this process hand the tensor over by reference: "
              "no byte is copied)")
    if args.trace:
        path = tracer.save(args.trace)
        print(f"wrote {path} (open it in https://ui.perfetto.dev or chrome://tracing)")
    return 0


# ---- tfc viz -----------------------------------------------------------------------

def cmd_viz(args: argparse.Namespace) -> int:
    from tfc.cli import check_output_path
    from tfc.compiler.driver import load_source
    from tfc.atomic import atomic_write
    from tfc.viz import render_html

    check_output_path(args.output, "-o")
    module = load_source(args.model)
    if Path(args.model).suffix != ".tfc":
        from tfc.pipeline import DEFAULT_PIPELINE, run_pipeline
        module = run_pipeline(module, DEFAULT_PIPELINE, verify=False)
    page = render_html(module, args.entry).encode("utf-8")
    atomic_write(args.output, lambda f: f.write(page))
    print(f"wrote {args.output}")
    return 0


def add_commands(sub: Any) -> None:
    p = sub.add_parser("calibrate", help="measure devices and links for the cost model")
    p.add_argument("--devices", metavar="D1,D2",
                   help="local devices the profile is for: the host is measured once (its "
                        "logical CPUs share its cores and rates); each GPU with cupy when "
                        "there is one, else it keeps default rates (default: cpu:0 and "
                        "every GPU cupy sees)")
    p.add_argument("-o", "--output", metavar="FILE",
                   help="profile to write (default: $TFC_DEVICE_PROFILE or "
                        "~/.cache/tfc/devices.json, which placement reads)")
    p.add_argument("--backend", default=None, help="backend to measure (default: llvm)")
    p.add_argument("--cluster", metavar="ADDRESS", default=None,
                   help="also measure a Ray cluster's costs for the cluster report's "
                        "predicted step (local, auto or HOST:PORT, as tfc run takes it): "
                        "a value between tasks, a step's launch and round trip")
    p.set_defaults(func=cmd_calibrate)

    p = sub.add_parser("devices", help="this machine's devices, and whether CUDA compiles "
                                       "and runs here")
    p.set_defaults(func=cmd_devices)

    p = sub.add_parser("bench", help="time an entry's steps; per-device report and trace")
    p.add_argument("artifact", metavar="ARTIFACT", help="a .tfc file")
    p.add_argument("--entry", metavar="NAME", help="entry to time (default: the first)")
    p.add_argument("--feed", metavar="NAME=FILE", action="append", default=[],
                   help="a feed, as for tfc run; feeds not given are synthetic "
                        "(normal floats, zero integers)")
    p.add_argument("--batch", type=int, default=64, help="batch of synthetic feeds (64)")
    p.add_argument("--steps", type=int, default=20, metavar="N", help="timed steps (20)")
    p.add_argument("--trace", metavar="FILE.json", help="write a Chrome-trace timeline")
    p.add_argument("--backend", default=None, help="backend to run on")
    p.set_defaults(func=cmd_bench)

    p = sub.add_parser("viz", help="draw the placed, partitioned graph as an HTML page")
    p.add_argument("model", metavar="MODEL", help="a .tfc artifact (or .py/.tfir model)")
    p.add_argument("--entry", metavar="NAME", help="one entry (default: all)")
    p.add_argument("-o", "--output", metavar="FILE.html", required=True)
    p.set_defaults(func=cmd_viz)

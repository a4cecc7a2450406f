"""Device names, local devices and the device profile file."""

import pytest

from tfc.devices import (Curve, DeviceProfile, DeviceRates, LinkRates, load_profile, matches,
                         normalize_device, parse_device, parse_devices, save_profile,
                         threads_per_device)
from tfc.errors import TfcError


@pytest.mark.parametrize("spec, want", [
    ("cpu:0", "/cpu:0"), ("/CPU:1", "/cpu:1"), ("/device:GPU:2", "/gpu:2"),
    ("/job:ps/task:0/cpu:0", "/job:ps/task:0/cpu:0"),
    ("/job:Worker/task:3/device:CPU:1", "/job:worker/task:3/cpu:1"),
])
def test_names_normalize_and_round_trip(spec, want):
    assert str(parse_device(spec)) == want
    assert str(parse_device(want)) == want


@pytest.mark.parametrize("bad", ["tpu:0", "/cpu", "/cpu:x", "/job:ps/cpu:0", "cpu:-1"])
def test_bad_names_are_errors_that_show_the_forms(bad):
    with pytest.raises(TfcError, match="expected /cpu:N"):
        parse_device(bad)


def test_device_lists():
    assert parse_devices("cpu:0, cpu:1") == ["/cpu:0", "/cpu:1"]
    with pytest.raises(TfcError, match="listed twice"):
        parse_devices("cpu:0,/cpu:0")
    with pytest.raises(TfcError, match="no devices"):
        parse_devices(" , ")
    assert normalize_device(None) is None


def test_partial_scopes_match_full_names():
    assert matches("/cpu:1", "/cpu:1")
    assert matches("/cpu:1", "/job:worker/task:0/cpu:1")
    assert not matches("/cpu:1", "/cpu:0")
    assert not matches("/job:ps/task:0/cpu:0", "/job:ps/task:1/cpu:0")


def test_cores_are_shared_between_logical_cpus():
    shares = threads_per_device(["/cpu:0", "/cpu:1"])
    assert set(shares) == {"/cpu:0", "/cpu:1"} and min(shares.values()) >= 1


def test_each_working_cpu_gets_its_share_of_the_cores():
    assert threads_per_device(["/cpu:0", "/cpu:1"], cores=8) == {"/cpu:0": 4, "/cpu:1": 4}
    assert threads_per_device(["/cpu:1"], cores=8) == {"/cpu:1": 8}  # alone: every core
    assert threads_per_device(["/cpu:0", "/cpu:1", "/cpu:2"], cores=2) == {
        "/cpu:0": 1, "/cpu:1": 1, "/cpu:2": 1}  # never fewer than one thread
    assert threads_per_device(["/cpu:0", "/gpu:0"], cores=4) == {"/cpu:0": 4}


def test_profile_round_trips_and_defaults(tmp_path, monkeypatch):
    monkeypatch.setenv("TFC_DEVICE_PROFILE", str(tmp_path / "none.json"))
    assert load_profile().source == "defaults"  # no file: round numbers
    p = DeviceProfile({"/cpu:0": DeviceRates.flat(1e11, 2e10, 3e-6)},
                      {"/cpu:0->/cpu:1": LinkRates(4e9, 1e-5)}, source="test")
    path = save_profile(p, tmp_path / "prof.json")
    back = load_profile(path)
    assert back == p
    assert back.rates("/cpu:7") == load_profile().rates("/cpu:0")  # unknown: defaults
    assert back.link("/cpu:1", "/cpu:0") == back.default_link


def test_a_version_1_profile_says_to_calibrate_again(tmp_path):
    """Version 1 held one GEMM rate and one bandwidth per device and the cost of a whole
    step as each kernel's: it is refused by name, not read as something it is not."""
    old = tmp_path / "devices.json"
    old.write_text('{"format": "tfc-device-profile", "version": 1, "source": "x", '
                   '"devices": {"/cpu:0": {"flops_per_s": 5e10, "bytes_per_s": 1e10, '
                   '"kernel_overhead_s": 2e-05}}, "links": {}, '
                   '"default_link": {"bytes_per_s": 5e9, "latency_s": 5e-6}}')
    with pytest.raises(TfcError, match=r"devices.json: a version-1 device profile.*"
                                       r"re-run `tfc calibrate -o .*devices.json`"):
        load_profile(old)


def test_profile_curves_interpolate_log_log_and_keep_the_end_rates():
    c = Curve([1e3, 1e5], [1e-6, 1e-3])
    assert c.at(1e4) == pytest.approx(10 ** -4.5)  # halfway in log-log
    assert c.at(1e6) == pytest.approx(1e-2)  # the last point's rate
    assert c.at(1e2) == pytest.approx(1e-7)  # the first point's rate
    assert c.at(0) == 0.0
    with pytest.raises(ValueError):
        Curve([2.0, 1.0], [1.0, 1.0])


def test_device_rates_read_curves_by_thread_count():
    r = DeviceRates.flat(4e10, 2e10, kernel_s=1e-9, cores=4)
    assert r.gemm_seconds(4e10, 4) == pytest.approx(1.0)
    assert r.gemm_seconds(4e10, 1) == pytest.approx(4.0)
    assert r.gemm_seconds(4e10, 2) == pytest.approx(2.0)  # log-log between 1 and 4
    assert r.gemm_seconds(4e10, 8) == pytest.approx(1.0)  # no more than all cores
    assert r.stream_seconds(2e10, 1) == pytest.approx(4.0)
    assert r.gemm_seconds(1.0, 4) == 1e-9  # never below a kernel's fixed cost


def test_corrupt_or_missing_profiles_are_clear_errors(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"format": "something-else"}')
    with pytest.raises(TfcError, match="bad.json: not a valid device profile"):
        load_profile(bad)
    with pytest.raises(TfcError, match="tfc calibrate"):
        load_profile(tmp_path / "missing.json")


def _profile_with(tmp_path, edit) -> "Path":
    """A valid saved profile with ``edit(data)`` applied to its JSON."""
    import json
    path = save_profile(DeviceProfile(source="test"), tmp_path / "edited.json")
    data = json.loads(path.read_text())
    edit(data)
    path.write_text(json.dumps(data))
    return path


@pytest.mark.parametrize("edit, field", [
    (lambda d: d.update(step_s=float("nan")), "step_s"),
    (lambda d: d.update(handoff_s=-1e-5), "handoff_s"),
    (lambda d: d.update(executor_step_s=float("inf")), "executor_step_s"),
    (lambda d: d.update(cores=0), "cores"),
    (lambda d: d["cpu"]["gemm"].update({"0": d["cpu"]["gemm"]["1"]}), "thread counts"),
    (lambda d: d["cpu"]["stream"].update({"-2": d["cpu"]["stream"]["1"]}), "thread counts"),
    (lambda d: d["cpu"]["gemm"]["1"]["seconds"].__setitem__(0, float("nan")), "cpu.gemm.1"),
    (lambda d: d["cpu"]["stream"]["1"]["sizes"].__setitem__(0, -5.0), "cpu.stream.1"),
    (lambda d: d["cpu"].update(kernel_s=-1.0), "kernel_s"),
    (lambda d: d.update(feed_s=-1e-7), "feed_s"),
    (lambda d: d.update(fetch_s=float("nan")), "fetch_s"),
    (lambda d: d.update(variable_s=-1.0), "variable_s"),
    (lambda d: d.update(update_s=float("inf")), "update_s"),
    (lambda d: d["cpu"].update(vector={"1": {"sizes": [1e6], "seconds": [float("nan")]}}),
     "cpu.vector.1"),
    (lambda d: d["cpu"].update(serial={"0": {"sizes": [1e6], "seconds": [1e-3]}}),
     "thread counts"),
    (lambda d: d["cpu"].update(vector={}), "vector"),
    (lambda d: d["default_link"].update(bytes_per_s=0.0), "default_link"),
    (lambda d: d["default_link"].update(latency_s=float("nan")), "latency_s"),
])
def test_profile_numbers_must_be_finite_and_not_negative(tmp_path, edit, field):
    """A NaN or negative cost would poison or bias every estimate (a NaN step made the
    placer split a model), a thread count below 1 crashes the curves: refused by name."""
    path = _profile_with(tmp_path, edit)
    with pytest.raises(TfcError, match=r"edited.json: not a valid device profile \(.*"
                                       + field):
        load_profile(path)


def test_a_profile_without_the_step_io_and_compute_rates_still_loads(tmp_path):
    """A version-2 profile written before per-feed, per-fetch and per-variable step costs
    and the vector and serial rates were measured loads with them 0 / absent: its
    ``step_s`` holds one feed and one fetch, its kernels are costed by bytes, as when it
    was written."""
    def drop(d):
        for name in ("feed_s", "fetch_s", "variable_s", "update_s"):
            del d[name]
    p = load_profile(_profile_with(tmp_path, drop))
    assert (p.feed_s, p.fetch_s, p.variable_s, p.update_s) == (0.0, 0.0, 0.0, 0.0)
    assert p.cpu.vector is None and p.cpu.serial is None
    assert p.cpu.vector_seconds(1e9, 1) == 0.0 and p.cpu.serial_seconds(1e9, 1) == 0.0


def test_vector_and_serial_rates_round_trip_and_read_by_threads(tmp_path):
    rates = DeviceRates.flat(1e11, 1e10, cores=2)
    rates.vector = {1: Curve.rate(1e10), 2: Curve.rate(2e10)}
    rates.serial = {1: Curve.rate(1e8)}
    p = DeviceProfile(cpu=rates, source="test", cores=2, feed_s=1e-7, fetch_s=2e-7,
                      variable_s=3e-7, update_s=4e-7)
    back = load_profile(save_profile(p, tmp_path / "rates.json"))
    assert back == p
    assert back.cpu.vector_seconds(1e10, 2) == pytest.approx(0.5)
    assert back.cpu.serial_seconds(1e8, 2) == pytest.approx(1.0)  # measured at 1 thread only


def test_unreadable_profiles_are_clear_errors(tmp_path):
    binary = tmp_path / "binary.json"
    binary.write_bytes(b"\xff\xfe\x00\x81garbage\xc3")
    with pytest.raises(TfcError, match="binary.json: cannot read device profile"):
        load_profile(binary)
    folder = tmp_path / "folder.json"
    folder.mkdir()
    with pytest.raises(TfcError, match="folder.json: cannot read device profile"):
        load_profile(folder)


def test_each_device_kind_runs_on_its_backend():
    from tfc.devices import device_backend, program_backend
    assert device_backend("/gpu:1", "llvm") == "cuda"
    assert device_backend("/job:w/task:0/gpu:0", "reference") == "cuda"
    assert device_backend("/cpu:0", "reference") == "reference"
    assert device_backend("/cpu:0", "cuda") == "llvm"  # CUDA runs GPUs only
    assert program_backend(["/gpu:0"], "llvm") == "cuda"
    assert program_backend(["/cpu:0", "/gpu:0"], "reference") == "reference"
    assert program_backend([], "llvm") == "llvm"


def test_gpus_have_h100_class_defaults_and_a_pcie_link_until_measured(tmp_path):
    from tfc.devices import DEFAULT_HOST_LINK, default_gpu_rates
    p = DeviceProfile()
    gpu, cpu = p.rates("/gpu:0"), p.rates("/cpu:0")
    big, tiny = 2.0 * 4096 ** 3, 2.0 * 8 ** 3
    assert gpu.gemm_seconds(big, 1) * 20 < cpu.gemm_seconds(big, 4)  # big GEMMs: the GPU
    assert gpu.gemm_seconds(tiny, 1) > cpu.gemm_seconds(tiny, 4)  # tiny: the launch loses
    assert p.host_link("/gpu:3", to_gpu=True) == DEFAULT_HOST_LINK
    assert p.host_copies("/cpu:0", "/cpu:1") == []
    # measured ones (tfc calibrate with a GPU) round-trip through the profile file
    p.devices["/gpu:0"] = DeviceRates.flat(5e13, 3e12, 4e-6)
    p.links["host->/gpu:0"] = LinkRates(2.5e10, 3e-6)
    p.links["/gpu:0->host"] = LinkRates(2e10, 4e-6)
    back = load_profile(save_profile(p, tmp_path / "d.json"))
    assert back.rates("/gpu:0").to_dict() == p.devices["/gpu:0"].to_dict()
    assert back.rates("/gpu:1").to_dict() == default_gpu_rates().to_dict()
    assert back.host_copies("/gpu:0", "/job:w/task:1/gpu:0") == [
        LinkRates(2e10, 4e-6), LinkRates(2.5e10, 3e-6)]  # the device's index names it


def test_short_row_f64_gemm_and_linalg_rates_round_trip_and_are_optional(tmp_path):
    """The short-row, f64 GEMM and linalg curves came later within version 2: they round
    trip, are validated by name, and a file without them loads with none (its ops cost
    as when it was written)."""
    rates = DeviceRates.flat(1e11, 1e10, cores=2)
    rates.short_row = {1: Curve.rate(5e9)}
    rates.gemm_f64 = {1: Curve.rate(2.5e10), 2: Curve.rate(5e10)}
    rates.linalg = {1: Curve([128.0, 1024.0], [2.7e-7, 6e-7])}
    p = DeviceProfile(cpu=rates, source="test", cores=2)
    back = load_profile(save_profile(p, tmp_path / "rates.json"))
    assert back == p
    assert back.cpu.short_row_seconds(5e9, 2) == pytest.approx(1.0)
    assert back.cpu.gemm_seconds(5e10, 2, f64=True) == pytest.approx(1.0)
    assert back.cpu.gemm_seconds(5e10, 2) == pytest.approx(0.5)
    assert back.cpu.linalg_seconds(1024.0, 1) == pytest.approx(6e-7)
    old = load_profile(_profile_with(tmp_path, lambda d: None))
    assert old.cpu.short_row is None and old.cpu.gemm_f64 is None and old.cpu.linalg is None
    assert old.cpu.short_row_seconds(1e9, 1) is None and old.cpu.linalg_seconds(1e9, 1) is None
    assert old.cpu.gemm_seconds(1e9, 1, f64=True) == old.cpu.gemm_seconds(1e9, 1)
    for kind in ("short_row", "gemm_f64", "linalg"):
        bad = _profile_with(tmp_path, lambda d, kind=kind: d["cpu"].update(
            {kind: {"1": {"sizes": [1e6], "seconds": [-1.0]}}}))
        with pytest.raises(TfcError, match=f"cpu.{kind}.1"):
            load_profile(bad)


def test_task_of_names_the_cluster_task_and_none_for_local_devices():
    from tfc.devices import task_of
    assert task_of("/job:worker/task:1/cpu:0") == "/job:worker/task:1"
    assert task_of("job:ps/task:0/gpu:1") == "/job:ps/task:0"
    assert task_of("/cpu:1") is None and task_of("gpu:0") is None


def test_a_crowded_hand_off_round_trips_and_costs_only_more_devices_than_cores(tmp_path):
    """The hand-off with more device threads than cores (a receiver must be woken) is
    kept apart: a 4-device step of a 2-core host pays it, a 2-device step the plain one;
    a profile written before it was measured loads without it and pays the plain one."""
    p = DeviceProfile(source="test", cores=2, handoff_s=6e-6, crowded_handoff_s=2e-5)
    back = load_profile(save_profile(p, tmp_path / "crowded.json"))
    assert back == p
    assert back.handoff_seconds(2) == 6e-6 and back.handoff_seconds(4) == 2e-5
    older = load_profile(_profile_with(tmp_path, lambda d: d.pop("crowded_handoff_s", None)))
    assert older.crowded_handoff_s is None and older.handoff_seconds(8) == older.handoff_s
    bad = _profile_with(tmp_path, lambda d: d.update(crowded_handoff_s=-1e-6))
    with pytest.raises(TfcError, match="crowded_handoff_s"):
        load_profile(bad)

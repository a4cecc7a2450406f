"""Device names, local devices and the device profile file."""

import pytest

from tfc.devices import (DeviceProfile, DeviceRates, LinkRates, load_profile, matches,
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


def test_corrupt_or_missing_profiles_are_clear_errors(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"format": "something-else"}')
    with pytest.raises(TfcError, match="bad.json: not a valid device profile"):
        load_profile(bad)
    with pytest.raises(TfcError, match="tfc calibrate"):
        load_profile(tmp_path / "missing.json")

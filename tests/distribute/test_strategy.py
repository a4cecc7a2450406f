"""``tfc.distribute``'s strategy objects: scopes, ``get_strategy``, devices, replicas, and
one-line errors for what cannot work."""

import threading

import pytest

import tfc
from tfc.distribute.strategy import default_mirrored_devices
from tfc.errors import TfcError
from tfc.passes.replicate import ClusterSpec


def test_get_strategy_is_the_innermost_scope_of_this_thread():
    default = tfc.distribute.get_strategy()
    assert default.num_replicas_in_sync == 1 and not tfc.distribute.has_strategy()
    mirrored = tfc.distribute.MirroredStrategy(["cpu:0", "/cpu:1"])
    with mirrored.scope() as s:
        assert s is mirrored and tfc.distribute.get_strategy() is mirrored
        assert tfc.distribute.has_strategy()
        with mirrored.scope():  # the same strategy again: fine
            assert tfc.distribute.get_strategy() is mirrored
        seen = []
        thread = threading.Thread(target=lambda: seen.append(tfc.distribute.get_strategy()))
        thread.start()
        thread.join()
        assert seen == [default]  # scopes are per thread
        with pytest.raises(TfcError, match="mixing strategies"):
            with tfc.distribute.OneDeviceStrategy("/cpu:0").scope():
                pass
    assert tfc.distribute.get_strategy() is default


def test_devices_and_replicas():
    mirrored = tfc.distribute.MirroredStrategy(["cpu:0", "/cpu:1"])
    assert mirrored.devices == ("/cpu:0", "/cpu:1") and mirrored.num_replicas_in_sync == 2
    assert mirrored.cluster_spec == ClusterSpec(0, 2, "allreduce")
    assert tfc.distribute.MirroredStrategy().devices == tuple(default_mirrored_devices())
    one = tfc.distribute.OneDeviceStrategy("/cpu:0")
    assert one.num_replicas_in_sync == 1 and one.cluster_spec is None
    assert tfc.distribute.OneDeviceStrategy("/cpu:1").cluster_spec == ClusterSpec(0, 1)
    ps = tfc.distribute.ParameterServerStrategy("ps=1,workers=3", address="inprocess")
    assert ps.num_replicas_in_sync == 3
    assert ps.devices[0] == "/job:ps/task:0/cpu:0" and ps.cluster_spec.strategy == "ps-sync"
    mw = tfc.distribute.MultiWorkerMirroredStrategy(2, address="inprocess")
    assert mw.devices == ("/job:worker/task:0/cpu:0", "/job:worker/task:1/cpu:0")
    assert mw.cluster_spec.strategy == "allreduce"


@pytest.mark.parametrize("make, message", [
    (lambda: tfc.distribute.MirroredStrategy(["/cpu:0", "cpu:0"]), "listed twice"),
    (lambda: tfc.distribute.MirroredStrategy(["/job:worker/task:0/cpu:0"]),
     "MultiWorkerMirroredStrategy"),
    (lambda: tfc.distribute.MirroredStrategy(["/tpu:0"]), "tpu"),
    (lambda: tfc.distribute.OneDeviceStrategy("/job:ps/task:0/cpu:0"), "cluster task"),
    (lambda: tfc.distribute.ParameterServerStrategy("workers=2"), "ps=0"),
    (lambda: tfc.distribute.ParameterServerStrategy(ClusterSpec(0, 2)), "asks for allreduce"),
    (lambda: tfc.distribute.MultiWorkerMirroredStrategy("ps=1,workers=2"), "would not use"),
    (lambda: tfc.distribute.MultiWorkerMirroredStrategy(2, address="nowhere"),
     "HOST:PORT"),
    (lambda: tfc.distribute.ParameterServerStrategy(3), "ClusterSpec"),
])
def test_bad_strategies_are_one_line_errors(make, message):
    with pytest.raises(TfcError, match=message) as e:
        make()
    assert "\n" not in str(e.value)

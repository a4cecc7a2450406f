"""One entry of a ``Program`` made ready to run many times: the hot path of
``Program.run`` and of ``Program.callable``.

A step through a runner does what ``Program.run`` always did, in the order that keeps
its guarantees, but checks each thing once where once is enough:

- Feeds that are already C-contiguous numpy arrays of the placeholders' dtypes pass as
  they are; anything else goes through ``check_feeds`` (conversions, the dtype rule,
  the error messages). On a backend with ``fast_step``, shapes are checked by
  ``check_feeds`` the first time each tuple of feed shapes is seen (before the backend
  binds them, and checks them again), so native code never sees an unchecked shape;
  other backends get every feed through ``check_feeds``.
- On a backend with ``fast_step`` (llvm), the variables the program holds are handed
  over as they are: every value a program stores was checked when it was stored. The
  fetches and updates the backend returns are fresh arrays nothing else references, so
  updates are frozen and swapped in without the copies and overlap scans that
  ``Program._checked_updates`` makes for backends that promise less.
- On a backend whose executable can keep its updates on its device (``read_back``: the
  cuda backend, a cluster's tasks), steps *defer* them: nothing is copied back, and the
  program records the executable as the variables' holder (``Program._held``, which says
  how readers sync). Variables this entry reads that another executable holds are synced
  first, unless both keep them in one place (``state_owner``: a cluster's entries).
- Feeds that are arrays of the executable's device (``device_array_type()``: cupy arrays
  on a GPU) pass without a host round trip when their dtype is the placeholder's; their
  shapes are checked by the executable when it binds them. So do numpy arrays of the
  placeholder's dtype that are not C-contiguous, for an executable that copies them to
  its device by one strided copy (``takes_strided_feeds``: the cuda backend's), instead
  of a contiguous copy here first.
- A step that fails changes neither the variables nor the step counter.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Sequence

import numpy as np

from tfc.backends.base import StepOwner
from tfc.errors import ExecutionError, FeedError
from tfc.runtime.feeds import check_feeds

if TYPE_CHECKING:
    from tfc.runtime.program import Program

class EntryRunner:
    """Runs steps of one entry of ``program`` with feeds in argument order."""

    def __init__(self, program: "Program", entry: str) -> None:
        graph = program.entry(entry)
        self.program, self.entry, self.graph = program, entry, graph
        self.where = f"entry '{entry}'"
        self.arg_names: list[str] = list(graph.arg_names)
        self.result_names: list[str] = list(graph.result_names)
        self.dtypes = [np.dtype(a.dtype.np) for a in graph.args]
        self.exe = program._executable(entry)
        fast = getattr(self.exe, "fast_step", None)
        self.fast = fast if fast is not None and not getattr(self.exe, "fallback_ops", ()) \
            else None
        self.var_names: list[str] = list(getattr(self.exe, "var_names", ()))
        self.update_names: list[str] = list(getattr(self.exe, "update_names", ()))
        self.defers = self.fast is not None and callable(getattr(self.exe, "read_back", None))
        # what holds the values of deferred updates: the executable, or what it shares
        # them with (``state_owner``: a cluster program's entries share its tasks), so a
        # value another entry left there is current here too, without a read back
        self.state_owner = getattr(self.exe, "state_owner", self.exe)
        self._device_type = getattr(self.exe, "device_array_type", None) \
            if self.fast is not None else None
        self._on_device: type | None = None  # what it returned (it finds the device)
        self._strided = self.fast is not None and bool(
            getattr(self.exe, "takes_strided_feeds", False))

    def step(self, values: Sequence[Any]) -> list[np.ndarray]:
        """Run one step with feeds ``values`` (argument order); the fetches, in order."""
        arrays = values
        for a, dt in zip(values, self.dtypes):
            if type(a) is not np.ndarray or a.dtype != dt or not a.flags.c_contiguous:
                on_device = self._device_feeds(values)
                if on_device is None and self._strided:
                    on_device = self._strided_feeds(values)
                arrays = on_device if on_device is not None else check_feeds(
                    self.graph, dict(zip(self.arg_names, values)), self.where)
                break
        fast = self.fast
        if fast is None:
            return self._step_generic(arrays)
        prog = self.program
        variables = prog._variables
        holders = prog._held
        exe = self.exe
        held = []
        if self.var_names:
            if holders:
                owner = self.state_owner
                prog._sync_held([n for n in self.var_names if n in holders and getattr(
                    holders[n], "state_owner", holders[n]) is not owner])
            try:
                for name in self.var_names:
                    held.append(variables[name])
            except KeyError as e:
                raise ExecutionError(f"variable @{e.args[0]} is not initialized") from None
        if self.defers:
            outs, _ = fast(arrays, held, prog._step, self._validate, True, True)
            for name in self.update_names:
                holders[name] = exe
        else:
            outs, upds = fast(arrays, held, prog._step, self._validate, True)
            if upds:
                for name, u in zip(self.update_names, upds):
                    u.flags.writeable = False
                    variables[name] = u
                    holders.pop(name, None)
        prog._step += 1
        return outs

    def _device_feeds(self, values: Sequence[Any]) -> list[Any] | None:
        """``values`` when each is a C-contiguous numpy array of its placeholder's dtype or
        an array of the executable's device; a ``FeedError`` for a device array of another
        dtype (device feeds are not converted); None when any is something else
        (``check_feeds`` converts or explains it)."""
        if self._device_type is None or not any(
                type(a) is not np.ndarray and hasattr(a, "dtype") for a in values):
            return None
        on_device = self._on_device
        if on_device is None:
            on_device = self._on_device = self._device_type()
        if not any(type(a) is on_device for a in values):
            return None
        for a, dt, name in zip(values, self.dtypes, self.arg_names):
            fed_on_device = type(a) is on_device
            if fed_on_device:
                if a.dtype != dt:
                    raise FeedError(f"{self.where}: feed '{name}' is a device array of dtype "
                                    f"{a.dtype}, expected {dt} (device feeds are not "
                                    f"converted)")
            elif type(a) is not np.ndarray or a.dtype != dt or not (
                    a.flags.c_contiguous or self._strided):
                return None
        return list(values)

    def _strided_feeds(self, values: Sequence[Any]) -> list[Any] | None:
        """``values`` when each is a numpy array of its placeholder's dtype, C-contiguous
        or not (for an executable with ``takes_strided_feeds``); else None."""
        for a, dt in zip(values, self.dtypes):
            if type(a) is not np.ndarray or a.dtype != dt:
                return None
        return list(values)

    def native_callable(self, call: Callable[..., Any], order: Sequence[int] | None,
                        index: Sequence[int], single: bool) -> Callable[..., Any] | None:
        """``call`` (``Program.callable``'s step, which returns ``outs[index]``) with its
        usual path in native code, where the backend offers that; else ``None``."""
        make = getattr(self.exe, "native_callable", None)
        if self.fast is None or make is None:
            return None
        owner = StepOwner(self.program, "_variables", "_step", freeze_updates=True)
        return make(owner, call, order, index, single)

    def _validate(self, arrays: Sequence[Any]) -> None:
        """Shapes the backend has not bound yet: ``check_feeds`` says what is wrong (a
        device feed is checked as a host array of its shape and dtype would be)."""
        arrays = [a if type(a) is np.ndarray else
                  np.lib.stride_tricks.as_strided(np.zeros(1, a.dtype), a.shape,
                                                  (0,) * len(a.shape)) for a in arrays]
        check_feeds(self.graph, dict(zip(self.arg_names, arrays)), self.where)

    def _step_generic(self, arrays: Sequence[Any]) -> list[np.ndarray]:
        """What ``Program.run`` does on a backend without ``fast_step``."""
        prog, graph = self.program, self.graph
        prog._sync_held()
        arrays = check_feeds(graph, dict(zip(self.arg_names, arrays)), self.where)
        result = self.exe(arrays, prog._view, prog._step)
        if len(result.fetches) != len(graph.results):
            raise ExecutionError(f"{self.where}: the backend returned "
                                 f"{len(result.fetches)} fetches, expected {len(graph.results)}")
        fetches = [prog._own_fetch(np.asarray(f)) for f in result.fetches]
        updates = prog._checked_updates(self.entry, result.updates, [*arrays, *fetches])
        prog._variables.update(updates)
        prog._step += 1  # (no variable is held now: synced above)
        return fetches

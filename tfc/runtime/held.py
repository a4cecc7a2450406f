"""Variable values that an executable may keep on its device between steps.

An executable with ``read_back`` (the cuda backend's; the multi-device executor's when
one of its devices is a GPU) runs ``fast_step(..., defer=True)`` without copying its
variable updates back: it *holds* them, and the host arrays its caller stores for those
variables are stale until ``read_back(names)`` copies the device values to the host.
``read_back_held`` is that one step for any caller (``Program._sync_held``), and
``VariableStore`` is the mapping ``Session.variables`` keeps its values in: reading a
held variable reads it back first, writing one makes the host value current again, and
``deferred_step`` runs such a step, so a training loop copies no variable to the host.
"""

from __future__ import annotations

from typing import Any, Iterable, Iterator, MutableMapping, Sequence

import numpy as np

from tfc.errors import ExecutionError


def read_back_held(held: dict[str, Any], values: dict[str, Any],
                   names: Iterable[str] | None = None) -> None:
    """Bring the values the executables in ``held`` (variable -> holder) keep on their
    devices (all, or those of ``names``) into ``values``: one ``read_back`` per holder;
    the names read back are no longer held."""
    if not held:
        return
    wanted = list(held) if names is None else [n for n in names if n in held]
    by_exe: dict[int, tuple[Any, list[str]]] = {}
    for name in wanted:
        exe = held[name]
        by_exe.setdefault(id(exe), (exe, []))[1].append(name)
    for exe, mine in by_exe.values():
        for name, value in zip(mine, exe.read_back(mine)):
            values[name] = value
            del held[name]


def defers(exe: Any) -> bool:
    """Whether ``exe`` can keep its variable updates on its device (``fast_step`` with
    ``defer`` and ``read_back``), and runs natively (no reference fallback)."""
    return (callable(getattr(exe, "fast_step", None))
            and callable(getattr(exe, "read_back", None))
            and not getattr(exe, "fallback_ops", ()))


def _frozen(value: Any) -> np.ndarray:
    """``value`` as a read-only C-contiguous array (a copy unless it is one already): an
    executable that holds a variable recognizes the host array it was passed by identity,
    which is sound only while nobody can change that array."""
    if type(value) is np.ndarray and not value.flags.writeable and value.flags.c_contiguous:
        return value
    arr = np.array(value, order="C", copy=True)
    arr.flags.writeable = False
    return arr


class VariableStore(MutableMapping[str, np.ndarray]):
    """Variable name -> value, where an executable may hold the newest value on its
    device (``held``: name -> holder). ``host`` is the plain dict of host arrays (stale
    for held names; the llvm backend's native step reads and writes it directly, and its
    executables never hold anything). Reads sync what they read (``sync``); writes
    replace the host value and end the hold."""

    def __init__(self) -> None:
        self.host: dict[str, Any] = {}
        self.held: dict[str, Any] = {}

    def __getitem__(self, name: str) -> np.ndarray:
        if name in self.held:
            read_back_held(self.held, self.host, [name])
        return self.host[name]

    def __setitem__(self, name: str, value: Any) -> None:
        self.host[name] = value
        self.held.pop(name, None)

    def __delitem__(self, name: str) -> None:
        if name not in self.host and name not in self.held:
            raise KeyError(name)
        self.host.pop(name, None)
        self.held.pop(name, None)

    def __contains__(self, name: object) -> bool:
        return name in self.host or name in self.held

    def __iter__(self) -> Iterator[str]:
        yield from list(self.host)
        yield from [n for n in self.held if n not in self.host]

    def __len__(self) -> int:
        return len(self.host) + sum(1 for n in self.held if n not in self.host)

    def __repr__(self) -> str:
        return (f"<VariableStore {len(self)} variables, {len(self.held)} held on a "
                f"device>")

    def sync(self, names: Iterable[str] | None = None) -> dict[str, Any]:
        """Read back the held values (all, or those of ``names``); ``host`` is then
        current for them. Returns ``host``."""
        read_back_held(self.held, self.host, names)
        return self.host

    def deferred_step(self, exe: Any, feeds: Sequence[Any], step: int) -> list[Any]:
        """One ``fast_step`` of ``exe`` (``defers(exe)``) with ``feeds`` checked by the
        caller: the values of what it reads that another executable holds are read back
        first; what it writes it holds afterwards (nothing is copied back). The
        fetches; a step that fails changes nothing here (nor on the device)."""
        names: list[str] = list(exe.var_names)
        held, host = self.held, self.host
        if held:
            self.sync([n for n in names if n in held and held[n] is not exe])
        values = []
        for name in names:
            value = host.get(name)
            if value is None or type(value) is not np.ndarray or value.flags.writeable:
                if name in held:  # (this executable's value, not stored here as passed)
                    self.sync([name])
                    value = host[name]
                if value is None:
                    raise ExecutionError(f"variable @{name} is not initialized")
                value = host[name] = _frozen(value)
            values.append(value)
        fetches, _ = exe.fast_step(feeds, values, step, None, False, True)
        for name in exe.update_names:
            held[name] = exe
        return list(fetches)

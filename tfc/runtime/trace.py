"""Step timelines in the Chrome trace format (what Perfetto and chrome://tracing open).

The executor reports what each device's thread did — each compiled stage it ran, each
kernel inside it when the backend times kernels, each send and each wait in a recv —
and ``Tracer`` turns that into trace events: one track per device, spans in
microseconds, and a flow arrow from every send to the recv that took its tensor.

A transfer inside one process is a hand-off: the receiver gets the sender's array, no
byte is copied. The per-device figures say so: ``handoffs`` (tensors sent) and
``handoff_bytes`` (their sizes, handed over by reference), not bytes moved.
"""

from __future__ import annotations

import json
import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class DeviceStats:
    busy_s: float = 0.0          # time in stages (compute)
    wait_s: float = 0.0          # time blocked in recvs
    handoffs: int = 0            # tensors sent to other devices (in-process: by reference)
    handoff_bytes: int = 0       # their sizes: handed over, not copied
    peak_bytes: int = 0          # the largest arena of a stage (memory plan), when known


@dataclass
class Tracer:
    """Collects events from steps (thread-safe); ``save`` writes the JSON trace."""

    events: list[dict[str, Any]] = field(default_factory=list)
    devices: dict[str, int] = field(default_factory=dict)  # device -> track id
    stats: dict[str, DeviceStats] = field(default_factory=dict)
    step: int = 0
    _t0: float = field(default_factory=time.perf_counter)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def _us(self, t: float) -> float:
        return (t - self._t0) * 1e6

    def _track(self, device: str) -> int:
        if device not in self.devices:
            self.devices[device] = len(self.devices) + 1
            self.stats[device] = DeviceStats()
            self.events.append({"ph": "M", "name": "thread_name", "pid": 1,
                                "tid": self.devices[device], "args": {"name": device}})
        return self.devices[device]

    def span(self, device: str, name: str, start: float, end: float, cat: str,
             **args: Any) -> None:
        with self._lock:
            tid = self._track(device)
            self.events.append({"ph": "X", "name": name, "cat": cat, "pid": 1, "tid": tid,
                                "ts": self._us(start), "dur": max(0.0, (end - start) * 1e6),
                                "args": {"step": self.step, **args}})
            st = self.stats[device]
            if cat == "stage":
                st.busy_s += end - start
            elif cat == "recv":
                st.wait_s += end - start

    def send(self, device: str, key: str, nbytes: int, at: float) -> None:
        """Tensor ``key`` of ``nbytes`` handed over (by reference) at ``at``."""
        with self._lock:
            tid = self._track(device)
            flow = f"{self.step}:{key}"
            self.events.append({"ph": "i", "s": "t", "name": f"send {key}", "cat": "send",
                                "pid": 1, "tid": tid, "ts": self._us(at),
                                "args": {"bytes": nbytes, "transfer": "hand-off",
                                         "step": self.step}})
            self.events.append({"ph": "s", "id": flow, "name": "transfer", "cat": "transfer",
                                "pid": 1, "tid": tid, "ts": self._us(at)})
            st = self.stats[device]
            st.handoffs += 1
            st.handoff_bytes += nbytes

    def recvs(self, device: str, keys: list[str], start: float, end: float) -> None:
        """One wait, from ``start`` to ``end``, for the tensors ``keys`` (a stage's
        receives): one span, and the flow arrow of every key ending there."""
        name = f"recv {keys[0]}" + (f" (+{len(keys) - 1} more)" if len(keys) > 1 else "")
        self.span(device, name, start, end, "recv", keys=list(keys))
        with self._lock:
            for key in keys:
                self.events.append({"ph": "f", "bp": "e", "id": f"{self.step}:{key}",
                                    "name": "transfer", "cat": "transfer", "pid": 1,
                                    "tid": self.devices[device], "ts": self._us(end)})

    def memory(self, device: str, nbytes: int) -> None:
        with self._lock:
            self._track(device)
            st = self.stats[device]
            st.peak_bytes = max(st.peak_bytes, int(nbytes))

    def to_json(self) -> str:
        meta = [{"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "tfc"}}]
        return json.dumps({"traceEvents": meta + self.events, "displayTimeUnit": "ms"})

    def save(self, path: str | os.PathLike[str]) -> Path:
        from tfc.atomic import atomic_write
        data = self.to_json().encode()
        atomic_write(path, lambda f: f.write(data))
        return Path(path)

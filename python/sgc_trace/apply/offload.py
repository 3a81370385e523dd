"""A plan's offloads at run time: values copied to host memory and back during the step.

An offload in a plan (`plan["offloads"]`, `sgc_ir::Offload`) names a storage (`root`, a
tensor index) and four steps of the schedule: the copy to host starts after `copy_after`;
the device storage is freed after `free_after` (the compute waits for the copy first);
the copy back starts after `fetch_after`, into a new device storage; step `needed_at`,
its first reader, waits for it. `apply.partitioner` puts one FX node at each of those points
(`HostPool.to_host`, `release`, `fetch`, `ready`), and the views of the storage that later
steps read are rebuilt over the fetched bytes (`rebuild`); this module runs them.

The host side is one pool, allocated once per compiled step (`plan["host"]["size"]`
bytes; pinned on CUDA, so copies are asynchronous) and never on the fly: offload `i` owns
bytes `plan["host"]["offsets"][i]` onward while the host holds it. Each storage is copied
whole, as bytes, so every view of it comes back with its own sizes, strides and offset.

On CUDA each direction has its own stream (`torch.cuda.Stream`), as the planner's model
has (`crates/sgc-plan-format/src/streams.rs`): a copy to host waits for the compute stream's work
so far (the value is made), runs non-blocking into the pinned pool and records an event;
`release` makes the compute stream wait for that event before the device bytes are
reused; a fetch allocates its device bytes on the compute stream, waits for it, copies
non-blocking and records an event that `ready` waits for. Two offloads may share host
bytes at different times; a copy into shared bytes also waits for the earlier owner's
fetch. On the CPU (tests) the same nodes copy synchronously, with no streams.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..errors import ExportError
from ..native import storage_sizes


class CudaCalls:
    """The CUDA calls the pool makes; tests substitute a recorder to check the CUDA path
    without a GPU."""

    def pinned(self, nbytes: int) -> torch.Tensor:
        return torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)

    def stream(self, device: torch.device):
        return torch.cuda.Stream(device)

    def event(self):
        return torch.cuda.Event()

    def current(self, device: torch.device):
        return torch.cuda.current_stream(device)

    def on(self, stream):
        return torch.cuda.stream(stream)

    def copy(self, dst: torch.Tensor, src: torch.Tensor) -> None:
        """`dst <- src` on the current stream (inside `on(stream)`), not waiting for it."""
        dst.copy_(src, non_blocking=True)

    def empty(self, nbytes: int, device: torch.device) -> torch.Tensor:
        """Device bytes a fetch copies into (uninitialised)."""
        return torch.empty(nbytes, dtype=torch.uint8, device=device)


@dataclass(frozen=True)
class Slot:
    """Offload `index`'s place: `nbytes` at `offset` in the pool, the storage `tensor`."""

    index: int
    tensor: str
    offset: int
    nbytes: int
    shares_with: tuple[int, ...]  # earlier offloads whose host bytes overlap these


class HostPool:
    """The host pool and copy streams of one compiled step (see the module doc)."""

    def __init__(self, graph: dict, plan: dict, device: torch.device, cuda: CudaCalls | None = None):
        self.device = device
        self.size = int(plan["host"]["size"])
        self.slots = _slots(graph, plan)
        self.cuda = cuda if cuda is not None else (CudaCalls() if device.type == "cuda" else None)
        self._pool: torch.Tensor | None = None
        self._streams = None
        self._copied: dict[int, object] = {}
        self._fetched: dict[int, object] = {}
        self._back: dict[int, torch.Tensor] = {}

    def _host(self, i: int) -> torch.Tensor:
        if self._pool is None:  # once per compiled step, at its first call
            if self.cuda is None:
                # Plain memory; 0xff bytes (NaN as floats), so a copy that did not happen shows.
                self._pool = torch.full((self.size,), 255, dtype=torch.uint8)
            else:
                self._pool = self.cuda.pinned(self.size)
                self._streams = (self.cuda.stream(self.device), self.cuda.stream(self.device))
        s = self.slots[i]
        return self._pool[s.offset:s.offset + s.nbytes]

    def to_host(self, i: int, x: torch.Tensor) -> int:
        """Starts the copy of `x`'s storage to offload `i`'s host bytes."""
        src = _bytes(x)
        if src.numel() != self.slots[i].nbytes:
            raise ExportError(f"internal: offload {i} (`{self.slots[i].tensor}`): the storage has {src.numel()} bytes, "
                              f"the plan {self.slots[i].nbytes}")
        host = self._host(i)
        if self.cuda is None:
            host.copy_(src)
            return i
        to_host = self._streams[0]
        to_host.wait_stream(self.cuda.current(self.device))
        for j in self.slots[i].shares_with:
            if j in self._fetched:
                to_host.wait_event(self._fetched[j])
        with self.cuda.on(to_host):
            self.cuda.copy(host, src)
        self._copied[i] = _record(self.cuda, self._copied.get(i), to_host)
        return i

    def release(self, i: int, token: int, x: torch.Tensor) -> None:
        """The device bytes of offload `i` may go once the copy has read them (the value's
        last use: the module frees it after this node)."""
        if self.cuda is not None:
            self.cuda.current(self.device).wait_event(self._copied[i])

    def fetch(self, i: int, token: int) -> int:
        """Starts the copy of offload `i` back to new device bytes."""
        host = self._host(i)
        if self.cuda is None:
            back = torch.empty(host.numel(), dtype=torch.uint8, device=self.device)
            back.copy_(host)
        else:
            back = self.cuda.empty(host.numel(), self.device)
            to_device = self._streams[1]
            to_device.wait_stream(self.cuda.current(self.device))
            with self.cuda.on(to_device):
                self.cuda.copy(back, host)
            self._fetched[i] = _record(self.cuda, self._fetched.get(i), to_device)
        self._back[i] = back
        return i

    def ready(self, i: int, token: int) -> torch.Tensor:
        """Offload `i`'s fetched bytes, once the copy has written them (the pool lets go of
        them: the module frees them after their last reader)."""
        if self.cuda is not None:
            self.cuda.current(self.device).wait_event(self._fetched[i])
        return self._back.pop(i)


def rebuild(data: torch.Tensor, dtype: torch.dtype, size: tuple, stride: tuple, offset: int) -> torch.Tensor:
    """A view of `dtype` over the storage of `data` (a fetched storage's bytes)."""
    return torch.empty(0, dtype=dtype, device=data.device).set_(data.untyped_storage(), offset, size, stride)


def _bytes(x: torch.Tensor) -> torch.Tensor:
    """The whole storage of `x` as a flat uint8 tensor."""
    return torch.empty(0, dtype=torch.uint8, device=x.device).set_(x.untyped_storage())


def _record(cuda: CudaCalls, event, stream):
    event = event if event is not None else cuda.event()
    event.record(stream)
    return event


def _slots(graph: dict, plan: dict) -> list[Slot]:
    """Each offload's host bytes, checked against the pool's size."""
    tensors = graph["tensors"]
    host = plan.get("host")
    offloads = plan["offloads"]
    if host is None:
        raise ExportError(f"the plan has {len(offloads)} offloads but no host pool (`host`): plan the graph again")
    if len(host["offsets"]) != len(offloads):
        raise ExportError(f"the plan has {len(offloads)} offloads but {len(host['offsets'])} host offsets: "
                          f"plan the graph again")
    slots: list[Slot] = []
    sizes = storage_sizes(graph, [tensors[o["root"]]["name"] for o in offloads])
    for i, (o, offset, nbytes) in enumerate(zip(offloads, host["offsets"], sizes)):
        t = tensors[o["root"]]
        if offset + nbytes > host["size"]:
            raise ExportError(f"offload {i} (`{t['name']}`): bytes {offset}..{offset + nbytes} are past the host "
                              f"pool's {host['size']}: plan the graph again")
        shares = tuple(j for j, s in enumerate(slots) if s.offset < offset + nbytes and offset < s.offset + s.nbytes)
        slots.append(Slot(i, t["name"], int(offset), nbytes, shares))
    return slots

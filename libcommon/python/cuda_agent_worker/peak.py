"""The reference's peak memory: the most tensor memory one forward holds at once beyond what was
resident before it (inputs, params, buffers), the measure kernel-check's scratch cap follows
(datasets/skill/rules.yaml, scratch_cap: reference_peak).

One function for every caller (the worker's load, make_candidates.py --specs on the meta device):

    peak_bytes, out = measure_peak(lambda: task.forward(inputs), device)

On CUDA it is the caching allocator's own count (reset_peak_memory_stats, then max_memory_allocated
less what was allocated before), so it includes what the forward's libraries take through the
allocator (cuDNN's workspace). On any other device (the CPU, meta) a device-independent counter:
a TorchDispatchMode that sees every op's outputs, counts each new tensor storage's bytes while a
tensor it saw still uses it (weakref finalizers), and keeps the maximum. It counts only what ops
return (not an op's internal workspace) and nothing allocated before (an op's input storage it has
not seen returned is resident: an in-place op on an input or a view of a param adds nothing). A
storage that outlives every tensor the counter saw use it (an nn.Parameter or `.data` made from an
op's output inside forward, which are new tensors no op returned) is counted free when those die:
an under-count, so the cap it sizes errs toward the io floor.
Works with torch 1.13 (Debian, CI) and 2.x. This module imports torch and nothing of the worker's,
so a script can import it with libcommon/python on sys.path."""
import weakref

import torch

try:
    from torch.utils._python_dispatch import TorchDispatchMode
except ImportError:  # torch < 1.12: no dispatch modes; measure_peak answers None off CUDA
    TorchDispatchMode = object


def _storage_key(t):
    """(key, bytes) of the storage a tensor uses; (None, 0) for one without a storage (sparse,
    nested, wrappers). The key is the StorageImpl's address: one per storage however many views."""
    try:
        st = t.untyped_storage() if hasattr(t, "untyped_storage") else t._storage()
        return (t.device.type, st._cdata), int(st.nbytes())
    except Exception:
        return None, 0


def _tensors(value, out):
    if isinstance(value, torch.Tensor):
        out.append(value)
    elif isinstance(value, (list, tuple)):
        for v in value:
            _tensors(v, out)
    elif isinstance(value, dict):
        for v in value.values():
            _tensors(v, out)
    return out


class LiveStorageCounter(TorchDispatchMode):
    """Live bytes of the storages the ops under it returned, and their peak (see the module doc)."""

    def __init__(self):
        super(LiveStorageCounter, self).__init__()
        self.live = 0
        self.peak = 0
        self._storages = {}   # key -> [bytes, finalizers alive]
        self._resident = set()  # storages that were there before (first seen as an op's input)

    def _release(self, key):
        entry = self._storages.get(key)
        if entry is None:
            return
        entry[1] -= 1
        if entry[1] <= 0:
            self.live -= entry[0]
            del self._storages[key]

    def _track(self, t):
        key, nbytes = _storage_key(t)
        if key is None or key in self._resident:
            return
        entry = self._storages.get(key)
        if entry is None:
            entry = self._storages[key] = [nbytes, 0]
            self.live += nbytes
        elif nbytes > entry[0]:  # resized (an out= tensor grown)
            self.live += nbytes - entry[0]
            entry[0] = nbytes
        # One finalizer per tensor object seen: the storage is counted until the last one dies (an
        # in-place op returning the same object adds one more, released with it as well).
        fin = weakref.finalize(t, self._release, key)
        fin.atexit = False
        entry[1] += 1

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        for t in _tensors((args, kwargs), []):
            key, _ = _storage_key(t)
            if key is not None and key not in self._storages:
                self._resident.add(key)
        out = func(*args, **kwargs)
        for t in _tensors(out, []):
            self._track(t)
        if self.live > self.peak:
            self.peak = self.live
        return out


def measure_peak(call, device):
    """(peak_bytes, call()): the most tensor memory call() held at once beyond what was resident
    before it, measured as the module doc says for `device` (a torch.device or its name); peak_bytes
    is None where nothing can measure it (torch without dispatch modes, off CUDA)."""
    device = torch.device(device)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        before = torch.cuda.memory_allocated(device)
        out = call()
        torch.cuda.synchronize(device)
        return max(0, int(torch.cuda.max_memory_allocated(device)) - int(before)), out
    if TorchDispatchMode is object:
        return None, call()
    counter = LiveStorageCounter()
    with counter:
        out = call()
    return int(counter.peak), out

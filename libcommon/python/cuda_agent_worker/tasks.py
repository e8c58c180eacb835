"""Tasks in KernelBench format (class Model, get_inputs, get_init_inputs): loading the untrusted code,
seeded inputs with the distribution get_inputs used, reference runs with pinned precision."""
import contextlib
import hashlib
import inspect
import math
import os
import random
import sys
import traceback
import types

import torch

from . import safetensors_io


class TaskError(Exception):
    """The task code raised (or broke a rule of the format) at `stage`."""

    def __init__(self, stage, detail, tb=""):
        Exception.__init__(self, "%s: %s" % (stage, detail))
        self.stage = stage
        self.detail = detail
        self.traceback = tb


def _task_traceback(limit_lines=12):
    lines = traceback.format_exc().rstrip().splitlines()
    return "\n".join(lines[-limit_lines:])


@contextlib.contextmanager
def stage(name):
    """Any exception of the task code inside becomes a TaskError naming the stage."""
    try:
        yield
    except TaskError:
        raise
    except MemoryError:
        raise TaskError(name, "MemoryError (over the worker's memory limit?)", _task_traceback())
    except Exception as e:  # the task's own exception, whatever its type
        msg = ("%s: %s" % (type(e).__name__, e)).strip().splitlines()
        raise TaskError(name, msg[0][:500] if msg else type(e).__name__, _task_traceback())


def seed_all(seed):
    seed = int(seed)
    random.seed(seed)
    torch.manual_seed(seed)  # every device's generator too
    try:
        import numpy
        numpy.random.seed(seed % (2 ** 32))
    except ImportError:
        pass


def rng_states(device):
    """The state of every generator a task's code may draw from (seed_all's: Python's, torch's CPU
    one, the device's, NumPy's), for set_rng_states to put back."""
    states = {"random": random.getstate(), "torch": torch.get_rng_state()}
    if device.type == "cuda":
        states["cuda"] = torch.cuda.get_rng_state(device)
    try:
        import numpy
        states["numpy"] = numpy.random.get_state()
    except ImportError:
        pass
    return states


def set_rng_states(states, device):
    random.setstate(states["random"])
    torch.set_rng_state(states["torch"])
    if "cuda" in states:
        torch.cuda.set_rng_state(states["cuda"], device)
    if "numpy" in states:
        import numpy
        numpy.random.set_state(states["numpy"])


# ---- precision -------------------------------------------------------------------------------------

def _has_new_precision_api():
    try:  # torch 1.x's matmul object raises AssertionError for unknown attributes
        return "fp32_precision" in dir(torch.backends.cuda.matmul) or \
            getattr(torch.backends.cuda.matmul, "fp32_precision", None) is not None
    except Exception:
        return False


def _backend_parts():
    """(new-API object or None, legacy object, legacy attribute) for matmul and for cuDNN conv."""
    new_ok = _has_new_precision_api()
    mm_new = torch.backends.cuda.matmul if new_ok else None
    conv_new = getattr(getattr(torch.backends.cudnn, "conv", None), "fp32_precision", None) if new_ok else None
    conv_new = torch.backends.cudnn.conv if conv_new is not None else None
    return ((mm_new, torch.backends.cuda.matmul, "allow_tf32"),
            (conv_new, torch.backends.cudnn, "allow_tf32"))


def set_tf32(on):
    """TF32 for matmul and cuDNN. torch >= 2.9 has fp32_precision (mixing it with the legacy
    allow_tf32 flags is discouraged there), older versions only the legacy flags."""
    for new, legacy, attr in _backend_parts():
        if new is not None:
            try:
                new.fp32_precision = "tf32" if on else "ieee"
                continue
            except Exception:
                pass
        setattr(legacy, attr, bool(on))
    if _has_new_precision_api():
        try:
            torch.backends.cudnn.rnn.fp32_precision = "tf32" if on else "ieee"
        except Exception:
            pass


def get_tf32():
    res = []
    for new, legacy, attr in _backend_parts():
        if new is not None:
            try:
                res.append(new.fp32_precision == "tf32")
                continue
            except Exception:
                pass
        res.append(bool(getattr(legacy, attr)))
    return tuple(res)


_AUTOCAST = {"fp16": torch.float16, "bf16": torch.bfloat16}
_current_autocast = [None]


def precision_record():
    mm, cd = get_tf32()
    ac = _current_autocast[0]
    name = ac or ("tf32" if (mm or cd) else "fp32")
    return {"name": name, "matmul_tf32": mm, "cudnn_tf32": cd, "autocast": ac}


@contextlib.contextmanager
def precision(mode, device):
    """fp32 (TF32 off), tf32 (TF32 on), fp16/bf16 (autocast, TF32 off). Restored to fp32 after."""
    if mode not in ("fp32", "tf32", "fp16", "bf16"):
        raise ValueError("precision must be fp32, tf32, fp16 or bf16, not %r" % (mode,))
    set_tf32(mode == "tf32")
    ctx = contextlib.nullcontext() if hasattr(contextlib, "nullcontext") else contextlib.suppress()
    if mode in _AUTOCAST:
        dev_type = "cuda" if str(device).startswith("cuda") else "cpu"
        ctx = torch.autocast(device_type=dev_type, dtype=_AUTOCAST[mode])
        _current_autocast[0] = mode
    try:
        with ctx:
            yield
    finally:
        _current_autocast[0] = None
        set_tf32(False)


# ---- input distributions ---------------------------------------------------------------------------

def _describe_call(fname, args, kwargs):
    ints = [a for a in args if isinstance(a, int) and not isinstance(a, bool)]
    if fname in ("randn", "randn_like"):
        return {"kind": "normal", "mean": 0.0, "std": 1.0}
    if fname in ("rand", "rand_like"):
        return {"kind": "uniform", "low": 0.0, "high": 1.0}
    if fname in ("randint", "randint_like"):
        # randint(high, size) | randint(low, high, size); randint_like(t, high) | (t, low, high)
        low, high = (ints[0], ints[1]) if len(ints) >= 2 else (0, ints[0] if ints else None)
        return {"kind": "randint", "low": kwargs.get("low", low), "high": kwargs.get("high", high)}
    if fname == "randperm":
        return {"kind": "randperm"}
    if fname in ("ones", "ones_like"):
        return {"kind": "constant", "value": 1}
    if fname in ("zeros", "zeros_like"):
        return {"kind": "constant", "value": 0}
    if fname in ("full", "full_like"):
        v = args[1] if len(args) > 1 else kwargs.get("fill_value")
        return {"kind": "constant", "value": v if isinstance(v, (int, float)) else None}
    if fname == "uniform_":
        low = args[0] if len(args) > 0 else kwargs.get("from", kwargs.get("a", 0.0))
        high = args[1] if len(args) > 1 else kwargs.get("to", kwargs.get("b", 1.0))
        return {"kind": "uniform", "low": float(low), "high": float(high)}
    if fname == "normal_":
        mean = args[0] if len(args) > 0 else kwargs.get("mean", 0.0)
        std = args[1] if len(args) > 1 else kwargs.get("std", 1.0)
        return {"kind": "normal", "mean": float(mean), "std": float(std)}
    return {"kind": "derived"}


_TRACKED_TORCH = ("randn", "rand", "randint", "randn_like", "rand_like", "randint_like", "randperm",
                  "ones", "zeros", "full", "ones_like", "zeros_like", "full_like")
_TRACKED_TENSOR = ("uniform_", "normal_")


def _warm_device_constructors():
    """torch's default-device mode (`with torch.device(...)`) knows its factories from a list it
    caches on first use (torch.utils._device._device_constructors). Made while track_distributions
    has replaced them, it would hold the wrappers, miss the real factories, and every draw of a task
    without parameters (nothing built under the mode before its first get_inputs) would run on the
    CPU and be copied: 56 ms for one 32 MiB input on the H200, where the GPU takes microseconds."""
    try:
        from torch.utils import _device
        getattr(_device, "_device_constructors", lambda: None)()
    except ImportError:  # torch 1.x: no default-device mode
        pass


@contextlib.contextmanager
def track_distributions(made, device=None):
    """Wraps the torch factories so each tensor get_inputs returns can be traced to its draw.
    `made` maps id(tensor) -> (tensor, description); tensors are held so ids stay unique. With
    `device`, the wrapped factories that take a size draw there unless the call names a device (as
    the default-device mode would; said explicitly so it holds whatever that mode caches)."""
    _warm_device_constructors()
    saved = []

    def wrap(owner, fname):
        orig = getattr(owner, fname)
        sized = owner is torch and not fname.endswith("_like")

        def wrapper(*args, **kwargs):
            if device is not None and sized and kwargs.get("device") is None:
                kwargs["device"] = device
            out = orig(*args, **kwargs)
            if isinstance(out, torch.Tensor):
                made[id(out)] = (out, _describe_call(fname, args[1:] if owner is torch.Tensor else args, kwargs))
            return out
        wrapper.__name__ = fname
        saved.append((owner, fname, orig))
        setattr(owner, fname, wrapper)

    for f in _TRACKED_TORCH:
        if hasattr(torch, f):
            wrap(torch, f)
    for f in _TRACKED_TENSOR:
        wrap(torch.Tensor, f)
    try:
        yield
    finally:
        for owner, fname, orig in reversed(saved):
            setattr(owner, fname, orig)


def _finite(x):
    x = float(x)
    return x if math.isfinite(x) else None


def tensor_stats(t):
    if t.numel() == 0:
        return {}
    d = t.detach()
    if d.dtype == torch.bool:
        return {"mean": _finite(d.double().mean())}
    d = d.double()
    s = {"min": _finite(d.min()), "max": _finite(d.max()), "mean": _finite(d.mean())}
    s["std"] = _finite(d.std()) if d.numel() > 1 else 0.0
    return s


def _jsonable(v):
    if isinstance(v, (bool, int, str)) or v is None:
        return v
    if isinstance(v, float):
        return v if math.isfinite(v) else None
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    if isinstance(v, dict):
        return {str(k): _jsonable(x) for k, x in v.items()}
    if isinstance(v, torch.Tensor) and v.numel() == 1:
        return _jsonable(v.item())
    return repr(v)


def tensor_spec(t):
    return {"shape": list(t.shape), "dtype": safetensors_io.dtype_name(t.dtype)}


def flatten_outputs(out):
    """A tensor -> [it]; tuples/lists/dicts flattened in order; Python numbers -> 0-d tensors."""
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, (tuple, list)):
        res = []
        for o in out:
            res.extend(flatten_outputs(o))
        return res
    if isinstance(out, dict):
        return flatten_outputs([out[k] for k in out])
    if isinstance(out, (bool, int, float)):
        return [torch.tensor(out)]
    if out is None:
        return []
    raise TaskError("forward", "forward returned a %s, not tensors" % type(out).__name__)


# ---- a loaded task ---------------------------------------------------------------------------------

# The modes a reference can run in. "train" is KernelBench's (its harness never calls eval()):
# BatchNorm normalizes with the batch's own statistics, dropout is live. "eval": running statistics,
# dropout off. A task record states its mode (`reference.mode`); the default is train.
MODES = ("train", "eval")


def reference_mode(req):
    """The mode a load or filters request asks for: `"mode"` ("train", the default, or "eval"); the
    older `"eval": true` means "eval". Anything else is a bad request naming the field."""
    mode = req.get("mode")
    legacy = req.get("eval")
    if legacy is not None and not isinstance(legacy, bool):
        raise ValueError("field 'eval' is not a boolean: %r" % (legacy,))
    if mode is None:
        return "eval" if legacy else "train"
    if mode not in MODES:
        raise ValueError("field 'mode' is %r, not a reference mode (train, as KernelBench runs models, or eval)"
                         % (mode,))
    if legacy is not None and legacy != (mode == "eval"):
        raise ValueError("fields 'mode' (%s) and 'eval' (%s) disagree" % (mode, legacy))
    return mode


class Task(object):
    def __init__(self, task_id, code, device, work_dir, init_inputs=None, init_seed=0, mode="train",
                 keep_inputs=False, build_on_device=False):
        if mode not in MODES:
            raise ValueError("mode %r is not a reference mode %s" % (mode, MODES))
        self.task_id = str(task_id)
        self.code = code
        self.device = torch.device(device)
        # build_on_device: the model is built and the inputs drawn with the task's device as torch's
        # default (torch >= 2.0), not on the CPU and then copied: much faster for gigabyte inputs, but
        # the values differ from a CPU draw of the same seed, so only the filters op asks for it.
        self.build_on_device = (build_on_device and self.device.type != "cpu"
                                and hasattr(torch, "set_default_device"))
        self.compiled = {}
        self.module = self._exec(code, work_dir)
        for name in ("Model", "get_inputs"):
            if not hasattr(self.module, name):
                raise TaskError("exec", "the code defines no %s (KernelBench format: class Model, "
                                        "get_inputs(), get_init_inputs())" % name)
        seed_all(init_seed)
        if init_inputs is None:
            if hasattr(self.module, "get_init_inputs"):
                with stage("get_init_inputs"):
                    init_inputs = self.module.get_init_inputs()
            else:
                init_inputs = []
        if not isinstance(init_inputs, (list, tuple)):
            init_inputs = [init_inputs]
        self.init_inputs = list(init_inputs)
        # Every build starts from the same generator states: the CPU retry of a device build draws
        # what a CPU-only build would, and rebuild() makes the same model (plain tensor attributes
        # that are not state, as 33_VanillaRNN's self.hidden = torch.randn(...), included).
        init_rng = rng_states(self.device)

        def build(device):  # the default-device mode places what Model builds
            set_rng_states(init_rng, self.device)
            return self.module.Model(*self.init_inputs)
        self._build = build
        with stage("init"):
            self.model = self._built(build)
            if not isinstance(self.model, torch.nn.Module):
                raise TaskError("init", "Model(...) is a %s, not a torch.nn.Module" % type(self.model).__name__)
            self.model = self.model.to(self.device)
            if mode == "eval":
                self.model.eval()
        # The mode it runs in, as the module says: train is the model as built (as KernelBench runs
        # it: training unless its own code calls eval()), so the answer states what ran, not what was
        # asked.
        self.mode = "train" if self.model.training else "eval"
        self.initial_state = {k: v.detach().clone() for k, v in self.model.state_dict().items()}
        # Module buffers (running statistics, registered masks) as opposed to Parameters: said in the
        # load answer's params ("buffer": true), so a plan that never reads them is not told it forgot them.
        self.buffer_names = {k for k, _ in self.model.named_buffers()}
        self.input_names = self._forward_names()
        inputs, self.input_specs = self.make_inputs(0, on_device=True)
        # Stochastic (live dropout: KernelBench runs models in training mode) when another RNG state
        # gives other outputs on the same inputs: flagged, so judges apply their rule for it.
        from . import numerics
        outs, self.stochastic = numerics.detect_stochastic(self, inputs)
        self.peak_bytes = self._peak_bytes(inputs)
        self._model64 = self._state64 = None  # the float64 copy, made when a calibration asks
        # References no verdict can use (numerics): outputs a constant would match (another draw and a
        # variant within the published bound), and a reference whose own fp32 error against float64 is
        # over the cap of every bound. Judges have a rule for each (kernel-check: task_insensitive,
        # task_ill_conditioned; ops-synth filter drops them).
        self.sensitivity, inputs1, outs1 = self._sensitivity(inputs, outs, keep_inputs)
        # Per output, the part of its norm the inputs move (the floor of every calibrated bound is
        # relative to it): from the two plain draws just compared, before the float64 run calibrates.
        self.varying = numerics.varying_fractions(self.sensitivity)
        self.conditioning = numerics.detect_ill_conditioned(self, inputs, outs, self.stochastic["stochastic"])
        self.sensitivity = numerics.insensitive_on_own_draws(self.sensitivity, self.conditioning)
        # keep_inputs: the seed-0 draw (and seed 1's, with its outputs) stays on the device for one
        # taker (the filters op), which saves drawing gigabytes again on the CPU. It has been through
        # one forward already.
        self.load_inputs = inputs if keep_inputs else None
        self.load_seed1 = (inputs1, outs1) if keep_inputs and inputs1 is not None else None
        self.output_specs = [dict(index=i, **tensor_spec(o)) for i, o in enumerate(outs)]

    def _sensitivity(self, inputs, outs, keep_seed1):
        """numerics.detect_insensitive's (evidence, seed-1 inputs, their outputs); the evidence says
        why there is no measure when the task's code raised, or memory ran out outside it (the
        seed-1 draw's copy to the device, a variant's temporaries, the comparison): the load is not
        lost with it (as detect_ill_conditioned answers a float64 run that ran out of memory)."""
        from . import numerics
        try:
            return numerics.detect_insensitive(self, inputs, outs, keep_seed1=keep_seed1)
        except TaskError as e:
            return {"insensitive": None, "error": "%s: %s" % (e.stage, e.detail)}, None, None
        except (RuntimeError, MemoryError) as e:
            text = str(e).splitlines()[0][:300] if str(e) else ""
            return {"insensitive": None, "error": "%s: %s" % (type(e).__name__, text)}, None, None

    def _peak_bytes(self, inputs):
        """The reference's peak memory (peak.py) in one more forward run as the judge runs it (from the
        load-time state, no_grad, fp32, the task's mode), on a copy of the inputs made before it starts,
        after the runs that paid the one-time allocations (cuBLAS's workspace): kernel-check's scratch
        cap follows it. None when nothing could measure it (the reference itself ran three times
        already, so a failure here is the counter's)."""
        from . import numerics, peak
        copy = numerics._clone_inputs(inputs)
        try:
            return peak.measure_peak(lambda: self.forward(copy), self.device)[0]
        except Exception as e:  # the counter's fault, not the task's: the judge keeps the io floor
            sys.stderr.write("cuda_agent_worker: task %s: peak memory not measured (%s: %s)\n"
                             % (self.task_id, type(e).__name__, str(e)[:200]))
            return None

    def _exec(self, code, work_dir):
        digest = hashlib.sha1(code.encode("utf-8")).hexdigest()[:12]
        safe_id = "".join(c if c.isalnum() else "_" for c in self.task_id)[:48]
        modname = "cuda_agent_task_%s_%s" % (safe_id, digest)
        # A real file, so inspect/linecache (tracebacks, torch.compile) can read the source.
        path = os.path.join(work_dir, modname + ".py")
        with open(path, "w") as f:
            f.write(code)
        mod = types.ModuleType(modname)
        mod.__file__ = path
        sys.modules[modname] = mod
        self.modname = modname
        with stage("exec"):
            exec(compile(code, path, "exec"), mod.__dict__)
        return mod

    def _built(self, make):
        """make(device) with the task's device as the default one when build_on_device; if it raises
        there (code that calls .numpy(), a CPU generator, ...), make(None) on the CPU, and the CPU
        from then on. make seeds what it draws, so the retry draws what a CPU-only task would."""
        if self.build_on_device:
            _warm_device_constructors()
            try:
                with self.device:
                    return make(self.device)
            except Exception:
                self.build_on_device = False
        return make(None)

    def _forward_names(self):
        try:
            params = list(inspect.signature(self.model.forward).parameters.values())
        except (TypeError, ValueError):
            return []
        return [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]

    def make_inputs(self, seed, stats=True, on_device=False, stream=0):
        """Values for a seed and their specs. get_inputs runs where it puts them (the CPU, as a rule),
        so every device sees the same values, unless build_on_device (see __init__). on_device moves
        them to the task's device first. stream=k: the draw after k discarded ones (the same seed,
        later in the generator's stream: the seed_stream variant). The
        stats (four passes over what may be gigabytes) are computed on the task's device, and left
        out with stats=False, for draws whose specs nobody reads."""
        made = {}

        def draw(device=None):
            seed_all(seed)
            made.clear()
            with stage("get_inputs"):
                with track_distributions(made, device):
                    for _ in range(stream):
                        self.module.get_inputs()
                        made.clear()
                    return self.module.get_inputs()
        values = self._built(draw)
        if not isinstance(values, (list, tuple)):
            values = [values]
        values = list(values)
        moved = self.to_device(values) if on_device or (stats and self.device.type != "cpu") else values
        specs = []
        for i, v in enumerate(values):
            name = self.input_names[i] if i < len(self.input_names) else "input%d" % i
            if isinstance(v, torch.Tensor):
                hit = made.get(id(v))
                dist = dict(hit[1]) if hit is not None and hit[0] is v else {"kind": "derived"}
                if stats:
                    dist["stats"] = tensor_stats(moved[i])
                specs.append(dict(index=i, name=name, distribution=dist, **tensor_spec(v)))
            else:
                specs.append({"index": i, "name": name, "shape": None, "dtype": type(v).__name__,
                              "distribution": {"kind": "scalar", "value": _jsonable(v)}})
        return (moved if on_device else values), specs

    def to_device(self, values):
        return [v.to(self.device) if isinstance(v, torch.Tensor) else v for v in values]

    def restore(self):
        self.model.load_state_dict(self.initial_state)

    def rebuild(self):
        """A second instance of the model, built by the task's code as at load and given the
        load-time state: independent by construction. A deep copy is not: it copies the module tree
        but shares what the model holds beside it (a lambda over a submodule, as minGPT's
        `self.mlpf = lambda x: m.dropout(m.c_proj(...))`), so the copy would run the original's layers.
        The generators start where the load's build started (so it draws what that one drew) and
        are left as they were."""
        saved = rng_states(self.device)
        try:
            m = self._built(self._build)
        finally:
            set_rng_states(saved, self.device)
        m = m.to(self.device)
        m.load_state_dict(self.initial_state)
        if not self.model.training:
            m.eval()
        return m

    def forward(self, inputs, fn=None, prec="fp32"):
        """Outputs (flattened) of one call on device inputs, from the load-time state."""
        self.restore()
        with stage("forward"):
            with precision(prec, self.device), torch.no_grad():
                # `fn or model` would call bool() on an OptimizedModule, which forwards len() and raises.
                out = (fn if fn is not None else self.model)(*inputs)
            outs = [o.detach() for o in flatten_outputs(out)]
        return outs

    def compiled_model(self, mode):
        """torch.compile of the model, cached per mode ("default" or "max-autotune")."""
        if not hasattr(torch, "compile"):
            raise RuntimeError("torch %s has no torch.compile" % torch.__version__)
        if mode not in self.compiled:
            self.compiled[mode] = torch.compile(self.model, mode=None if mode == "default" else mode)
        return self.compiled[mode]

    def load_answer(self):
        return {
            "task_id": self.task_id,
            "mode": self.mode,
            "inputs": self.input_specs,
            "init_inputs": _jsonable(self.init_inputs),
            "params": [dict(name=k, **tensor_spec(v), **({"buffer": True} if k in self.buffer_names else {}))
                       for k, v in self.initial_state.items()],
            "outputs": self.output_specs,
            "stochastic": self.stochastic["stochastic"],
            "stochastic_evidence": {k: v for k, v in self.stochastic.items() if k != "stochastic"},
            "insensitive": self.sensitivity["insensitive"],
            "insensitive_evidence": {k: v for k, v in self.sensitivity.items() if k != "insensitive"},
            "ill_conditioned": self.conditioning["ill_conditioned"],
            "ill_conditioned_evidence": {k: v for k, v in self.conditioning.items() if k != "ill_conditioned"},
            "peak_bytes": self.peak_bytes,
        }

    def drop(self):
        self._model64 = self._state64 = None
        sys.modules.pop(self.modname, None)


def write_inputs(path, values):
    tensors, meta = {}, {}
    for i, v in enumerate(values):
        if isinstance(v, torch.Tensor):
            tensors["inputs.%d" % i] = v
        else:
            import json
            meta["inputs.%d" % i] = json.dumps(_jsonable(v))
    safetensors_io.write(path, tensors, meta)


def read_inputs(path):
    import json
    tensors, meta = safetensors_io.read(path)
    values = {}
    for k, t in tensors.items():
        if k.startswith("inputs."):
            values[int(k.split(".", 1)[1])] = t
    for k, v in meta.items():
        if k.startswith("inputs."):
            values[int(k.split(".", 1)[1])] = json.loads(v)
    n = len(values)
    if sorted(values) != list(range(n)):
        raise ValueError("%s: inputs are not numbered inputs.0..inputs.%d" % (path, n - 1))
    return [values[i] for i in range(n)]

"""The worker's request loop: JSON Lines in on stdin, answers out on a private copy of stdout,
task code confined (confine.py) and under CPU-time and memory limits. See PROTOCOL.md."""
import time
import argparse
import hashlib
import json
import math
import os
import platform
import resource
import shutil
import sys
import tempfile
import traceback

PROTOCOL_OUT = None  # the real stdout, set by _split_output()


def emit(obj):
    PROTOCOL_OUT.write(json.dumps(_clean(obj), allow_nan=False, separators=(",", ":")) + "\n")
    PROTOCOL_OUT.flush()


def _clean(v):
    if isinstance(v, float):
        return v if math.isfinite(v) else None
    if isinstance(v, dict):
        return {str(k): _clean(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_clean(x) for x in v]
    return v


class BadRequest(Exception):
    pass


class NoDevice(Exception):
    pass


class Unsupported(Exception):
    pass


class UnknownTask(Exception):
    pass


def need(req, key, kind=None):
    if key not in req:
        raise BadRequest("'%s' needs field '%s'" % (req.get("op"), key))
    v = req[key]
    if kind is not None and not isinstance(v, kind):
        raise BadRequest("'%s': field '%s' has the wrong type" % (req.get("op"), key))
    return v


class Worker(object):
    def __init__(self, torch, device, work_dir, cpu_seconds):
        from . import tasks
        self.torch = torch
        self.tasks_mod = tasks
        self.device = device
        self.work_dir = work_dir
        self.cpu_seconds = cpu_seconds
        self.tasks = {}
        self._kept = None
        tasks.set_tf32(False)  # the reference precision; every op restores it
        if hasattr(torch, "set_float32_matmul_precision") and not tasks._has_new_precision_api():
            torch.set_float32_matmul_precision("highest")

    # -- framing ---------------------------------------------------------------------------------
    def hello(self):
        torch = self.torch
        h = {"ok": True, "op": "hello", "pid": os.getpid(), "torch_version": torch.__version__,
             "python": platform.python_version(), "device": self.device,
             "compile_available": hasattr(torch, "compile"), "cuda": torch.version.cuda}
        if self.device.startswith("cuda"):
            h["device_name"] = torch.cuda.get_device_name(torch.device(self.device))
            props = torch.cuda.get_device_properties(torch.device(self.device))
            h["sm"] = "%d%d" % (props.major, props.minor)
            h["l2_bytes"] = getattr(props, "L2_cache_size", None)
        else:
            h["device_name"] = platform.processor() or platform.machine()
        return h

    def give_back_cache(self, low=0.25, idle_bytes=1 << 30):
        """Workers sharing a GPU hold cached memory the others may need: after a request, a cache
        of more than `idle_bytes` unused (or any, when less than `low` of the device is free) goes
        back to the driver, so what the client's admission sees in use is in use."""
        torch = self.torch
        try:
            idle = torch.cuda.memory_reserved() - torch.cuda.memory_allocated()
            if idle <= 0:
                return
            free, total = torch.cuda.mem_get_info()
        except Exception:
            return
        if idle > idle_bytes or free < low * total:
            torch.cuda.empty_cache()

    def base(self, req):
        return {"ok": True, "id": req.get("id"), "op": req.get("op"),
                "torch_version": self.torch.__version__, "device": self.device,
                "precision": self.tasks_mod.precision_record()}

    def limit_cpu(self):
        """This request may use cpu_seconds more CPU time (all threads); then SIGXCPU ends us."""
        if self.cpu_seconds <= 0:
            return
        from .confine import lower_rlimit
        ru = resource.getrusage(resource.RUSAGE_SELF)
        lower_rlimit(resource.RLIMIT_CPU, int(math.ceil(ru.ru_utime + ru.ru_stime + self.cpu_seconds)))

    def handle(self, req):
        op = req.get("op")
        fn = getattr(self, "op_" + str(op).replace("-", "_"), None) if isinstance(op, str) else None
        if fn is None:
            raise BadRequest("unknown op %r (load, inputs, reference, release, time, warm, filters, similarity, ping, unload)" % (op,))
        self.limit_cpu()
        ans = self.base(req)
        ans.update(fn(req))
        return ans

    # -- ops ---------------------------------------------------------------------------------------
    def task(self, req):
        tid = str(need(req, "task_id"))
        if tid not in self.tasks:
            raise UnknownTask("task %s is not loaded in this worker (send 'load' first)" % tid)
        return self.tasks[tid]

    def load(self, task_id, code, init_inputs=None, init_seed=0, mode="train", keep_inputs=False,
             build_on_device=False):
        old = self.tasks.pop(task_id, None)
        if old is not None:
            old.drop()
        t = self.tasks_mod.Task(task_id, code, self.device, self.work_dir, init_inputs=init_inputs,
                                init_seed=init_seed, mode=mode, keep_inputs=keep_inputs,
                                build_on_device=build_on_device)
        self.tasks[task_id] = t
        return t

    def op_ping(self, req):
        h = self.hello()
        h.pop("ok")
        h.pop("op")
        return h

    def op_load(self, req):
        # On a GPU the model is built and the inputs drawn on the device (gigabyte KernelBench inputs
        # in milliseconds, and no host copy of them); "build_on_device": false draws on the CPU.
        on_device = bool(req.get("build_on_device", self.device.startswith("cuda")))
        t = self.load(str(need(req, "task_id")), need(req, "code", str), req.get("init_inputs"),
                      int(req.get("init_seed", 0)), self.tasks_mod.reference_mode(req), build_on_device=on_device)
        return t.load_answer()

    def op_unload(self, req):
        t = self.tasks.pop(str(need(req, "task_id")), None)
        if t is not None:
            t.drop()
        return {"unloaded": t is not None}

    def kept(self):
        """The device tensors kept by key (CUDA IPC): GPU workers only."""
        if not self.device.startswith("cuda"):
            raise BadRequest("device tensors ('keep', 'inputs_key') need a CUDA worker (this one runs on %s)" % self.device)
        if self._kept is None:
            from . import device_tensors
            self._kept = device_tensors.Kept()
        return self._kept

    def op_inputs(self, req):
        t = self.task(req)
        seed = need(req, "seed", int)
        out, keep = req.get("out"), req.get("keep")
        if out is None and keep is None:
            raise BadRequest("'inputs' needs field 'out' (a file) or 'keep' (a key for device tensors)")
        if out is not None and not isinstance(out, str):
            raise BadRequest("'inputs': field 'out' has the wrong type")
        # "stats": false (kernel-prof's fresh set per timed call): no statistics, four passes over
        # what may be gigabytes, for a draw whose specs nobody reads. (A GPU worker draws on the
        # device already: build_on_device, the load's default.)
        stats = bool(req.get("stats", True))
        variant = req.get("variant")
        if variant is not None and variant != "plain":
            from . import numerics
            if variant not in numerics.VARIANTS:
                raise BadRequest("'inputs': field 'variant' must be plain, %s, not %r"
                                 % (", ".join(numerics.VARIANTS), variant))
        else:
            variant = None

        def draw(stream=0):
            return t.make_inputs(seed, stats=stats, on_device=keep is not None, stream=stream)
        varied = None
        if variant == "seed_stream":
            values, specs = draw(1)
            varied = {"asked": variant, "applied": variant, "tried": []}
        else:
            values, specs = draw()
            if variant is not None:
                # Transformed after get_inputs; a milder variant when the reference stops being finite.
                redrawn = []

                def redraw():
                    v, sp = draw(1)
                    redrawn.append(sp)
                    return v
                values, varied = numerics.vary(t, values, variant, seed, redraw)
                if redrawn:
                    specs = redrawn[0]
        ans = {"task_id": t.task_id, "seed": seed, "inputs": specs}
        if varied is not None:
            ans["variant"] = varied
        if out is not None:
            self.tasks_mod.write_inputs(out, values)
            ans["out"] = out
        if keep is not None:
            tensors = {"inputs.%d" % i: v for i, v in enumerate(values) if isinstance(v, self.torch.Tensor)}
            scalars = {"inputs.%d" % i: v for i, v in enumerate(values) if not isinstance(v, self.torch.Tensor)}
            ans["keep"] = keep
            ans["tensors"] = self.kept().put(keep, t.device, tensors, scalars)
        return ans

    def op_reference(self, req):
        from . import safetensors_io
        t = self.task(req)
        out, keep = req.get("out"), req.get("keep")
        if out is None and keep is None:
            raise BadRequest("'reference' needs field 'out' (a file) or 'keep' (a key for device tensors)")
        if "inputs_key" in req:
            try:
                entry = self.kept().get(str(req["inputs_key"]))
            except KeyError as e:
                raise BadRequest(str(e.args[0]))
            values = dict(entry["tensors"])
            values.update(entry["scalars"])
            n = len(values)
            # A clone: task code that works in place (relu_) must not change what the judge passes on.
            inputs = [values["inputs.%d" % i].clone() if isinstance(values["inputs.%d" % i], self.torch.Tensor)
                      else values["inputs.%d" % i] for i in range(n)]
        else:
            inputs = self.tasks_mod.read_inputs(need(req, "inputs", str))
        calibrate = req.get("calibrate")
        pristine = None
        if calibrate is not None:
            from . import numerics
            if calibrate not in numerics.CALIBRATE_REFERENCE:
                raise BadRequest("'reference': field 'calibrate' must be one of %s, not %r"
                                 % (", ".join(sorted(numerics.CALIBRATE_REFERENCE)), calibrate))
            # The calibration's runs start from the inputs as they were (forward may work in place).
            pristine = ([entry["tensors"].get("inputs.%d" % i, entry["scalars"].get("inputs.%d" % i))
                         for i in range(len(inputs))] if "inputs_key" in req
                        else [v.clone() if isinstance(v, self.torch.Tensor) else v for v in inputs])
        dev_inputs = t.to_device(inputs)
        # forward_ms: the reference's own time on these inputs, the scale kernel-check's watchdog
        # is set from.
        started = time.perf_counter()
        outs = t.forward(dev_inputs)
        if t.device.type == "cuda":
            self.torch.cuda.synchronize(t.device)
        forward_ms = (time.perf_counter() - started) * 1e3
        del dev_inputs, inputs
        named = {"outputs.%d" % i: o for i, o in enumerate(outs)}
        ans = {"task_id": t.task_id, "forward_ms": forward_ms, "stochastic": t.stochastic["stochastic"],
               "outputs": [dict(index=i, **self.tasks_mod.tensor_spec(o)) for i, o in enumerate(outs)]}
        if calibrate is not None:
            ans["calibration"], why = self._calibration(t, pristine, outs, calibrate, req)
            if why:
                ans["calibration_error"] = why
            del pristine
        if out is not None:
            if not isinstance(out, str):
                raise BadRequest("'reference': field 'out' has the wrong type")
            safetensors_io.write(out, named)
            ans["out"] = out
        if keep is not None:
            ans["keep"] = keep
            ans["tensors"] = self.kept().put(keep, t.device, named)
        if req.get("params_out"):
            safetensors_io.write(req["params_out"], {"params." + k: v for k, v in t.initial_state.items()})
            ans["params_out"] = req["params_out"]
        if req.get("params_keep"):
            ans["params_keep"] = req["params_keep"]
            ans["params"] = self.kept().put(str(req["params_keep"]), t.device,
                                            {"params." + k: v for k, v in t.initial_state.items()})
        return ans

    def _calibration(self, t, inputs, outs, claim, req):
        """The reference's calibration (numerics.calibrate) and, when there is none, why: a stochastic
        reference has no error of its own to measure, and code that cannot run in float64 (or at the
        claimed precision) has none either. The client then judges by the published bound."""
        from . import numerics
        if t.stochastic["stochastic"]:
            return {}, "the reference is stochastic (another RNG state gives other outputs): no calibration"
        for key in ("calibrate_k", "calibrate_floor", "calibrate_floor_min"):
            if key in req and (not isinstance(req[key], (int, float)) or isinstance(req[key], bool) or req[key] < 0):
                raise BadRequest("'reference': field '%s' must be a number >= 0" % key)
        try:
            return numerics.calibrate(t, t.to_device(inputs), outs, claim, req.get("calibrate_k"),
                                      req.get("calibrate_floor"), req.get("calibrate_floor_min")), None
        except self.tasks_mod.TaskError as e:
            return {}, "%s: %s" % (e.stage, e.detail)
        except RuntimeError as e:  # out of memory for the float64 copy, an op without a float64 kernel
            return {}, "calibrate: %s: %s" % (type(e).__name__, str(e).splitlines()[0][:300] if str(e) else "")

    def op_release(self, req):
        keys = need(req, "keys", list)
        kept = self.kept()
        n = kept.release([str(k) for k in keys])
        if req.get("empty_cache"):
            self.torch.cuda.empty_cache()
        return {"released": n, "kept_bytes": kept.bytes()}

    def op_time(self, req):
        from . import timing
        t = self.task(req)
        if t.device.type != "cuda" and not req.get("allow_cpu"):
            raise NoDevice("'time' needs a GPU (this worker runs on %s)" % self.device)
        mode = req.get("mode", "eager")
        if mode != "eager" and not hasattr(self.torch, "compile"):
            raise Unsupported("torch %s has no torch.compile" % self.torch.__version__)
        try:
            ans = timing.time_task(t, req)
        except ValueError as e:
            raise BadRequest(str(e))
        ans["task_id"] = t.task_id
        # The precision the numbers were taken under (the common record shows the restored fp32).
        prec = ans.pop("precision")
        ans["precision"] = {"name": prec, "matmul_tf32": prec == "tf32", "cudnn_tf32": prec == "tf32",
                            "autocast": prec if prec in ("fp16", "bf16") else None}
        return ans

    def op_warm(self, req):
        """The one-time costs of the first timing, paid now: torch.profiler's first session (CUPTI
        starts: seconds) and, with "compile" (default true), torch.compile's first compile (inductor
        and Triton imported and started). A client sends it while it has nothing else to do."""
        from . import timing
        torch = self.torch
        warmed = {}
        if self.device.startswith("cuda"):
            t0 = time.perf_counter()
            x = torch.ones(64, 64, device=self.device)
            timing.profiled_device_times(lambda a: a @ a, [(x,)], None, 2)
            warmed["profiler_s"] = round(time.perf_counter() - t0, 3)
            if req.get("compile", True) and hasattr(torch, "compile"):
                t0 = time.perf_counter()
                fn = torch.compile(lambda a: torch.relu(a) + 1.0)
                fn(x)
                torch.cuda.synchronize()
                warmed["compile_s"] = round(time.perf_counter() - t0, 3)
        return {"warmed": warmed}

    def op_filters(self, req):
        from . import filters
        return filters.run(self, req)

    def op_similarity(self, req):
        from . import similarity
        try:
            return similarity.run(req)
        except (ValueError, SyntaxError, OSError) as e:
            raise BadRequest("similarity: %s" % e)


def _error(req_id, op, kind, detail, **extra):
    ans = {"ok": False, "id": req_id, "op": op, "error": kind, "detail": detail}
    ans.update(extra)
    return ans


def serve(worker, stdin):
    from .tasks import TaskError
    for line in stdin:
        line = line.strip()
        if not line:
            continue
        try:
            req = json.loads(line)
            if not isinstance(req, dict):
                raise ValueError("not an object")
        except ValueError as e:
            emit(_error(None, None, "bad_request", "request is not a JSON object: %s" % e))
            continue
        rid, op = req.get("id"), req.get("op")
        try:
            ans = worker.handle(req)
        except TaskError as e:
            ans = _error(rid, op, "task_error", e.detail, stage=e.stage, traceback=e.traceback,
                         task_id=req.get("task_id"))
        except BadRequest as e:
            ans = _error(rid, op, "bad_request", str(e))
        except UnknownTask as e:
            ans = _error(rid, op, "unknown_task", str(e), task_id=req.get("task_id"))
        except NoDevice as e:
            ans = _error(rid, op, "no_device", str(e))
        except Unsupported as e:
            ans = _error(rid, op, "unsupported", str(e))
        except MemoryError:
            ans = _error(rid, op, "task_error", "MemoryError", stage="unknown")
        except (OSError, ValueError) as e:  # unreadable input files and the like
            ans = _error(rid, op, "bad_request", "%s: %s" % (type(e).__name__, e))
        except Exception as e:
            ans = _error(rid, op, "internal", "%s: %s" % (type(e).__name__, e),
                         traceback="\n".join(traceback.format_exc().splitlines()[-12:]))
        emit(ans)
        if worker.device.startswith("cuda"):
            worker.give_back_cache()
        if worker.device.startswith("cuda") and not ans.get("ok"):
            # A failed task may leave the CUDA context poisoned (illegal address): check it, so the
            # next request does not fail for this one's sake.
            try:
                worker.torch.cuda.synchronize()
            except Exception as e:
                sys.stderr.write("cuda_agent_worker: CUDA context broken (%s); exiting\n" % e)
                sys.stderr.flush()
                os._exit(70)


def watch_parent(work_dir, parent=None):
    """A worker outlives nothing: when the tool that started it is gone (kill -9 leaves no one to
    stop it, and a busy worker never reads the EOF on its stdin), it removes the tool's private
    work dir it was given and kills its own process group (itself and whatever task code started:
    the confinement keeps those in the group), within a second, whatever it was computing (GPU
    memory included). Started after the confinement, so it is confined too; `parent` is the pid the
    client gave, so a parent gone during the start is noticed as well."""
    import signal
    import threading
    parent = parent or os.getppid()
    sleep, getppid, rmtree, killpg, exit_ = time.sleep, os.getppid, shutil.rmtree, os.killpg, os._exit
    ours = bool(work_dir) and os.path.basename(work_dir.rstrip("/")).startswith("cuda-agent")

    def watch():
        while True:
            if getppid() != parent:
                sleep(1.5)  # the reaper (start_reaper) removes the folder and ends the group first
                if ours:
                    rmtree(work_dir, ignore_errors=True)
                try:
                    killpg(0, signal.SIGKILL)
                finally:
                    exit_(0)
            sleep(0.5)

    threading.Thread(target=watch, name="watch-parent", daemon=True).start()


def start_reaper(work_dir, tool_pid):
    """The one process of the worker's group outside the confinement, forked before torch is
    imported (one thread, no task code ever in it): when the tool is gone it removes the tool's
    private folder (which the confined worker may not) and kills the group; when the worker is gone
    it kills the group. Task code cannot reach it: no ptrace, no signal out of its Landlock domain
    (ABI 6+), no process-group kill (seccomp)."""
    import signal
    worker = os.getpid()
    pid = os.fork()
    if pid:
        return pid
    try:
        os.closerange(0, 3)  # holds none of the worker's pipes: the client sees their ends
        fd = os.open(os.devnull, os.O_RDWR)
        for n in (0, 1, 2):
            os.dup2(fd, n)
        os.closerange(3, 1 << 16)
        ours = bool(work_dir) and os.path.basename(work_dir.rstrip("/")).startswith("cuda-agent")

        def parent_of(p):
            try:
                with open("/proc/%d/stat" % p) as f:
                    return int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                return 0

        def alive(p):
            try:
                os.kill(p, 0)
                return True
            except ProcessLookupError:
                return False
            except OSError:
                return True

        while True:
            time.sleep(0.5)
            worker_gone = os.getppid() != worker
            tool_gone = tool_pid > 0 and (not alive(tool_pid) or (not worker_gone and parent_of(worker) != tool_pid))
            if tool_gone and ours:
                shutil.rmtree(work_dir, ignore_errors=True)
            if worker_gone or tool_gone:
                os.killpg(0, signal.SIGKILL)
    finally:
        os._exit(0)


def _split_output(log):
    """The protocol gets a private copy of fd 1; fd 1 goes where fd 2 goes (the client's capped
    reader, or `log`), so whatever task code prints (Python or C) never lands in the protocol stream."""
    global PROTOCOL_OUT
    proto_fd = os.dup(1)
    if log:
        fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        os.dup2(fd, 2)
        os.close(fd)
    os.dup2(2, 1)
    PROTOCOL_OUT = os.fdopen(proto_fd, "w")
    try:
        sys.stdout.reconfigure(line_buffering=True)
        sys.stderr.reconfigure(line_buffering=True)
    except AttributeError:
        pass


def _open_device(torch, device, memory_mb):
    """The device as "cuda:N" (its context made now, before the confinement: the driver opens its
    device files, /proc/driver/nvidia and its libraries once, unconfined) or "cpu" (with the
    address-space limit); None after a no_device hello when it is not available."""
    if device == "cpu":
        if memory_mb > 0:
            # Address-space limit on CPU only: CUDA reserves far more virtual memory than it uses, so
            # on a GPU the client's resident-set watch is the limit.
            from .confine import lower_rlimit
            lower_rlimit(resource.RLIMIT_AS, memory_mb << 20)
        return device
    ok = device.startswith("cuda") and torch.cuda.is_available()
    idx = 0
    if ok and ":" in device:
        try:
            idx = int(device.split(":", 1)[1])
        except ValueError:
            ok = False
    if ok and idx >= torch.cuda.device_count():
        ok = False
    if not ok:
        emit({"ok": False, "op": "hello", "error": "no_device",
              "detail": "device %s is not available to torch %s (cuda available: %s, devices: %d)"
                        % (device, torch.__version__, torch.cuda.is_available(),
                           torch.cuda.device_count() if torch.cuda.is_available() else 0)})
        return None
    device = "cuda:%d" % idx
    try:
        torch.cuda.set_device(idx)
        torch.zeros(1, device=device)
        torch.cuda.synchronize()
    except RuntimeError as e:  # torch 2.x's AcceleratorError is one too
        from .numerics import is_oom
        if not is_oom(str(e)):
            raise
        # Other workers' tasks hold the device's memory: the client starts this one again when none runs.
        emit({"ok": False, "op": "hello", "error": "out_of_memory",
              "detail": "no memory on %s for a CUDA context: %s" % (device, str(e).splitlines()[0][:300])})
        return None
    return device


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python3 -m cuda_agent_worker", description=__doc__)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--cpu-seconds", type=float, default=600)
    ap.add_argument("--memory-mb", type=int, default=16384)
    ap.add_argument("--log", default="", help="append fd 1 and 2 to this file (default: they go to fd 2)")
    ap.add_argument("--work-dir", default="", help="the client's private folder (removed if the client dies)")
    ap.add_argument("--io-dir", default="", help="where task code may write (default: --work-dir)")
    ap.add_argument("--parent-pid", type=int, default=0)
    ap.add_argument("--landlock-fd", type=int, default=-1, help="a Landlock ruleset to enforce")
    ap.add_argument("--seccomp", default="", help="a seccomp filter (struct sock_filter[] as hex)")
    ap.add_argument("--file-mb", type=int, default=0, help="RLIMIT_FSIZE for every file written")
    ap.add_argument("--confine-skip", default="", help="comma list: landlock, seccomp, caps (debugging)")
    ap.add_argument("--unconfined", action="store_true", help="apply nothing (the hello says so)")
    args = ap.parse_args(argv)
    if not args.unconfined and os.getpgid(0) == os.getpid():
        start_reaper(args.work_dir, args.parent_pid)

    _split_output(args.log)
    try:
        import torch
    except Exception as e:  # ImportError, or a broken install
        emit({"ok": False, "op": "hello", "error": "no_torch",
              "detail": "%s cannot import torch (%s: %s); install PyTorch (Debian: python3-torch, "
                        "`make deps`) or set CUDA_AGENT_PYTHON" % (sys.executable, type(e).__name__, e)})
        return 3
    device = _open_device(torch, args.device, args.memory_mb)
    if device is None:
        return 3

    io_dir = args.io_dir or args.work_dir
    own_dir = not io_dir
    work_dir = tempfile.mkdtemp(prefix="cuda-agent-tasks-") if own_dir else os.path.join(io_dir, "tasks-%d" % os.getpid())
    if not own_dir:
        os.makedirs(work_dir, mode=0o700, exist_ok=True)
    worker = Worker(torch, device, work_dir, args.cpu_seconds)
    hello = worker.hello()

    # Confined from here on: before the first request is read, so no task code ever runs outside.
    if args.unconfined:
        applied, warnings = [], ["the worker was started --unconfined: task code runs with the tool's rights"]
    else:
        from . import confine
        skip = tuple(s for s in args.confine_skip.split(",") if s)
        applied, warnings = confine.apply(args.landlock_fd, args.seccomp, args.file_mb, skip)
    for w in warnings:
        sys.stderr.write("cuda_agent_worker: confinement: %s\n" % w)
    hello["confinement"] = applied
    if warnings:
        hello["confinement_warnings"] = warnings
    watch_parent(args.work_dir, args.parent_pid)
    emit(hello)
    try:
        serve(worker, sys.stdin)
    finally:
        shutil.rmtree(work_dir, ignore_errors=True)
    return 0

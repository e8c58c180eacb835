"""The `time` op: kernel-prof's method applied to eager and torch.compile baselines (warm-up, L2
flush before every timed call, CUDA events, input sets rotated, stop on a stable median, profiler
device time)."""
import bisect
import math
import time

import torch

from .tasks import TaskError, precision, stage

TIMED_RANGE = "cuda_agent_timed_call"


def _quantile(s, q):
    if not s:
        return None
    pos = q * (len(s) - 1)
    lo = int(math.floor(pos))
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def median_rel_ci(s):
    """Relative half-width of the distribution-free 95% CI of the median of sorted `s`: order
    statistics at ranks n/2 -+ 1.96 sqrt(n)/2 (None below 3 samples)."""
    n = len(s)
    if n < 3:
        return None
    half = 1.96 * math.sqrt(n) / 2.0
    lo = max(0, int(math.floor(n / 2.0 - half)) - 1)
    hi = min(n - 1, int(math.ceil(1 + n / 2.0 + half)) - 1)
    med = _quantile(s, 0.5)
    if med <= 0:
        return None
    return (s[hi] - s[lo]) / (2.0 * med)


def summarize(xs):
    s = sorted(xs)
    if not s:
        return None
    return {"median": _quantile(s, 0.5), "p10": _quantile(s, 0.1), "p90": _quantile(s, 0.9),
            "mean": sum(s) / len(s), "min": s[0], "n": len(s), "rel_ci": median_rel_ci(s)}


def default_flush_bytes(device):
    if device.type != "cuda":
        return 0
    props = torch.cuda.get_device_properties(device)
    l2 = getattr(props, "L2_cache_size", 0) or (50 << 20)
    return 2 * int(l2)


def read_flush(nbytes, device):
    """The L2 flush before every timed baseline call: a read of a buffer `nbytes` long (twice the
    L2) at normal priority, after which the L2 holds clean lines only (a memset left them dirty, a
    write-back the timed call paid). kernel-prof's own flush (libcommon/measure/gpu_state.hpp,
    "read-demote") reads at evict_last priority and then demotes its lines, so no line a call
    marked evict_last can outlast it; this one has no raw kernel to do that, and on the H100 a
    plain read was not seen to leave such lines (tools/kernel-prof/NOTES.md). None for no flush
    (nbytes 0, the CPU)."""
    if nbytes <= 0:
        return None
    buf = torch.full((max(1, nbytes // 4),), 0x5A5A5A5A, dtype=torch.int32, device=device)
    return lambda: torch.amax(buf)


def _event_time(fn, inputs, flush):
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    if flush is not None:
        flush()
    start.record()
    fn(*inputs)
    end.record()
    end.synchronize()
    return start.elapsed_time(end) * 1000.0  # ms -> us


def _wall_time(fn, inputs, flush):
    if flush is not None:
        flush()
    t = time.perf_counter()
    fn(*inputs)
    return (time.perf_counter() - t) * 1e6


def _device_time_of(event):
    for attr in ("device_time_total", "cuda_time_total"):
        v = getattr(event, attr, None)
        if v is not None:
            return float(v)
    return 0.0


def busy_us(spans):
    """The length of the union of [start, end) spans: the time at least one of them was running.
    The spans' sum when none overlap; an overlap is counted once (kernel-prof's CUPTI side does the
    same for the candidate: libcommon/cuda/cupti.cpp)."""
    busy, covered = 0.0, None
    for start, end in sorted(spans):
        frm = start if covered is None else max(start, covered)
        if end > frm:
            busy += end - frm
        covered = end if covered is None else max(covered, end)
    return busy


def _raw_ns(ev):
    """(start, end) of a Kineto event in ns, across torch versions (start_ns/end_ns, else us)."""
    if hasattr(ev, "start_ns") and hasattr(ev, "end_ns"):
        return ev.start_ns(), ev.end_ns()
    start = ev.start_us() * 1000
    return start, start + ev.duration_us() * 1000


def _is_annotation(ev, range_name):
    """Kineto mirrors record_function ranges on the GPU's timeline (a span over the range's kernels
    and the gaps between them): not a kernel. torch 2 says so (is_user_annotation); 1.13 does not,
    and mirrors only the timed range, known by its name."""
    if ev.name() == range_name:
        return True
    flag = getattr(ev, "is_user_annotation", None)
    return bool(flag()) if callable(flag) else False


def range_busy_times(raw_events, range_name, cpu_type, gpu_types, sums_us):
    """Per timed range (in order), the busy time of its kernels (us), from Kineto's raw events: a
    GPU kernel names the CPU op that launched it (linked_correlation_id, as torch.profiler itself
    attributes kernels to ops), and an op belongs to the range that holds it on the same thread.
    sums_us: torch.profiler's own kernel sum per range; the kernels found through ops must sum to
    it, so those are exactly the kernels torch counted. Raises ValueError saying why not.
    A kernel that names no op seen (launched outside any op: a CUDA graph's replay, an extension's
    own launch, torch.cuda._sleep) torch counts nowhere; it is the task's work all the same, and
    belongs to the call during whose window it started on the device (the calls are serial: each
    ends with a synchronize before the next one's flush and range)."""
    ranges, ops, spans, gpu = [], [], {}, []
    for ev in raw_events:
        t = ev.device_type()
        if t in gpu_types:
            if not _is_annotation(ev, range_name):
                span = _raw_ns(ev)
                spans.setdefault(ev.linked_correlation_id(), []).append(span)
                gpu.append((ev.linked_correlation_id(), span))
        elif t == cpu_type:
            if ev.name() == range_name:
                ranges.append((_raw_ns(ev), ev.start_thread_id()))
            if ev.linked_correlation_id() == 0:  # an op or a range (a kernel launched outside any op
                ops.append((_raw_ns(ev), ev.start_thread_id(), ev.correlation_id()))  # names the range)
    ranges.sort()
    if len(ranges) != len(sums_us):
        raise ValueError("%d timed ranges in the raw events, %d in the profiler's" % (len(ranges), len(sums_us)))
    per_range = [[] for _ in ranges]
    for (start, end), thread, corr in ops:
        if corr == 0 or corr not in spans:  # 0: no op (the unlinked kernels' key)
            continue
        for i, ((r0, r1), rthread) in enumerate(ranges):
            if thread == rthread and r0 <= start and end <= r1:
                per_range[i].extend(spans[corr])
                break
    out = []
    for i, mine in enumerate(per_range):
        total = sum(e - s for s, e in mine) / 1000.0
        if abs(total - sums_us[i]) > 1e-3 * max(1.0, sums_us[i]) + 0.01:
            raise ValueError("call %d: the linked kernels sum to %.3f us, the profiler's sum is %.3f us"
                             % (i, total, sums_us[i]))
    known = {corr for _, _, corr in ops} - {0}
    starts = [r0 for (r0, _), _ in ranges]
    for link, span in gpu:
        if link in known:
            continue
        i = bisect.bisect_right(starts, span[0]) - 1
        if i >= 0:
            per_range[i].append(span)
    return [busy_us(mine) / 1000.0 for mine in per_range]


def profiled_device_times(fn, sets, flush, calls):
    """Device time (us) of each call, from torch.profiler, each call in a record_function range (the
    flush stays outside): the busy time of its kernels (range_busy_times). When this torch's raw
    events do not give it, RuntimeError: no device time at all (kernel-prof then compares nothing),
    never the kernels' sum, which counts an overlap twice where the candidate's side does not."""
    from torch.profiler import ProfilerActivity, profile, record_function
    try:
        from torch.autograd import DeviceType
        cpu_type = DeviceType.CPU
    except ImportError:
        DeviceType, cpu_type = None, None
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for i in range(calls):
            if flush is not None:
                flush()
            with record_function(TIMED_RANGE):
                fn(*sets[i % len(sets)])
            torch.cuda.synchronize()
    sums = []
    for e in prof.events():
        if e.name != TIMED_RANGE:
            continue
        if cpu_type is not None and getattr(e, "device_type", cpu_type) != cpu_type:
            continue
        sums.append(_device_time_of(e))
    try:
        if DeviceType is None:
            raise ValueError("no torch.autograd.DeviceType")
        raw = prof.profiler.kineto_results.events()
        gpu_types = tuple(getattr(DeviceType, n) for n in ("CUDA", "HIP") if hasattr(DeviceType, n))
        return range_busy_times(raw, TIMED_RANGE, cpu_type, gpu_types, sums)
    except (AttributeError, TypeError, ValueError) as e:
        raise RuntimeError("no busy time from this torch's profiler events (%s: %s)"
                           % (type(e).__name__, str(e).splitlines()[0] if str(e) else ""))


WARM_BATCH_S = 0.05   # each warm-up batch runs this long at least
WARM_STEADY = 0.02    # two batches in a row whose time per call agree this closely: steady
WARM_MIN_S = 0.1      # never less warm-up time than this


def warm_up(fn, sets, warmup, warmup_s, sync, clock=time.perf_counter):
    """Untimed calls: `warmup` calls, then batches of at least WARM_BATCH_S until two batches in a
    row take the same time per call (within WARM_STEADY) after at least WARM_MIN_S, or warmup_s
    is spent. Returns (calls, "steady" | "warmup_s")."""
    i, w0 = 0, clock()

    def call():
        nonlocal i
        fn(*sets[(i + 1) % len(sets)])
        i += 1

    while i < warmup:
        call()
        if i % 8 == 0:
            sync()  # keep the queue short so the clock measures work done
    sync()
    prev = None
    while clock() - w0 < warmup_s:
        b0, n = clock(), 0
        while True:
            call()
            n += 1
            sync()
            elapsed = clock() - b0
            if elapsed >= WARM_BATCH_S and n >= 2:
                break
        per_call = elapsed / n
        if prev is not None and clock() - w0 >= WARM_MIN_S and abs(per_call - prev) <= WARM_STEADY * prev:
            return i, "steady"
        prev = per_call
    return i, "warmup_s"


def _timed_fn(task, mode):
    """(what a call runs, compiled by an earlier request or None for eager) for the mode."""
    if mode == "eager":
        return task.model, None
    cmode = "default" if mode == "compile" else "max-autotune"
    cached = cmode in task.compiled
    with stage("compile"):
        return task.compiled_model(cmode), cached


def _timed_calls(fn, sets, flush, timer, min_runs, max_runs, budget_s, target):
    """Timed calls, input sets rotated, until the median's relative CI is under target (after
    min_runs), max_runs, or budget_s is spent (after 3): (times in us, why it stopped)."""
    times, stop = [], "max_runs"
    start = time.perf_counter()
    while len(times) < max_runs:
        times.append(timer(fn, sets[len(times) % len(sets)], flush))
        if len(times) >= min_runs:
            rc = median_rel_ci(sorted(times))
            if rc is not None and rc < target:
                stop = "rel_ci"
                break
        if time.perf_counter() - start > budget_s and len(times) >= 3:
            stop = "budget"
            break
    return times, stop


def _device_time(fn, sets, flush, n_timed):
    """(summary of the per-call busy times, None) from a profiled pass of up to 30 calls, or (None,
    why there is none)."""
    try:
        device_times = profiled_device_times(fn, sets, flush, max(5, min(30, n_timed)))
    except RuntimeError as e:  # no CUPTI, profiler busy: report events only, say why
        return None, "%s: %s" % (type(e).__name__, str(e).splitlines()[0] if str(e) else "")
    summary = summarize(device_times) if device_times else None
    if summary is None or summary["median"] <= 0:  # kernels not attributed to the range: say so
        return None, "the profiler attributed no kernel time to the timed calls"
    return summary, None


def time_task(task, req, sets=None):
    """The `time` op. sets: input sets already on the device (default: input_sets fresh draws)."""
    mode = req.get("mode", "eager")
    prec = req.get("precision", "fp32")
    metric = req.get("metric", "device")
    if mode not in ("eager", "compile", "compile-max-autotune"):
        raise ValueError("mode must be eager, compile or compile-max-autotune, not %r" % (mode,))
    if metric not in ("device", "wall"):
        raise ValueError("metric must be device or wall, not %r" % (metric,))
    warmup = int(req.get("warmup", 3))
    # Then warm up until the throughput is steady, for at most warmup_s: an idle GPU needs some time
    # of work to reach its clocks (measured on the H200: event times right after an idle spell ran
    # 6-12% slow, profiler kernel times did not); a GPU that is already busy is steady at once.
    warmup_s = float(req.get("warmup_s", 1.0))
    min_runs = max(3, int(req.get("min_runs", 10)))
    max_runs = max(min_runs, int(req.get("max_runs", 1000)))
    budget_s = float(req.get("budget_s", 10.0))
    target = float(req.get("rel_ci", 0.01))
    input_sets = max(1, int(req.get("input_sets", 3)))
    seed = int(req.get("seed", 0))
    on_gpu = task.device.type == "cuda"
    flush_bytes = req.get("flush_bytes")
    flush_bytes = default_flush_bytes(task.device) if flush_bytes is None else int(flush_bytes)

    compile_s = None
    fn, compile_cached = _timed_fn(task, mode)
    if sets is None:
        sets = [task.make_inputs(seed + i, stats=False, on_device=True)[0] for i in range(input_sets)]
    task.restore()
    flush = read_flush(flush_bytes, task.device) if on_gpu else None
    sync = torch.cuda.synchronize if on_gpu else (lambda: None)
    timer = _event_time if on_gpu else _wall_time

    device_time_us = None
    device_error = None
    with precision(prec, task.device), torch.no_grad():
        t0 = time.perf_counter()
        with stage("compile" if mode != "eager" else "forward"):
            fn(*sets[0])
            sync()
        first_call_s = time.perf_counter() - t0
        phases = {"first_call": first_call_s}
        if mode != "eager":
            compile_s = first_call_s
        with stage("forward"):
            w0 = time.perf_counter()
            warmup_calls, warmup_stop = warm_up(fn, sets, warmup, warmup_s, sync)
            phases["warmup"] = time.perf_counter() - w0
            start = time.perf_counter()
            times, stop = _timed_calls(fn, sets, flush, timer, min_runs, max_runs, budget_s, target)
            phases["timed"] = time.perf_counter() - start
            if on_gpu and metric == "device":
                p0 = time.perf_counter()
                device_time_us, device_error = _device_time(fn, sets, flush, len(times))
                phases["profiler"] = time.perf_counter() - p0
    time_us = summarize(times)
    value = device_time_us["median"] if (metric == "device" and device_time_us) else time_us["median"]
    return {
        "time_us": time_us,
        "device_time_us": device_time_us,
        "value_us": value,
        "value_metric": "device" if (metric == "device" and device_time_us) else "wall",
        "mode": mode,
        "precision": prec,
        "metric": metric,
        "compile_s": compile_s,
        "compile_cached": compile_cached,
        "method": {"warmup": warmup, "warmup_s": warmup_s, "warmup_calls": warmup_calls,
                   "warmup_stop": warmup_stop, "min_runs": min_runs, "max_runs": max_runs, "budget_s": budget_s,
                   "rel_ci": target, "input_sets": input_sets, "flush_bytes": flush_bytes,
                   "flush": "read" if flush is not None else None, "seed": seed,
                   "timer": "cuda_events" if on_gpu else "perf_counter", "stop": stop,
                   "device_time": "torch.profiler kernels, busy time per call" if device_time_us else None,
                   "device_time_error": device_error,
                   "phase_s": {k: round(v, 4) for k, v in phases.items()}},
    }


def quick_eager_ms(task, sets=None):
    """The eager median for the filters' time range (a short budget), on the given input sets."""
    ans = time_task(task, {"mode": "eager", "precision": "fp32", "metric": "wall", "warmup": 2, "warmup_s": 0.2,
                           "min_runs": 5, "max_runs": 50, "budget_s": 2.0, "rel_ci": 0.02}, sets)
    return ans["time_us"]["median"] / 1000.0, ans

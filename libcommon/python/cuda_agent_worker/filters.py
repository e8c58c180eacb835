"""The `filters` op: the published task filters (runs in eager and torch.compile, deterministic,
non-degenerate outputs, eager time in a range), each verdict with the evidence for it."""
import gc
import hashlib
import random
import time

import torch

from .numerics import MIN_FLOOR_SCALE, is_oom
from .tasks import TaskError, reference_mode

# torch.compile costs seconds of CPU per task, the other checks milliseconds: it runs last, and only
# on tasks that passed every other check (a task dropped earlier says "not run" for it).
# input_sensitive and well_conditioned are the load's measurements (numerics: detect_insensitive,
# detect_ill_conditioned): a reference a constant answer would match under the published bound, or
# one whose own fp32 error against float64 is over the cap of every bound, can judge no candidate.
# not_diluted keeps out of the training set the tasks where the calibrated bound is weakest: an output
# mostly the same on every draw (the load's varying fraction under MIN_FLOOR_SCALE, where the floor
# is a share of the whole output, not of the part the inputs move) whose params are a real part of
# what a call moves. There, weights kept in fewer bits (int8 beside int16, red team R11) stay within
# the bound and read half the bytes; a policy trained on such tasks would learn to do it.
ORDER = ["runs_eager", "deterministic", "no_nan_inf", "not_constant", "input_dependent", "input_sensitive",
         "well_conditioned", "not_diluted", "eager_time_ms", "runs_compile"]
DILUTED_PARAM_SHARE = 0.25  # params' share of a call's bytes (params + inputs + outputs) that counts

_INT_OF_SIZE = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def _bits(t):
    """A same-size integer view, so equality is bit equality (NaN == NaN, -0 != +0)."""
    t = t.contiguous()
    if t.dtype == torch.bool or not (t.is_floating_point() or t.is_complex()):
        return t
    if t.is_complex():
        t = torch.view_as_real(t).contiguous()
    return t.view(_INT_OF_SIZE[t.element_size()])


def bit_equal(a_list, b_list):
    if len(a_list) != len(b_list):
        return False
    for a, b in zip(a_list, b_list):
        if a.shape != b.shape or a.dtype != b.dtype or not torch.equal(_bits(a), _bits(b)):
            return False
    return True


def _verdict(ok, detail, **extra):
    v = {"pass": ok, "detail": detail}
    v.update(extra)
    return v


def _skipped(detail):
    return {"pass": None, "detail": detail}


def _constant(t):
    if t.numel() <= 1:
        return None  # a single value says nothing about constancy
    flat = t.detach().reshape(-1)
    if flat.is_floating_point():
        flat = flat[torch.isfinite(flat)]
        if flat.numel() <= 1:
            return True
    return bool((flat == flat[0]).all())


def release_gpu_memory():
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def run(worker, req):
    """The filters op. A verdict lost to GPU memory may be the other workers' doing (-j N share a
    GPU): it is retried once, after releasing this worker's cached memory; a second failure stands,
    and the answer says lost_to_memory."""
    started = time.perf_counter()
    for attempt in (1, 2):
        try:
            ans = _run_once(worker, req)
        except RuntimeError as e:  # outside the task's own stages (moving inputs, the timing buffers)
            if not is_oom(str(e)):
                raise
            v = {"runs_eager": _verdict(False, "out of GPU memory: %s" % str(e).splitlines()[0][:300])}
            for name in ORDER[1:]:
                v[name] = _skipped("not run: out of GPU memory")
            ans = _answer(v, None)
        lost_to_memory = any(v["pass"] is False and is_oom(str(v.get("detail", ""))) for v in ans["verdicts"].values())
        if not lost_to_memory or attempt == 2:
            break
        release_gpu_memory()
        time.sleep(random.uniform(0.5, 2.0))
    if lost_to_memory:
        ans["lost_to_memory"] = True  # the client may try again later, when the GPU has room
    ans["seconds"] = round(time.perf_counter() - started, 3)
    return ans


def _filter_task(worker, req):
    """(task, load error, unload after): the loaded task, or one loaded here from the request's code
    (unloaded after the answer, as ops-synth sends thousands through one worker, unless the
    request says keep_loaded)."""
    code = req.get("code")
    if code is None:
        return worker.task(req), None, False
    tid = req.get("task_id") or "filter-" + hashlib.sha1(code.encode("utf-8")).hexdigest()[:16]
    temp = not req.get("keep_loaded", False)
    try:
        return worker.load(str(tid), code, req.get("init_inputs"), int(req.get("init_seed", 0)),
                           reference_mode(req), keep_inputs=True, build_on_device=True), None, temp
    except TaskError as e:
        return None, e, temp


def _output_verdicts(task, v, inputs0):
    """runs_eager, deterministic, no_nan_inf, not_constant, on the seed-0 inputs; their outputs."""
    out_a = task.forward(inputs0)
    v["runs_eager"] = _verdict(True, "%d output(s)" % len(out_a))
    out_b = task.forward(inputs0)
    v["deterministic"] = _verdict(bit_equal(out_a, out_b),
                                  "two runs on the same inputs are bit-equal" if bit_equal(out_a, out_b)
                                  else "two runs on the same inputs differ (a stochastic op?)")
    bad = [i for i, o in enumerate(out_a)
           if (o.is_floating_point() or o.is_complex()) and o.numel() and not bool(torch.isfinite(o).all())]
    v["no_nan_inf"] = _verdict(not bad, "all outputs finite" if not bad
                               else "NaN or Inf in output(s) %s" % ",".join(map(str, bad)))
    consts = [_constant(o) for o in out_a]
    judged = [c for c in consts if c is not None]
    if not judged:
        v["not_constant"] = _verdict(True, "single-element outputs: judged by input_dependent only")
    else:
        ok = not all(judged)
        v["not_constant"] = _verdict(ok, "some output varies" if ok else "every output is one constant value")
    return out_a


def _dependence_verdicts(task, v, inputs0, out_a):
    """input_dependent (seeds 0 and 1), input_sensitive, well_conditioned, not_diluted; the seed-1
    inputs."""
    seed1 = getattr(task, "load_seed1", None)  # the load's seed-1 draw and outputs (detect_insensitive)
    task.load_seed1 = None
    if seed1 is not None:
        inputs1, out_1 = seed1
    else:
        inputs1 = task.make_inputs(1, stats=False, on_device=True)[0]
        out_1 = task.forward(inputs1)
    same_inputs = all(torch.equal(_bits(x), _bits(y)) for x, y in zip(inputs0, inputs1)
                      if isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor) and x.shape == y.shape
                      and x.dtype == y.dtype)
    dep = not bit_equal(out_a, out_1)
    v["input_dependent"] = _verdict(dep, "outputs differ for seeds 0 and 1" if dep else
                                    "outputs equal for seeds 0 and 1" +
                                    (" (get_inputs gave the same inputs)" if same_inputs else ""))
    v["input_sensitive"] = _sensitivity_verdict(task.sensitivity)
    v["well_conditioned"] = _conditioning_verdict(task.conditioning)
    v["not_diluted"] = _dilution_verdict(task, inputs0, out_a)
    return inputs1


def _compile_verdict(task, v, inputs0, out_a, check_compile):
    """runs_compile: torch.compile runs the task (on a GPU, when every check before passed)."""
    failed = next((name for name in ORDER if name in v and v[name]["pass"] is False), None)
    if failed is not None:
        v["runs_compile"] = _skipped("not run: %s failed" % failed)
    elif not check_compile:
        v["runs_compile"] = _skipped("not asked (check_compile false)")
    elif task.device.type != "cuda":
        v["runs_compile"] = _skipped("skipped on CPU: torch.compile is checked on a GPU only")
    elif not hasattr(torch, "compile"):
        v["runs_compile"] = _skipped("torch %s has no torch.compile" % torch.__version__)
    else:
        t0 = time.perf_counter()
        try:
            out_c = task.forward(inputs0, fn=task.compiled_model("default"))
            diff = max([float((c.double() - a.double()).abs().max()) if c.numel() else 0.0
                        for c, a in zip(out_c, out_a)] or [0.0])
            v["runs_compile"] = _verdict(True, "compiled and ran; max |compile - eager| = %.3g" % diff,
                                         max_abs_diff=diff, seconds=round(time.perf_counter() - t0, 3))
        except TaskError as e:
            v["runs_compile"] = _verdict(False, "%s: %s" % (e.stage, e.detail), traceback=e.traceback)


def _run_once(worker, req):
    lo, hi = req.get("eager_time_range_ms", [1, 100])
    task, load_err, temp = _filter_task(worker, req)
    v = {}
    try:
        if load_err is not None:
            v["runs_eager"] = _verdict(False, "%s: %s" % (load_err.stage, load_err.detail),
                                       stage=load_err.stage, traceback=load_err.traceback)
            for name in ORDER[1:]:
                v[name] = _skipped("not run: runs_eager failed")
            return _answer(v, None)
        inputs0 = getattr(task, "load_inputs", None)  # the load's seed-0 draw, when this op loaded the task
        task.load_inputs = None
        if inputs0 is None:
            inputs0 = task.make_inputs(0, stats=False, on_device=True)[0]
        out_a = _output_verdicts(task, v, inputs0)
        inputs1 = _dependence_verdicts(task, v, inputs0, out_a)
        if task.device.type != "cuda":
            v["eager_time_ms"] = _skipped("skipped on CPU: eager time is measured on a GPU only")
        else:
            from .timing import quick_eager_ms
            ms, _ = quick_eager_ms(task, [inputs0, inputs1])  # no third draw: values barely move the time
            v["eager_time_ms"] = _verdict(lo <= ms <= hi, "eager median %.4g ms, range [%g, %g]" % (ms, lo, hi),
                                          value=ms)
        _compile_verdict(task, v, inputs0, out_a, bool(req.get("check_compile", True)))
        return _answer(v, task.load_answer())
    except TaskError as e:
        # A later stage raised (e.g. the second input draw): that verdict fails, the rest are skipped.
        for name in ORDER:
            if name not in v:
                v[name] = _verdict(False, "%s: %s" % (e.stage, e.detail), traceback=e.traceback)
                break
        for name in ORDER:
            v.setdefault(name, _skipped("not run: an earlier check raised"))
        return _answer(v, task.load_answer() if task is not None else None)
    finally:
        if temp and task is not None:
            worker.tasks.pop(task.task_id, None)
            compiled = bool(task.compiled)
            task.drop()
            del task
            if compiled:
                torch._dynamo.reset()  # its caches hold the compiled model and its guards
            release_gpu_memory()


def _num(x):
    return "%.3g" % x if x is not None else "inf"


def _sensitivity_verdict(rec):
    """input_sensitive from the load's detect_insensitive record."""
    checks = rec.get("checks", [])
    if rec.get("insensitive") is None:
        return _skipped("not measured: %s" % rec.get("error", "?"))
    against = ", ".join("%s: rel L2 %s, %d element(s) over" % (c["against"], _num(c["rel_l2"]), c["elements_over"])
                        for c in checks)
    if rec["insensitive"]:
        return _verdict(False, "the seed-0 outputs pass as the reference's for other inputs under the published bound "
                               "(atol = rtol = 1e-2, relative L2 5e-2): a constant answer would pass every check (%s)"
                        % against, checks=checks)
    return _verdict(True, "other inputs move the outputs past the published bound (%s)" % against)


def _conditioning_verdict(rec):
    """well_conditioned from the load's detect_ill_conditioned record."""
    if rec.get("ill_conditioned") is None:
        return _skipped("not measured: %s" % rec.get("error", "?"))
    worst = rec.get("fp32_err_rel_l2")
    if rec["ill_conditioned"]:
        return _verdict(False, "the fp32 reference is %s (relative L2) from float64, over the cap %g of every bound: "
                               "the reference itself would fail, and so would every fp32 candidate"
                        % (_num(worst), rec["cap_rel_l2"]), fp32_err_rel_l2=worst)
    return _verdict(True, "the fp32 reference is %s (relative L2) from float64, under the cap %g"
                    % (_num(worst), rec["cap_rel_l2"]), fp32_err_rel_l2=worst)


def _nbytes(values):
    return sum(t.numel() * t.element_size() for t in values if isinstance(t, torch.Tensor))


def _dilution_verdict(task, inputs, outputs):
    """not_diluted from the load's varying fractions and the bytes a call moves."""
    varying = getattr(task, "varying", None) or {}
    if not varying:
        return _skipped("not measured: the load has no varying fraction (%s)" % task.sensitivity.get("error", "no floating output"))
    name, f = min(varying.items(), key=lambda kv: kv[1])
    params = _nbytes(task.initial_state.values())
    moved = params + _nbytes(inputs) + _nbytes(outputs)
    share = params / moved if moved else 0.0
    detail = "%s varies by %s of its norm between draws; params are %.0f%% of the bytes a call moves" % (name, _num(f), 100 * share)
    if f < MIN_FLOOR_SCALE and share >= DILUTED_PARAM_SHARE:
        return _verdict(False, detail + ": under %g and over %.0f%%, weights stored in fewer bits would pass the "
                                        "calibrated bound (its floor is a share of the whole output there)"
                        % (MIN_FLOOR_SCALE, 100 * DILUTED_PARAM_SHARE), varying_fraction=f, param_share=share)
    return _verdict(True, detail, varying_fraction=f, param_share=share)


def _answer(v, load):
    verdicts = {name: v[name] for name in ORDER}
    reason = next((name for name in ORDER if verdicts[name]["pass"] is False), None)
    return {"verdicts": verdicts, "kept": reason is None, "reason": reason, "load": load}

"""What a candidate is judged against beyond one reference: the error a precision has on the task
(calibrate: the reference at the claimed precision against float64), inputs the task's own
distribution does not give (variants: shifted and scaled values, outliers, another seed stream),
and whether the reference is a random draw itself (stochastic). PROTOCOL.md, "reference",
"inputs" and "load", says what the answers hold; libcommon/bundle/compare.hpp turns calibrations
into bounds."""
import contextlib
import hashlib
import math

import torch

from .tasks import TaskError, precision, stage

# ---- calibration -------------------------------------------------------------------------------------

# The claimed precision -> the precision whose reference error calibrates it, and the rule's defaults
# (K, floor). Kept equal to compare.hpp's calibration_rule(), which sends its own K and floor with
# every request (the answer's bound is then the C++ rule's; these are for other clients).
# int8/fp8 have no autocast of their own: they are calibrated by bf16's error, with a looser K (their
# unit roundoff is 16x (fp8 e4m3) bf16's). The floor is fp32's for every claim (session 33): a claim
# earns K times what its reference loses beyond fp32's, nothing else (compare.hpp's claim_term).
CALIBRATE_REFERENCE = {"fp32": "fp32", "tf32": "tf32", "fp16": "fp16", "bf16": "bf16", "int8": "bf16", "fp8": "bf16"}
CALIBRATE_DEFAULTS = {"fp32": (8.0, 5e-6), "tf32": (4.0, 5e-6), "fp16": (4.0, 5e-6), "bf16": (4.0, 5e-6),
                      "int8": (16.0, 5e-6), "fp8": (16.0, 5e-6)}
# The floor's part relative to the whole output (compare.hpp's floor_min): fp32's, the tenth of its old
# 3e-5 (the honest serial chains of low varying fraction need it), for every claim.
FLOOR_MIN_DEFAULTS = {p: 3e-6 for p in CALIBRATE_DEFAULTS}
# insensitive_on_own_draws' fp32 floor: the one before session 22 (3e-5), at least the judge's floor
# term at any varying fraction, so the tasks it flags stay the ones it flagged.
OWN_DRAWS_FLOOR = 3e-5
PUBLISHED_REL_L2 = 5e-2  # a calibrated bound is never looser than the published one

_HOLDER64 = [None]  # the one task whose float64 model is kept (a model in double is twice its size)


def _is_float(t):
    return isinstance(t, torch.Tensor) and t.is_floating_point()


def _clone_inputs(values):
    return [v.clone() if isinstance(v, torch.Tensor) else v for v in values]


def _model64(task):
    """The task's model in float64 (built again in its load-time state: Task.rebuild), kept for the
    last task that asked."""
    m = getattr(task, "_model64", None)
    if m is None:
        holder = _HOLDER64[0]
        if holder is not None and holder is not task:
            holder._model64 = None
            holder._state64 = None
        task.restore()
        with stage("calibrate: float64 copy of the model"):
            m = task.rebuild().double()
        task._model64 = m
        task._state64 = {k: v.detach().clone() for k, v in m.state_dict().items()}
        _HOLDER64[0] = task
    m.load_state_dict(task._state64)
    return m


def is_oom(text):
    """GPU memory ran out: torch's "CUDA out of memory" (torch.cuda.OutOfMemoryError, or a plain
    RuntimeError in torch 1.x) or cuBLAS failing to allocate its workspace."""
    return "out of memory" in text.lower() or "ALLOC_FAILED" in text


_LOWER_FLOATS = (torch.float32, torch.float16, torch.bfloat16)


class _Float64Everywhere(torch.overrides.TorchFunctionMode):
    """Inside: every floating dtype the code names (`.float()`, `.half()`, `dtype=torch.float32`,
    `.to(torch.float32)`) is float64, so code that spells out its dtype still runs in double (a
    double input times a `.float()` weight raised, and the task had no calibrated bound)."""

    _LIFT = {torch.Tensor.float: torch.Tensor.double, torch.Tensor.half: torch.Tensor.double,
             torch.Tensor.bfloat16: torch.Tensor.double}

    def __torch_function__(self, func, types, args=(), kwargs=None):
        func = self._LIFT.get(func, func)
        lift = lambda v: torch.float64 if isinstance(v, torch.dtype) and v in _LOWER_FLOATS else v
        args = tuple(lift(a) for a in args)
        kwargs = {k: lift(v) for k, v in (kwargs or {}).items()}
        return func(*args, **kwargs)


def forward64(task, inputs):
    """The reference in float64: the model in double, floating inputs in double (integer inputs
    unchanged), torch's default dtype double while forward runs (tensors the code makes itself).
    Code that names a lower floating dtype and so cannot run that way is run again with every such
    dtype lifted to float64 (_Float64Everywhere); out of memory is not retried. `inputs` are not
    changed: each run gets copies."""
    model = _model64(task)
    saved = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    from .tasks import flatten_outputs

    def run(lifted):
        ins = [v.to(torch.float64, copy=True) if _is_float(v) else v.clone() if isinstance(v, torch.Tensor) else v
               for v in inputs]
        name = "calibrate: forward in float64" + (" (the floating dtypes the code names lifted)" if lifted else "")
        with stage(name):
            with precision("fp32", task.device), torch.no_grad(), \
                    (_Float64Everywhere() if lifted else contextlib.nullcontext()):
                out = model(*ins)
            return [o.detach() for o in flatten_outputs(out)]
    try:
        try:
            return run(False)
        except TaskError as e:
            if is_oom(str(e.detail)):
                raise
            first = e
        try:
            return run(True)
        except TaskError as e:
            raise TaskError(first.stage, "%s (and with the dtypes it names lifted: %s)" % (first.detail, e.detail), first.traceback)
    finally:
        torch.set_default_dtype(saved)


def _errors(out, out64):
    """(relative L2 error, max abs error / RMS of float64) of `out` against `out64`, over the
    elements finite in both; how many elements are finite in one and not the other; how many
    finite in both miss the published elementwise gate against float64 (|out - out64| > 1e-2 +
    1e-2 |out64|: elements the reference itself cannot judge to that tolerance); and the largest
    absolute error, in the output's own units (compare.cpp's slack is K times it). In chunks of
    _CHUNK elements, as published_close: whole-tensor float64 temporaries (a copy, the difference,
    the masked reference, their squares) came to about 9 times an fp32 output's bytes beside the
    float64 outputs, which a gigabyte output (8.6 GB at level 1) cannot have on an 80 GB GPU."""
    fa_all, fb_all = out.reshape(-1), out64.reshape(-1)
    mismatched, misses, n, ref2, diff2, max_abs = 0, 0, 0, 0.0, 0.0, 0.0
    for lo in range(0, fb_all.numel(), _CHUNK):
        a, b = fa_all[lo:lo + _CHUNK].double(), fb_all[lo:lo + _CHUNK].double()
        fa, fb = torch.isfinite(a), torch.isfinite(b)
        both = fa & fb
        mismatched += int((fa != fb).sum())
        n += int(both.sum())
        d = torch.where(both, a - b, torch.zeros_like(a))
        ref = torch.where(both, b, torch.zeros_like(b))
        ref2 += float((ref * ref).sum())
        diff2 += float((d * d).sum())
        max_abs = max(max_abs, float(d.abs().max()))
        misses += int((d.abs() > PUBLISHED_ATOL + PUBLISHED_RTOL * ref.abs()).sum())
        del a, b, fa, fb, both, d, ref
    if n == 0:
        return 0.0, 0.0, mismatched, misses, 0.0
    rms = math.sqrt(ref2 / n)
    if ref2 == 0:
        return ((0.0 if diff2 == 0 else float("inf")), (0.0 if diff2 == 0 else float("inf")), mismatched, misses,
                max_abs)
    return math.sqrt(diff2 / ref2), max_abs / rms, mismatched, misses, max_abs


MIN_FLOOR_SCALE = 0.1  # compare.hpp's kMinFloorScale


def calibrated_bound(e32, ep, k, floor, varying=1.0, floor_min=None):
    """compare.hpp's bound: fp32's K times fp32's error against float64 (e32), plus the claim's K times
    what its reference's error (ep) exceeds it (claim_term; for fp32, K = 8 and so 8 max(e32, ep)),
    plus the floor scaled by the output's varying fraction (varying_fractions) but at least floor_min
    (a tenth of the floor when not given), at most the published relative L2."""
    if floor_min is None:
        floor_min = floor * MIN_FLOOR_SCALE
    if math.isinf(e32) or math.isinf(ep):
        return PUBLISHED_REL_L2
    term = CALIBRATE_DEFAULTS["fp32"][0] * e32 + k * max(0.0, ep - e32)
    return min(term + max(floor * varying, floor_min), PUBLISHED_REL_L2)


def varying_fractions(sensitivity):
    """Per floating output ("outputs.i"), the part of its L2 norm that depends on the inputs, from the
    load's two plain draws (detect_insensitive's seed-1 check): ||o0 - o1|| / (sqrt(2) ||o1||), at
    most 1. About 1 for an output that is mostly input-dependent (two independent zero-mean draws);
    about ||v|| / ||c|| for c + v with c the same on every draw (a large bias, a block of constants
    beside the computed values). Most of a calibrated bound's floor is relative to this part, not to
    the whole norm, which a constant part dilutes: else int8 weights pass on a Linear with a bias of
    200 (red team R10's H3); a tenth stays relative to the whole (MIN_FLOOR_SCALE). {} when the load
    has no seed-1 check (outputs then get 1)."""
    checks = (sensitivity or {}).get("checks") or []
    if not checks or checks[0].get("against") != "seed 1":
        return {}
    return dict(checks[0].get("varying_fraction") or {})


def calibrate(task, inputs, ref_outs, claim, k=None, floor=None, floor_min=None):
    """Per floating output, the error of the reference at the claimed precision (and of the fp32
    reference) against float64 on these inputs, and the bound K * max(both) + floor (at most the
    published 5e-2). `inputs` are device inputs (not changed: each run gets a copy); `ref_outs`
    the fp32 reference outputs on them. Integer outputs are compared exactly and get no entry."""
    if claim not in CALIBRATE_REFERENCE:
        raise ValueError("calibrate: precision must be one of %s, not %r"
                         % (", ".join(sorted(CALIBRATE_REFERENCE)), claim))
    dk, dfloor = CALIBRATE_DEFAULTS[claim]
    k = dk if k is None else float(k)
    floor = dfloor if floor is None else float(floor)
    if floor_min is None:  # the claim's default with its default floor, else a tenth of the floor asked
        floor_min = FLOOR_MIN_DEFAULTS.get(claim) if floor == dfloor else None
        floor_min = floor * MIN_FLOOR_SCALE if floor_min is None else floor_min
    floor_min = float(floor_min)
    ref_prec = CALIBRATE_REFERENCE[claim]
    out64 = forward64(task, inputs)
    if ref_prec == "fp32":
        outp = ref_outs
    else:
        outp = task.forward(_clone_inputs(inputs), prec=ref_prec)
    if len(out64) != len(ref_outs) or len(outp) != len(ref_outs):
        raise TaskError("calibrate", "the float64 or %s forward returned %d/%d outputs, the reference %d"
                        % (ref_prec, len(out64), len(outp), len(ref_outs)))
    res = {}
    for i, (o32, op, o64) in enumerate(zip(ref_outs, outp, out64)):
        if not o32.is_floating_point():
            continue
        if o64.shape != o32.shape or op.shape != o32.shape:
            raise TaskError("calibrate", "output %d: the float64 or %s forward has shape %s/%s, the reference %s"
                            % (i, ref_prec, list(o64.shape), list(op.shape), list(o32.shape)))
        e32, m32, n32, x32, a32 = _errors(o32, o64)
        ep, mp, np_, xp, ap = (e32, m32, n32, x32, a32) if op is o32 else _errors(op, o64)
        varying = float((getattr(task, "varying", None) or {}).get("outputs.%d" % i, 1.0))
        bound = calibrated_bound(e32, ep, k, floor, varying, floor_min)
        entry = {"precision": claim, "reference_precision": ref_prec,
                 "ref_err_rel_l2": ep, "ref_err_max_abs_rel": mp,
                 "fp32_err_rel_l2": e32, "fp32_err_max_abs_rel": m32,
                 "ref_elementwise_misses": xp, "fp32_elementwise_misses": x32,
                 "ref_err_max_abs": ap, "fp32_err_max_abs": a32,
                 "k": k, "floor": floor, "floor_min": floor_min, "varying_fraction": varying, "bound_rel_l2": bound}
        if n32 or np_:
            entry["finite_mismatch"] = max(n32, np_)  # elements finite in float64 and not here, or back
        if task.device.type == "cpu" and ref_prec == "fp16":
            entry["note"] = "no fp16 autocast on the CPU: the fp16 reference ran in fp32"
        res["outputs.%d" % i] = entry
    del out64, outp
    return res


# ---- input variants ------------------------------------------------------------------------------------

VARIANTS = ("shift_scale", "outliers", "seed_stream")
# Each asked variant, then milder ones: the first whose reference stays finite wherever the plain
# draw's is. seed_stream (the task's own distribution, drawn later in the generator's stream) is
# always accepted: the task made it.
CHAINS = {"shift_scale": ("shift_scale", "scale", "seed_stream"),
          "outliers": ("outliers", "outliers_mild", "seed_stream"),
          "seed_stream": ("seed_stream",)}


def _generator(seed, kind, index):
    h = hashlib.sha256(("%d/%s/%d" % (int(seed), kind, index)).encode()).digest()
    g = torch.Generator()
    g.manual_seed(int.from_bytes(h[:8], "little") & ((1 << 63) - 1))
    return g


def _uniform(g, lo, hi):
    return lo + (hi - lo) * float(torch.rand(1, generator=g))


def _spread(t):
    """The tensor's scale for shifts and outliers: its standard deviation, else its largest |value|,
    else 1."""
    if t.numel() > 1:
        s = float(t.float().std())
        if math.isfinite(s) and s > 0:
            return s
    m = float(t.float().abs().max()) if t.numel() else 0.0
    return m if math.isfinite(m) and m > 0 else 1.0


def _transform(t, kind, g):
    """One floating tensor under a variant (a new tensor; `t` unchanged), and what was done."""
    if kind in ("shift_scale", "scale"):
        scale = _uniform(g, 0.5, 2.0)
        shift = 0.0
        if kind == "shift_scale":
            # Away from zero when the values have one sign (positive inputs stay positive: a log or a
            # square root still accepts them), else either way.
            lo, hi = float(t.min()), float(t.max())
            sign = 1.0 if lo >= 0 else -1.0 if hi <= 0 else (1.0 if float(torch.rand(1, generator=g)) < 0.5 else -1.0)
            shift = _uniform(g, 0.5, 2.0) * _spread(t) * sign
        out = t * scale + shift if shift else t * scale
        return out.to(t.dtype), {"scale": scale, "shift": shift}
    # outliers: a few elements per row (the last dimension) pushed out by `mag` spreads, sign kept
    # (positive inputs stay positive: logs and square roots still accept them).
    mag = 10.0 if kind == "outliers" else 3.0
    spread = _spread(t)
    out = t.clone()
    if t.numel() == 0:
        return out, {"per_row": 0, "magnitude": mag * spread}
    n = t.shape[-1] if t.dim() > 0 else 1
    rows = t.numel() // n
    per_row = min(4, max(1, n // 256))
    idx = torch.randint(0, n, (rows, per_row), generator=g).to(t.device)
    flat = out.reshape(rows, n)
    vals = flat.gather(1, idx)
    sign = torch.where(vals < 0, -torch.ones_like(vals), torch.ones_like(vals))
    flat.scatter_(1, idx, sign * (vals.abs() + mag * spread))
    return flat.reshape(t.shape), {"per_row": per_row, "magnitude": mag * spread}


_SHUFFLE_BLOCK = 1 << 24  # elements per randperm (memory: 8 bytes an element on the host)


def _shuffle(t, g):
    """An integer or bool tensor with its elements shuffled (the same values, other places): a
    structure the task's draws happen to have (rows alike, sorted indices, a mask's pattern) that a
    kernel could rely on is gone, while every value stays one the task's code accepts. Blocks of
    _SHUFFLE_BLOCK elements are shuffled apart, so a large tensor costs no more host memory."""
    flat = t.reshape(-1).clone()
    n = flat.numel()
    for lo in range(0, n, _SHUFFLE_BLOCK):
        m = min(_SHUFFLE_BLOCK, n - lo)
        perm = torch.randperm(m, generator=g).to(t.device) + lo
        flat[lo:lo + m] = flat[perm]
    return flat.reshape(t.shape)


# The first kind of each chain also shuffles integer and bool tensors (their milder fallbacks do not:
# a task whose code needs its integers' order, offsets that must rise, still gets a variant).
_SHUFFLES = ("shift_scale", "outliers")


def _finite_masks(outs):
    return [torch.isfinite(o) if o.is_floating_point() else None for o in outs]


def vary(task, values, asked, seed, redraw):
    """The inputs of one draw under the variant `asked`: floating tensors transformed, integer and
    bool tensors shuffled by the first kind of a chain (Python scalars unchanged), kept only if the reference on them stays
    finite wherever the reference on the plain draw is (and does not raise); else the next milder
    variant of CHAINS. `redraw()` gives the seed_stream draw. Returns (values, record)."""
    values, record, _ = _vary(task, values, asked, seed, redraw)
    return values, record


def _vary(task, values, asked, seed, redraw, plain_outs=None):
    """vary, given the plain draw's outputs when the caller has them (`plain_outs`: one forward
    less), and also returning the reference's outputs on the varied values (None for seed_stream,
    whose values were not run)."""
    if asked not in CHAINS:
        raise ValueError("variant must be one of %s, not %r" % (", ".join(VARIANTS), asked))
    record = {"asked": asked}
    tried = []
    plain_masks = None
    for kind in CHAINS[asked]:
        if kind == "seed_stream":
            record.update(applied="seed_stream", tried=tried)
            return redraw(), record, None
        if plain_masks is None:
            plain_masks = _finite_masks(plain_outs if plain_outs is not None
                                        else task.forward(task.to_device(_clone_inputs(values))))
        params = []
        varied = []
        for i, v in enumerate(values):
            if _is_float(v):
                nv, p = _transform(v, kind, _generator(seed, kind, i))
                p["input"] = i
                params.append(p)
                varied.append(nv)
            elif kind in _SHUFFLES and isinstance(v, torch.Tensor) and v.numel() > 1:
                params.append({"input": i, "shuffled": True})
                varied.append(_shuffle(v, _generator(seed, kind + "/shuffle", i)))
            else:
                varied.append(v)
        if not params:  # nothing to vary: the task's own distribution, another stream
            tried.append({"variant": kind, "rejected": "no floating inputs, no integer or bool tensors to shuffle"})
            continue
        why = None
        outs = None
        try:
            outs = task.forward(task.to_device(_clone_inputs(varied)))
            masks = _finite_masks(outs)
            for j, (pm, vm) in enumerate(zip(plain_masks, masks)):
                if pm is None or vm is None:
                    continue
                if pm.shape != vm.shape:
                    why = "outputs.%d changed shape" % j
                    break
                lost = int((pm & ~vm).sum())
                if lost:
                    why = "outputs.%d: %d element(s) not finite where the plain draw's are" % (j, lost)
                    break
        except TaskError as e:
            why = "%s: %s" % (e.stage, e.detail)
        if why is None:
            record.update(applied=kind, params=params, tried=tried)
            return varied, record, outs
        tried.append({"variant": kind, "rejected": why[:300]})
        del varied, outs
    raise AssertionError("unreachable: every chain ends with seed_stream")


# ---- stochastic references ------------------------------------------------------------------------------

def _rel_diff(a_list, b_list):
    """Largest relative L2 difference over the outputs (inf on a shape or dtype change, or where one
    is finite and the other not). In chunks of _CHUNK elements (gigabyte outputs: see _errors)."""
    worst = 0.0
    for a, b in zip(a_list, b_list):
        if a.shape != b.shape or a.dtype != b.dtype:
            return float("inf")
        if a.numel() == 0:
            continue
        af, bf = a.reshape(-1), b.reshape(-1)
        d, r = 0.0, 0.0
        for lo in range(0, af.numel(), _CHUNK):
            x, y = af[lo:lo + _CHUNK].double(), bf[lo:lo + _CHUNK].double()
            fx, fy = torch.isfinite(x), torch.isfinite(y)
            if bool((fx != fy).any()):
                return float("inf")
            both = fx & fy
            d += float(torch.where(both, x - y, torch.zeros_like(x)).pow(2).sum())
            r += float(torch.where(both, y, torch.zeros_like(y)).pow(2).sum())
            del x, y, fx, fy, both
        worst = max(worst, math.sqrt(d / r) if r > 0 else (0.0 if d == 0 else float("inf")))
    return worst


def _set_rng(seed):
    torch.manual_seed(seed)  # every device's generator too


def detect_stochastic(task, inputs):
    """Runs the reference three times on copies of `inputs`: twice from one RNG state, once from
    another. Stochastic (a live dropout, a random op in forward) when the other state changes the
    outputs and the same state does not, or changes them far more than a repeat does (a repeat may
    differ by atomics' order on a GPU: nondeterministic, not stochastic). Returns (outputs of the
    first run, record)."""
    from .filters import bit_equal
    _set_rng(0x5EED0001)
    a = task.forward(_clone_inputs(inputs))
    _set_rng(0x5EED0001)
    b = task.forward(_clone_inputs(inputs))
    same = bit_equal(a, b)
    d_same = 0.0 if same else _rel_diff(a, b)
    del b
    _set_rng(0x5EED0002)
    c = task.forward(_clone_inputs(inputs))
    other_equal = bit_equal(a, c)
    d_other = 0.0 if other_equal else _rel_diff(a, c)
    del c
    if other_equal:
        stochastic = False
    elif same:
        stochastic = True
    else:
        stochastic = d_other > 1e-3 and d_other > 100.0 * d_same
    return a, {"stochastic": stochastic, "same_rng_bit_equal": same, "rel_diff_same_rng": d_same,
               "rel_diff_other_rng": d_other}


# ---- references a judge cannot use ------------------------------------------------------------------
#
# Two kinds of task on which no verdict means anything, measured at load (PROTOCOL.md, "load"):
# - insensitive: the reference's outputs for other inputs (an independent draw, a variant) are within
#   the loosest bound a judge may apply (the published one) of the seed-0 outputs. A constant answer,
#   computed once from the params at init and copied in every forward, would then pass every check:
#   reward for no work. (18_SqueezeNet at default init: 7e-8 relative spread across images.)
# - ill_conditioned: the reference's own fp32 error against float64 (the calibration's fp32_err_rel_l2)
#   exceeds the cap of every bound (5e-2): the reference itself would fail, and so does every fp32
#   candidate, by the task's fault. (24_EfficientNetB2: BatchNorm over batches of 2 on 1x1 maps, 0.79.)

PUBLISHED_ATOL = PUBLISHED_RTOL = 1e-2  # compare.hpp's kPublishedTolerance (elementwise, floats)
STOCHASTIC_RNG = 0x5EED0001  # detect_stochastic's first state: its outputs are the seed-0 outputs here


def published_close(got, want):
    """Whether `got` passes as a candidate's outputs against the reference `want` under the published
    bound, by compare.cpp's rule: per element |got - want| <= 1e-2 + 1e-2 |want| (floats; exact for
    integer and bool outputs), NaN and Inf where the reference has them, and per floating output
    ||got - want|| / ||want|| <= 5e-2 over the reference's finite elements (when that norm is not 0).
    In chunks (outputs reach gigabytes). Returns (close, {"rel_l2", "max_abs", "elements_over",
    "varying_fraction"}): the worst output's numbers, and per floating output ("outputs.i") its
    min(1, rel_l2 / sqrt(2)) (1 where an element finite in `want` is not in `got`; varying_fractions
    reads it: for two draws of one distribution, ||got|| ~ ||want||)."""
    worst = {"rel_l2": 0.0, "max_abs": 0.0, "elements_over": 0, "varying_fraction": {}}
    if len(got) != len(want):
        return False, dict(worst, mismatch="%d outputs against %d" % (len(got), len(want)))
    close = True
    for i, (g, w) in enumerate(zip(got, want)):
        if g.shape != w.shape or g.dtype != w.dtype:
            return False, dict(worst, mismatch="outputs.%d: shape or dtype differs" % i)
        if g.numel() == 0:
            continue
        if not (w.is_floating_point() or w.is_complex()):
            over = int((g != w).sum())
            worst["elements_over"] += over
            close = close and over == 0
            continue
        gf, wf = g.reshape(-1), w.reshape(-1)
        over, max_abs, diff2, ref2 = 0, 0.0, 0.0, 0.0
        for lo in range(0, wf.numel(), _CHUNK):
            a, b = gf[lo:lo + _CHUNK].double(), wf[lo:lo + _CHUNK].double()
            fb, fa = torch.isfinite(b), torch.isfinite(a)
            lost = fb & ~fa  # finite in the reference, not here
            d = torch.where(fb & fa, (a - b).abs(), torch.zeros_like(a))
            bad = lost | (d > PUBLISHED_ATOL + PUBLISHED_RTOL * b.abs())
            bad |= torch.isnan(b) & ~torch.isnan(a)
            bad |= torch.isinf(b) & (a != b)
            over += int(bad.sum())
            if bool(lost.any()):
                max_abs, diff2 = float("inf"), float("inf")
            else:
                max_abs = max(max_abs, float(d.max()))
                diff2 += float((d * d).sum())
            ref = torch.where(fb, b, torch.zeros_like(b))
            ref2 += float((ref * ref).sum())
            del a, b, fb, fa, lost, d, bad, ref
        rel = math.sqrt(diff2 / ref2) if ref2 > 0 else 0.0
        worst["varying_fraction"]["outputs.%d" % i] = min(1.0, rel / math.sqrt(2.0)) if ref2 > 0 else 1.0
        worst["elements_over"] += over
        worst["max_abs"] = max(worst["max_abs"], max_abs)
        worst["rel_l2"] = max(worst["rel_l2"], rel)
        close = close and over == 0 and not (ref2 > 0 and rel > PUBLISHED_REL_L2)
    return close, worst


_CHUNK = 1 << 24  # elements per pass of published_close (128 MiB of float64 per temporary)


def _forward_fixed(task, inputs, copy=True):
    """The reference on `inputs` (on copies of them unless copy=False: inputs nobody reads again) from
    detect_stochastic's first RNG state (a stochastic reference then draws what the seed-0 outputs
    drew)."""
    _set_rng(STOCHASTIC_RNG)
    return task.forward(_clone_inputs(inputs) if copy else inputs)


def detect_insensitive(task, inputs, outs, keep_seed1=False):
    """Whether the seed-0 outputs `outs` (of `inputs`) pass, under the published bound, as the
    reference's outputs for an independent draw (seed 1) and for the shift_scale variant of the seed-0
    draw (when that variant fell back to seed_stream, outliers too): a constant answer would pass every
    check. Two (at most three) more forwards. Returns (record, seed-1 inputs when keep_seed1 else None,
    seed-1 outputs when keep_seed1 else None)."""
    checks = []
    inputs1, _ = task.make_inputs(1, stats=False, on_device=True)
    out1 = _forward_fixed(task, inputs1, copy=keep_seed1)  # kept: forward may work in place
    ok1, ev1 = published_close(outs, out1)
    from .filters import bit_equal
    checks.append(dict(ev1, against="seed 1", within=ok1, bit_equal=bit_equal(outs, out1)))
    if not keep_seed1:
        inputs1 = out1 = None
    for asked in ("shift_scale", "outliers"):
        def redraw():
            return task.make_inputs(0, stats=False, on_device=True, stream=1)[0]
        _set_rng(STOCHASTIC_RNG)
        varied, record, vouts = _vary(task, inputs, asked, 0, redraw, plain_outs=outs)
        if vouts is None:
            vouts = _forward_fixed(task, varied, copy=False)
        del varied
        okv, evv = published_close(outs, vouts)
        del vouts
        checks.append(dict(evv, against="variant " + record["applied"], within=okv))
        if record["applied"] != "seed_stream":
            break  # the variant the judge's trials apply first changed the values: enough
    insensitive = all(c["within"] for c in checks)
    return ({"insensitive": insensitive, "checks": checks,
             "bound": {"atol": PUBLISHED_ATOL, "rtol": PUBLISHED_RTOL, "rel_l2": PUBLISHED_REL_L2}},
            inputs1, out1)


def insensitive_on_own_draws(sensitivity, conditioning):
    """detect_insensitive's record, made insensitive when a constant answer passes the calibrated fp32
    bound on the task's own draws: the seed-1 outputs within every floating output's bound (K * its
    fp32 error against float64 + floor, from detect_ill_conditioned's record) of the seed-0 outputs
    in relative L2 (the worst output's), and within the published bound elementwise (integer outputs
    exactly). The variants are not asked here: a kernel can tell a variant from a plain draw (their
    statistics differ) and compute only on it, while the plain draws, all that timing sees, get the
    constant (red team R10: clamp(x, max=-6.6) on randn). Nothing when the bound is unknown (no float64
    run: kernel-check's task_uncalibrated). Returns the record."""
    if sensitivity.get("insensitive") is not False or (conditioning or {}).get("error"):
        return sensitivity
    checks = sensitivity.get("checks") or []
    if not checks or checks[0].get("against") != "seed 1" or not checks[0].get("within"):
        return sensitivity
    k, floor = CALIBRATE_DEFAULTS["fp32"][0], OWN_DRAWS_FLOOR
    outs = (conditioning or {}).get("outputs") or {}
    # The floor unscaled (varying fraction 1): the judge's bound (max(floor * f, floor_min) <= floor) is
    # within this one, so every task a constant passes is flagged, and those whose draws differ by less than the
    # floor with it (nearly constant outputs: nothing an honest kernel's reward should hang on).
    bound = min([calibrated_bound(o["fp32_err_rel_l2"], o["fp32_err_rel_l2"], k, floor) for o in outs.values()] or [0.0])
    spread = checks[0]["rel_l2"]
    if spread <= bound:
        sensitivity["insensitive"] = True
        sensitivity["own_draws"] = {"rel_l2": spread, "calibrated_bound_rel_l2": bound}
    return sensitivity


def detect_ill_conditioned(task, inputs, outs, stochastic):
    """Whether the reference's own fp32 error against float64 on `inputs` (calibrate's fp32_err_rel_l2,
    one float64 forward) exceeds the cap of every bound (PUBLISHED_REL_L2) for some floating output:
    the reference itself would fail. None when it cannot be measured (a stochastic reference, code that
    cannot run in float64), with the reason."""
    cap = PUBLISHED_REL_L2
    if stochastic:
        return {"ill_conditioned": None, "cap_rel_l2": cap,
                "error": "the reference is stochastic (another RNG state gives other outputs): no float64 run"}
    try:
        cal = calibrate(task, inputs, outs, "fp32")
    except TaskError as e:
        error = "%s: %s" % (e.stage, e.detail)
    except RuntimeError as e:  # out of memory for the float64 copy, an op without a float64 kernel
        text = str(e).splitlines()[0][:300] if str(e) else ""
        error = "calibrate: %s: %s" % (type(e).__name__, text)
    else:
        error = None
    if error is not None:
        # out_of_memory: the node's limit, not the task's (kernel-check: node_error, not task_uncalibrated).
        return {"ill_conditioned": None, "cap_rel_l2": cap, "error": error, "out_of_memory": is_oom(error)}
    per = {name: {"fp32_err_rel_l2": c["fp32_err_rel_l2"], "fp32_err_max_abs_rel": c["fp32_err_max_abs_rel"],
                  "fp32_elementwise_misses": c["fp32_elementwise_misses"]}
           for name, c in cal.items()}
    worst = max([c["fp32_err_rel_l2"] for c in cal.values()] or [0.0])
    return {"ill_conditioned": bool(worst > cap) or not math.isfinite(worst), "cap_rel_l2": cap,
            "fp32_err_rel_l2": worst, "outputs": per}

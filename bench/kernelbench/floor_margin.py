#!/usr/bin/env python3
"""How low could the calibrated bound's floor go? For each judged record of kernel-check (the
toolchain stage's toolchain.jsonl, or any check records), the trial closest to its bound, and the
floor that trial needs: the smallest floor F with which K * max(errors) + max(F * f, floor_min) still
covers it, i.e. 0 when K times the reference's error plus floor_min (the part relative to the whole
output, the calibration's floor_min, else a tenth of its floor) covers it, else
(measured - K * max(errors)) / f. A floor is safe for
honest bundles when it is above every passed record's need; an exploit fails once the floor is
below its need (red team R10's H2: 16-bit fixed-point weights, ~1.5e-5 relative on a Linear, under
the fp32 floor of 3e-5). compare.hpp's calibration_rule has the rule.

usage: floor_margin.py RECORDS.jsonl...      one line per record, then a JSON summary line
Standard library only.
"""
import json
import sys

MIN_FLOOR_SCALE = 0.1  # compare.hpp's kMinFloorScale: floor_min is a tenth of the floor where a record has none


def worst_trial(check):
    """(output, measured, bound, variant) of the trial whose measured / bound is largest."""
    best = None
    for t in check.get("trials") or []:
        tol = t.get("tolerance") or {}
        m, b = tol.get("measured_rel_l2"), tol.get("bound_rel_l2")
        if m is None or not b:
            continue
        if best is None or m / b > best[1] / best[2]:
            best = (tol.get("output", "outputs.0"), m, b, t.get("variant", "plain"))
    return best


def need_of(check, output, measured):
    """The floor this output's measured error needs, from the check's (warm call's) calibration."""
    entry = (check.get("calibration") or {}).get(output) or {}
    errs = [e for e in (entry.get("ref_err_rel_l2"), entry.get("fp32_err_rel_l2")) if e is not None]
    if not errs or "k" not in entry:
        return None, entry
    excess = measured - entry["k"] * max(errs)
    floor_min = entry.get("floor_min", entry.get("floor", 0.0) * MIN_FLOOR_SCALE)
    if excess <= floor_min:
        return 0.0, entry
    return excess / max(entry.get("varying_fraction", 1.0), 1e-12), entry


def main(paths):
    needs = {}
    for path in paths:
        for n, line in enumerate(open(path), 1):
            try:
                rec = json.loads(line)
            except ValueError:
                print("%s:%d: not JSON, skipped" % (path, n), file=sys.stderr)
                continue
            check = rec.get("check") or {}
            name = rec.get("name") or rec.get("candidate_id", "?")
            w = worst_trial(check)
            if w is None:
                print("%-44s %-20s (no calibrated trial)" % (name, check.get("status")))
                continue
            output, m, b, variant = w
            need, entry = need_of(check, output, m)
            prec = entry.get("precision", check.get("precision", "?"))
            print("%-44s %-20s %-5s %s %-13s measured %.2e bound %.2e  f %.2e  floor needed %s"
                  % (name, check.get("status"), prec, output, variant, m, b, entry.get("varying_fraction", 1.0),
                     "-" if need is None else "%.2e" % need))
            if need is not None and check.get("status") == "passed":
                needs.setdefault(prec, []).append((need, name))
    summary = {p: {"passed": len(v), "largest_need": max(v)[0], "of": max(v)[1]} for p, v in needs.items()}
    print(json.dumps({"floor_needed_by_passed": summary}))


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    main(sys.argv[1:])

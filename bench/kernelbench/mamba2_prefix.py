"""Why the 49_Mamba2ReturnFinalState bundle failed the calibrated bound (session 24), on the CPU.

The bundle's kernel (bundles/level3/_lib/tf_mamba2.cu) computes the reference's formula in fp32; on
the H100 its final state was 6.3e-6 (relative L2) from float64 where PyTorch's fp32 reference is
1.4e-6, and the calibrated bound (8 x that + the floor) failed it. This script rebuilds the task's
parameters (seed 0, the real shapes), runs the reference's arithmetic for the returned state in fp32
and float64, and an emulation of the kernel's arithmetic in the kernel's order, with its chunk prefix
sums in fp32 (as the kernel had them) and accumulated in double (as torch.cumsum of fp32 on the CPU
does; the kernel since this session). Measured (2 cores, about 5 minutes, Debian's torch 1.13):

    batch 2048 ref32 vs f64 1.355e-06
    {} emul vs f64 6.261e-06 | vs ref32 7.591e-06        (the serial fp32 prefix: the kernel's 6.27e-6 on the H100)
      top (b,h) shares of err^2: [1.0, ...]  norm2 share of those rows: [1.0, ...]
      their total A sums: [45.77, ...]
    {'acs64': True} emul vs f64 1.355e-06 | vs ref32 0.000e+00

One (batch, head) row, whose A sums to 45.8, carries the whole output's norm (exp(45.8) ~ 8e19) and
the whole error: exp() turns the prefix's rounding (~1e-6 absolute at 46) into relative error of the
state. With the prefix in double the emulation is PyTorch's reference to the last bit.

  /usr/bin/python3 bench/kernelbench/mamba2_prefix.py [BATCH]     (needs .kb/KernelBench and .kb/einops)
"""
import importlib.util
import math
import os
import sys
import time

import torch
import torch.nn.functional as F
t0 = time.time()
ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
sys.path.insert(0, os.path.join(ROOT, ".kb", "einops"))
spec = importlib.util.spec_from_file_location("m", os.path.join(ROOT, ".kb", "KernelBench", "level3", "49_Mamba2ReturnFinalState.py"))
m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)
torch.manual_seed(0)
Bs, T, H, P, N, Lc = int(sys.argv[1]) if len(sys.argv) > 1 else 2048, 128, 8, 64, 16, 64
NC = T // Lc
model = m.Model(2048, T, H, P, N, Lc)
A0, B0 = model.A.detach()[:Bs], model.B.detach()[:Bs]
X = torch.rand(Bs, T, H, P)

def ref(dtype):
    A, B, Xd = A0.to(dtype), B0.to(dtype), X.to(dtype)
    Xb = Xd.reshape(Bs, NC, Lc, H, P); Bb = B.reshape(Bs, NC, Lc, H, N)
    Ab = A.reshape(Bs, NC, Lc, H).permute(0, 3, 1, 2)
    Acs = torch.cumsum(Ab, -1)
    decay = torch.exp(Acs[..., -1:] - Acs)
    st = torch.einsum("bclhn,bhcl,bclhp->bchpn", Bb, decay, Xb)
    st = torch.cat([torch.zeros_like(st[:, :1]), st], 1)
    pad = F.pad(Acs[..., -1], (1, 0))
    xc = torch.cumsum(pad, -1)
    seg = xc[..., :, None] - xc[..., None, :]
    seg = seg.masked_fill(~torch.tril(torch.ones(NC + 1, NC + 1, dtype=torch.bool)), -math.inf)
    new = torch.einsum("bhzc,bchpn->bzhpn", torch.exp(seg), st)
    return new[:, -1]  # b h p n

def emul(acs64=False, sum64=False, exp64=False):
    A = A0.float(); Bm = B0.float()
    acc_t = torch.float64 if sum64 else torch.float32
    cs = [torch.zeros(Bs, H)]; sts = []
    for c in range(NC):
        acc = torch.zeros(Bs, H, dtype=torch.float64 if acs64 else torch.float32); Acs = []
        for l in range(Lc):
            acc = acc + A[:, c * Lc + l, :].to(acc.dtype); Acs.append(acc.float().clone())
        cs.append(cs[-1] + Acs[-1])
        st = torch.zeros(Bs, H, N, P, dtype=acc_t)
        for l in range(Lc):
            t = c * Lc + l
            d = Acs[-1] - Acs[l]
            e = torch.exp(d.double()).float() if exp64 else torch.exp(d)
            st = st + ((Bm[:, t, :, :, None] * e[:, :, None, None]) * X[:, t, :, None, :]).to(acc_t)
        sts.append(st.float())
    o = torch.zeros(Bs, H, N, P)
    for kk in range(1, NC + 1):
        o = o + torch.exp(cs[-1] - cs[kk])[:, :, None, None] * sts[kk - 1]
    return o.permute(0, 1, 3, 2)

def rel(a, b): return float(((a.double() - b.double()).pow(2).sum() / b.double().pow(2).sum()).sqrt())
r64 = ref(torch.float64); r32 = ref(torch.float32)
print("batch", Bs, "ref32 vs f64 %.3e" % rel(r32, r64), "%.0fs" % (time.time() - t0), flush=True)
for kw in [{}, {"acs64": True}]:
    o = emul(**kw)
    print(kw, "emul vs f64 %.3e | vs ref32 %.3e" % (rel(o, r64), rel(o, r32)), flush=True)
    if not kw:
        e2 = (o.double() - r64).pow(2).sum((2, 3)); tot = float(e2.sum())
        top = torch.topk(e2.reshape(-1), 5)
        print("  top (b,h) shares of err^2:", [round(float(v) / tot, 3) for v in top.values],
              "norm2 share of those rows:", [round(float(r64.reshape(Bs * H, -1)[i].pow(2).sum() / r64.pow(2).sum()), 3) for i in top.indices])
        cs_tot = A0.sum(1).reshape(-1)
        print("  their total A sums:", [round(float(cs_tot[i]), 2) for i in top.indices])
print("%.0fs" % (time.time() - t0))

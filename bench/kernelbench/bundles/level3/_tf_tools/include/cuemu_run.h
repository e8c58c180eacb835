// the scheduler (included last, after the kernels and their entries)
#include <cooperative_groups.h>
void cooperative_groups::grid_group::sync() { cu_yield(3); }
static std::map<std::pair<CuBlock*, int>, std::vector<float>> cu_slots;
float* cu_warp_slot(CuThread* t) {
  auto& v = cu_slots[{t->blk, t->warp}];
  if (v.empty()) v.resize(32);
  return v.data();
}
typedef void (*CuEntry)(void**);
static CuEntry cu_entry_fn;
static void** cu_entry_args;
static void cu_trampoline() {
  cu_entry_fn(cu_entry_args);
  cu_cur->wait = 4;
  swapcontext(&cu_cur->ctx, &cu_sched);
}
// Run one group of blocks concurrently until every thread is done. Returns 0, or 1 on deadlock.
static int cu_run_group(std::vector<CuBlock*>& blocks, std::vector<CuThread*>& all, unsigned nthr) {
  for (;;) {
    bool progressed = false;
    for (CuThread* t : all)
      if (t->wait == 0) {
        cu_cur = t;
        swapcontext(&cu_sched, &t->ctx);
        progressed = true;
      }
    // barriers: release when every live thread of the group waits on it
    bool any_live = false;
    for (CuBlock* b : blocks) {
      int live = 0, w1 = 0;
      for (CuThread* t : b->threads) if (t->wait != 4) { ++live; if (t->wait == 1) ++w1; }
      if (live) any_live = true;
      if (live && w1 == live) { for (CuThread* t : b->threads) if (t->wait == 1) t->wait = 0; progressed = true; }
      // warps
      for (unsigned w0 = 0; w0 < nthr; w0 += 32) {
        int wl = 0, ww = 0;
        for (unsigned k = w0; k < w0 + 32 && k < nthr; ++k) { CuThread* t = b->threads[k]; if (t->wait != 4) { ++wl; if (t->wait == 2) ++ww; } }
        if (wl && ww == wl) { for (unsigned k = w0; k < w0 + 32 && k < nthr; ++k) if (b->threads[k]->wait == 2) b->threads[k]->wait = 0; progressed = true; }
      }
    }
    if (!any_live) return 0;
    int gl = 0, gw = 0;
    for (CuThread* t : all) if (t->wait != 4) { ++gl; if (t->wait == 3) ++gw; }
    if (gl && gw == gl) { for (CuThread* t : all) if (t->wait == 3) t->wait = 0; progressed = true; }
    if (!progressed) {
      int c[5] = {0, 0, 0, 0, 0};
      for (CuThread* t : all) c[t->wait]++;
      fprintf(stderr, "cuemu: deadlock (run %d, block-barrier %d, warp %d, grid %d, done %d)\n", c[0], c[1], c[2], c[3], c[4]);
      return 1;
    }
  }
}
static const size_t CU_STACK = 256 * 1024;
extern "C" int cu_launch(int entry, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                         unsigned long shmem, void** args, int coop) {
  extern CuEntry cu_entries[];
  cu_entry_fn = cu_entries[entry];
  cu_entry_args = args;
  cu_grid = dim3{gx, gy, gz};
  cu_blockdim = dim3{bx, by, bz};
  unsigned nthr = bx * by * bz;
  size_t nblocks = (size_t)gx * gy * gz;
  size_t group = coop ? nblocks : 1;
  static std::vector<char*> stacks;
  while (stacks.size() < group * nthr) stacks.push_back((char*)malloc(CU_STACK));
  for (size_t b0 = 0; b0 < nblocks; b0 += group) {
    std::vector<CuBlock*> blocks;
    std::vector<CuThread*> all;
    for (size_t bi = b0; bi < b0 + group; ++bi) {
      CuBlock* blk = new CuBlock();
      if (shmem) { blk->dyn = malloc(shmem); memset(blk->dyn, 0xFF, shmem); }
      uint3 bid{(unsigned)(bi % gx), (unsigned)((bi / gx) % gy), (unsigned)(bi / ((size_t)gx * gy))};
      for (unsigned k = 0; k < nthr; ++k) {
        CuThread* t = new CuThread();
        t->tid = uint3{k % bx, (k / bx) % by, k / (bx * by)};
        t->bid = bid;
        t->blk = blk;
        t->warp = k / 32;
        t->stack = stacks[(bi - b0) * nthr + k];
        getcontext(&t->ctx);
        t->ctx.uc_stack.ss_sp = t->stack;
        t->ctx.uc_stack.ss_size = CU_STACK;
        t->ctx.uc_link = nullptr;
        makecontext(&t->ctx, cu_trampoline, 0);
        blk->threads.push_back(t);
        all.push_back(t);
      }
      blocks.push_back(blk);
    }
    int rc = cu_run_group(blocks, all, nthr);
    for (CuBlock* b : blocks) {
      for (auto& kv : b->smem) free(kv.second);
      free(b->dyn);
      for (CuThread* t : b->threads) { cu_slots.erase({b, t->warp}); delete t; }
      delete b;
    }
    if (rc) return rc;
  }
  return 0;
}

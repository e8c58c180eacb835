// The ordered parallel loop under the one record path (record_path.hpp), which every tool's records
// go through, with or without -j: items are read on one reader thread, worked on `lanes` threads,
// and emitted on the calling thread in input order. Emitting in one place is what lets a
// tool write its output and its store rows in order, from one thread.
//
// - At most `window` items are in flight (read and not yet emitted): a slow lane holds the reader
//   back instead of letting results pile up.
// - An exception from `next` ends the input, not the items read before it: they are worked and
//   emitted, then it is rethrown (a bad line: exit 2 after everything before it is written).
// - An exception from `work` or `emit` stops everything: no new item starts, the lanes finish the
//   ones they hold, the items before the failed one (in input order) are still emitted and nothing
//   from it on, and it is rethrown once the lanes have stopped; unless `next` is then blocked (see
//   below): the end then carries it (`failure`) instead, with `reader_blocked`.
// - `stop` (an interrupt, an output that is gone; asked before an item is started or queued, and
//   about every 20 ms) ends the loop early:
//   nothing new is read or started, the items already started are finished and emitted in order,
//   those read but not started are dropped. If `next` is then blocked (a slow pipe), its thread is
//   left running and the end says so: the caller must not return past what `next` uses (the record
//   path calls its reader_blocked, which ends the process).
#pragma once
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>

namespace ca {

struct OrderedLoopOptions {
  int lanes = 1;                // worker threads; `work` is told its lane (0 .. lanes-1)
  int64_t window = 0;           // items in flight at most; 0: twice the lanes
  std::function<bool()> stop;  // true ends the loop early (see above); asked from any of its threads
};

struct OrderedLoopEnd {
  int64_t read = 0, emitted = 0, dropped = 0;
  bool stopped = false;         // `stop` ended it
  bool reader_blocked = false;  // ... while `next` was blocked: its thread was left running
  // A failure of `work` or `emit` while `next` was blocked: returned here, not rethrown (the caller
  // must end the process before `next`'s frame goes; the record path does).
  std::exception_ptr failure;
};

namespace detail {
OrderedLoopEnd run_ordered_erased(const OrderedLoopOptions& options, std::function<void*()> next,
                                  const std::function<void(int, void*)>& work, const std::function<void(void*)>& emit,
                                  std::function<void(void*)> discard);
}  // namespace detail

// `next` fills a fresh Item and returns true, or returns false at the end of the input.
template <class Item>
OrderedLoopEnd run_ordered(const OrderedLoopOptions& options, std::function<bool(Item&)> next,
                           const std::function<void(int lane, Item&)>& work, const std::function<void(Item&)>& emit) {
  return detail::run_ordered_erased(
      options,
      [next = std::move(next)]() -> void* {
        auto item = std::make_unique<Item>();
        return next(*item) ? item.release() : nullptr;
      },
      [&work](int lane, void* p) { work(lane, *static_cast<Item*>(p)); },
      [&emit](void* p) {
        std::unique_ptr<Item> item(static_cast<Item*>(p));
        emit(*item);
      },
      [](void* p) { delete static_cast<Item*>(p); });
}

}  // namespace ca

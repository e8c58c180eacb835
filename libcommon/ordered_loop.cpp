// The ordered parallel loop (see ordered_loop.hpp).
#include "libcommon/ordered_loop.hpp"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <condition_variable>
#include <deque>
#include <exception>
#include <map>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "libcommon/errors.hpp"

namespace ca::detail {
namespace {

// What the reader thread shares with the loop. Held by a shared_ptr: a reader left blocked in `next`
// after a stop outlives the loop's frame, and discards what it reads afterwards.
struct LoopState {
  std::mutex mu;
  std::condition_variable cv;
  std::deque<std::pair<int64_t, void*>> queue;  // read, not started
  std::map<int64_t, void*> done;                // worked, not emitted
  int64_t read = 0, started = 0, emitted = 0, window = 1;
  // The input index of the item whose work or emit failed first: every item before it was started
  // (the queue is taken in order), is finished by its lane and still emitted; nothing from it on.
  int64_t failure_at = INT64_MAX;
  bool input_done = false, in_next = false, stopping = false, abandoned = false;
  std::exception_ptr input_failure, failure;
  std::function<void*()> next;
  std::function<void(void*)> discard;
  std::function<bool()> stop;
  // mu held: whether to stop now (the caller's predicate is asked by whichever thread gets here).
  bool stop_now() {
    if (!stopping && stop && stop()) {
      stopping = true;
      stopped_by_caller = true;
      cv.notify_all();
    }
    return stopping;
  }
  bool stopped_by_caller = false;
};

void read_items(const std::shared_ptr<LoopState>& st) {
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(st->mu);
      st->cv.wait(lock, [&] { return st->stopping || st->failure || st->read - st->emitted < st->window; });
      if (st->stopping || st->failure) {
        st->input_done = true;
        st->cv.notify_all();
        return;
      }
      st->in_next = true;
    }
    void* item = nullptr;
    std::exception_ptr error;
    try {
      item = st->next();
    } catch (...) {
      error = std::current_exception();
    }
    std::lock_guard<std::mutex> lock(st->mu);
    st->in_next = false;
    st->cv.notify_all();
    if (st->abandoned || st->stop_now() || st->failure || error || !item) {
      if (item) st->discard(item);
      if (error && !st->abandoned) st->input_failure = error;
      st->input_done = true;
      return;
    }
    st->queue.emplace_back(st->read++, item);
  }
}

// A lane: takes the next item read, in input order, and works it, until the input is done, a stop,
// or a failure (its own or another lane's). A failed item is kept in `done` like the others (it is
// discarded at the end, never emitted).
void work_lane(const std::shared_ptr<LoopState>& st, int lane, const std::function<void(int, void*)>& work) {
  for (;;) {
    std::pair<int64_t, void*> item;
    {
      std::unique_lock<std::mutex> lock(st->mu);
      st->cv.wait(lock, [&] { return st->stopping || st->failure || !st->queue.empty() || st->input_done; });
      if (st->stop_now() || st->failure || st->queue.empty()) return;
      item = st->queue.front();
      st->queue.pop_front();
      ++st->started;
    }
    std::exception_ptr error;
    try {
      work(lane, item.second);
    } catch (...) {
      error = std::current_exception();
    }
    std::lock_guard<std::mutex> lock(st->mu);
    st->done.emplace(item.first, item.second);
    if (error && !st->failure) st->failure = error;
    if (error) st->failure_at = std::min(st->failure_at, item.first);
    st->cv.notify_all();
    if (error) return;
  }
}

// The next item to emit, in input order, or null when there is none to come: the input is done and
// everything read was emitted, a stop and everything started was emitted, or a failure and everything
// before it was emitted (they were all started, so each is done or about to be: its lane finishes it).
void* next_to_emit(LoopState& st, bool poll) {
  std::unique_lock<std::mutex> lock(st.mu);
  for (;;) {
    st.stop_now();
    if (st.failure && st.emitted >= st.failure_at) return nullptr;
    if (auto it = st.done.find(st.emitted); it != st.done.end()) {
      void* item = it->second;
      st.done.erase(it);
      ++st.emitted;
      st.cv.notify_all();  // room for the reader
      return item;
    }
    if (st.input_done && st.queue.empty() && st.emitted >= st.read) return nullptr;
    if (st.stopping && st.emitted >= st.started) return nullptr;
    if (poll) st.cv.wait_for(lock, std::chrono::milliseconds(20));
    else st.cv.wait(lock);
  }
}

// Emits in order, here, on the caller's thread, until next_to_emit says the end; a failed emit is
// the loop's failure at that item.
void emit_in_order(LoopState& st, bool poll, const std::function<void(void*)>& emit) {
  while (void* item = next_to_emit(st, poll)) {
    try {
      emit(item);
    } catch (...) {
      std::lock_guard<std::mutex> lock(st.mu);
      if (!st.failure) st.failure = std::current_exception();
      st.failure_at = std::min(st.failure_at, st.emitted - 1);
      st.cv.notify_all();
      return;
    }
  }
}

// After the emitting: the lanes stopped and joined, the reader joined (or, blocked in `next` after a
// stop or a failure, given 200 ms and then left to itself: a child answering its parent one record at
// a time would otherwise wait for a line the parent sends only after that answer), what was read and
// not emitted discarded and counted.
void wind_down(const std::shared_ptr<LoopState>& st, std::vector<std::thread>& lanes, std::thread& reader,
               OrderedLoopEnd& end) {
  {
    std::lock_guard<std::mutex> lock(st->mu);
    end.stopped = st->stopped_by_caller;
    st->stopping = true;
    st->cv.notify_all();
  }
  for (auto& t : lanes) t.join();
  {
    std::unique_lock<std::mutex> lock(st->mu);
    if ((end.stopped || st->failure) && st->in_next &&
        !st->cv.wait_for(lock, std::chrono::milliseconds(200), [&] { return !st->in_next; })) {
      st->abandoned = true;
      end.reader_blocked = true;
    }
  }
  if (end.reader_blocked) reader.detach();
  else reader.join();
  std::lock_guard<std::mutex> lock(st->mu);
  for (auto& [index, item] : st->queue) {
    st->discard(item);
    ++end.dropped;
  }
  st->queue.clear();
  for (auto& [index, item] : st->done) {
    st->discard(item);
    ++end.dropped;
  }
  st->done.clear();
  end.read = st->read;
  end.emitted = st->emitted;
}

}  // namespace

OrderedLoopEnd run_ordered_erased(const OrderedLoopOptions& options, std::function<void*()> next,
                                  const std::function<void(int, void*)>& work, const std::function<void(void*)>& emit,
                                  std::function<void(void*)> discard) {
  if (options.lanes < 1) throw UsageError("-j must be at least 1");
  auto st = std::make_shared<LoopState>();
  st->window = options.window > 0 ? options.window : 2 * static_cast<int64_t>(options.lanes);
  st->next = std::move(next);
  st->discard = std::move(discard);
  st->stop = options.stop;
  std::vector<std::thread> lanes;
  for (int lane = 0; lane < options.lanes; ++lane) lanes.emplace_back([st, lane, &work] { work_lane(st, lane, work); });
  std::thread reader(read_items, st);
  emit_in_order(*st, static_cast<bool>(options.stop), emit);
  OrderedLoopEnd end;
  wind_down(st, lanes, reader, end);
  std::lock_guard<std::mutex> lock(st->mu);
  if (st->failure && end.reader_blocked) {  // not rethrown: the caller must end the process (below `next`'s frame)
    end.failure = st->failure;
    return end;
  }
  if (st->failure) std::rethrow_exception(st->failure);
  if (st->input_failure) std::rethrow_exception(st->input_failure);
  return end;
}

}  // namespace ca::detail

// The ordered parallel loop (libcommon/ordered_loop.hpp): order, the window, each failure's rule,
// a stop, and a reader left blocked by a stop.
#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <future>
#include <mutex>
#include <random>
#include <stdexcept>
#include <thread>
#include <vector>

#include "libcommon/errors.hpp"
#include "libcommon/ordered_loop.hpp"

namespace {
struct Item {
  int64_t n = 0;
  int lane = -1;
  int64_t value = 0;
};
void nap(int ms) { std::this_thread::sleep_for(std::chrono::milliseconds(ms)); }
}  // namespace

TEST_CASE("run_ordered: every item worked once, on every lane, emitted in input order within the window") {
  std::atomic<int64_t> in_flight{0}, most{0};
  std::vector<int64_t> out;
  std::vector<int> lanes_seen(4, 0);
  int64_t n = 0;
  std::mt19937 rng(7);
  std::vector<int> delays(200);
  for (int& d : delays) d = static_cast<int>(rng() % 4);
  ca::OrderedLoopOptions o;
  o.lanes = 4;
  o.window = 6;
  auto end = ca::run_ordered<Item>(
      o,
      [&](Item& it) {
        if (n == 200) return false;
        it.n = n++;
        int64_t now = ++in_flight;
        int64_t m = most.load();
        while (now > m && !most.compare_exchange_weak(m, now)) {
        }
        return true;
      },
      [&](int lane, Item& it) {
        nap(delays[static_cast<std::size_t>(it.n)]);
        it.lane = lane;
        it.value = it.n * it.n;
      },
      [&](Item& it) {
        --in_flight;
        CHECK(it.value == it.n * it.n);
        ++lanes_seen[static_cast<std::size_t>(it.lane)];
        out.push_back(it.n);
      });
  CHECK(end.read == 200);
  CHECK(end.emitted == 200);
  CHECK(end.dropped == 0);
  CHECK_FALSE(end.stopped);
  REQUIRE(out.size() == 200);
  for (int64_t i = 0; i < 200; ++i) CHECK(out[static_cast<std::size_t>(i)] == i);
  CHECK(most.load() <= 6 + 1);  // the window, and the one being emitted
  CHECK(most.load() >= 4);      // and the lanes were kept busy
  for (int c : lanes_seen) CHECK(c > 0);
}

TEST_CASE("run_ordered: a bad input line ends the input; what was read before it is emitted, then it is rethrown") {
  std::vector<int64_t> out;
  int64_t n = 0;
  ca::OrderedLoopOptions o;
  o.lanes = 3;
  auto run = [&] {
    ca::run_ordered<Item>(
        o,
        [&](Item& it) {
          if (n == 10) throw ca::InputError("line 11: not JSON");
          it.n = n++;
          return true;
        },
        [&](int, Item& it) { nap(static_cast<int>(10 - it.n)); }, [&](Item& it) { out.push_back(it.n); });
  };
  CHECK_THROWS_WITH_AS(run(), "line 11: not JSON", ca::InputError);
  REQUIRE(out.size() == 10);
  for (int64_t i = 0; i < 10; ++i) CHECK(out[static_cast<std::size_t>(i)] == i);
}

TEST_CASE("run_ordered: a failed job or a failed write stops everything and is rethrown") {
  for (int which = 0; which < 2; ++which) {
    std::vector<int64_t> out;
    std::atomic<int64_t> worked{0};
    int64_t n = 0;
    ca::OrderedLoopOptions o;
    o.lanes = 2;
    auto run = [&] {
      ca::run_ordered<Item>(
          o,
          [&](Item& it) {
            it.n = n++;
            return n <= 1000;
          },
          [&](int, Item& it) {
            ++worked;
            if (which == 0 && it.n == 5) throw ca::InternalError("job 5 failed");
          },
          [&](Item& it) {
            if (which == 1 && it.n == 5) throw ca::InputError("stdout: closed");
            out.push_back(it.n);
          });
    };
    if (which == 0) CHECK_THROWS_WITH_AS(run(), "job 5 failed", ca::InternalError);
    else CHECK_THROWS_WITH_AS(run(), "stdout: closed", ca::InputError);
    // Never a record at or after the failed one, and every record before it: 0..4 were started
    // before job 5 (the queue is taken in order), so their lanes finish them and they are written.
    CHECK(out.size() == 5);
    for (std::size_t i = 0; i < out.size(); ++i) CHECK(out[i] == static_cast<int64_t>(i));
    CHECK(worked.load() < 20);  // the window held the rest back
  }
}

TEST_CASE("run_ordered: a job that fails at once does not lose a slower one before it") {
  // Item 0 is slow, item 1 fails at once: item 0 is still written (it was kernel-prof's lost
  // pass-through record before a record that needs the GPU on a machine without one).
  for (int lanes : {1, 2, 4}) {
    CAPTURE(lanes);
    std::vector<int64_t> out;
    int64_t n = 0;
    ca::OrderedLoopOptions o;
    o.lanes = lanes;
    CHECK_THROWS_WITH_AS(ca::run_ordered<Item>(
                             o,
                             [&](Item& it) {
                               it.n = n++;
                               return n <= 10;
                             },
                             [&](int, Item& it) {
                               if (it.n == 0) nap(150);
                               if (it.n == 1) throw ca::EnvironmentError("no GPU");
                             },
                             [&](Item& it) { out.push_back(it.n); }),
                         "no GPU", ca::EnvironmentError);
    CHECK(out == std::vector<int64_t>{0});
  }
}

TEST_CASE("run_ordered: a stop finishes and emits what was started, drops the rest, and leaves a blocked reader") {
  // The reader blocks (a slow pipe) after 3 items; the stop comes while two are being worked.
  std::mutex mu;
  std::condition_variable cv;
  bool release = false;
  std::atomic<bool> stop{false};
  std::atomic<int> started{0};
  std::vector<int64_t> out;
  auto gate = std::make_shared<std::atomic<bool>>(false);
  int64_t n = 0;
  ca::OrderedLoopOptions o;
  o.lanes = 2;
  o.stop = [&] { return stop.load(); };
  std::thread stopper([&] {
    while (started.load() < 2) nap(1);
    stop = true;
  });
  auto end = ca::run_ordered<Item>(
      o,
      [&, gate](Item& it) {
        if (n == 3) {
          while (!gate->load()) nap(5);  // blocked until the test lets it go, long after the loop
          return false;
        }
        it.n = n++;
        return true;
      },
      [&](int, Item& it) {
        ++started;
        {
          std::unique_lock<std::mutex> lock(mu);
          cv.wait_for(lock, std::chrono::milliseconds(300), [&] { return release; });
        }
        it.value = 1;
      },
      [&](Item& it) {
        CHECK(it.value == 1);
        out.push_back(it.n);
      });
  stopper.join();
  CHECK(end.stopped);
  CHECK(end.reader_blocked);
  CHECK(end.read == 3);
  CHECK(end.emitted == static_cast<int64_t>(out.size()));
  CHECK(out.size() >= 2);
  for (std::size_t i = 0; i < out.size(); ++i) CHECK(out[i] == static_cast<int64_t>(i));
  CHECK(end.emitted + end.dropped == end.read);
  gate->store(true);  // the abandoned reader returns and ends by itself
  nap(50);
}

TEST_CASE("run_ordered: a failure while the reader is blocked returns with it, not a wait for more input") {
  // A kernel-prof child answers its parent one record at a time: the parent sends the next line only
  // after the answer, so after the first record the reader is blocked. When that record's work fails
  // (its GPU context is gone), the loop must come back carrying the failure (the record path then
  // ends the process with its status), not join a reader that waits for a line that never comes.
  auto gate = std::make_shared<std::atomic<bool>>(false);
  auto n = std::make_shared<std::atomic<int64_t>>(0);
  std::vector<int64_t> out;
  auto run = std::async(std::launch::async, [&, gate, n] {
    return ca::run_ordered<Item>(
        ca::OrderedLoopOptions{},
        [gate, n](Item& it) {
          if (n->load() == 1) {
            while (!gate->load()) nap(5);  // the parent's next line: only after our answer
            return false;
          }
          it.n = (*n)++;
          return true;
        },
        [](int, Item&) {
          nap(50);  // the reader is blocked by now
          throw ca::Error(75, "a candidate killed this process's GPU context");
        },
        [&](Item& it) { out.push_back(it.n); });
  });
  const bool returned = run.wait_for(std::chrono::seconds(5)) == std::future_status::ready;
  CHECK_MESSAGE(returned, "the loop waited for the blocked reader");
  if (!returned) gate->store(true);
  ca::OrderedLoopEnd end = run.get();
  gate->store(true);  // the abandoned reader returns and ends by itself
  nap(50);
  CHECK(end.reader_blocked);
  REQUIRE(end.failure);
  CHECK(out.empty());
  try {
    std::rethrow_exception(end.failure);
  } catch (const ca::Error& e) {
    CHECK(e.exit_code == 75);
  }
}

TEST_CASE("run_ordered: no lanes is a usage error") {
  ca::OrderedLoopOptions o;
  o.lanes = 0;
  CHECK_THROWS_AS(ca::run_ordered<Item>(o, [](Item&) { return false; }, [](int, Item&) {}, [](Item&) {}),
                  ca::UsageError);
}

// Run store implementation over the SQLite C API (linked statically).
#include "libcommon/store.hpp"

#include <fcntl.h>
#include <sqlite3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <variant>

#include "ca/version.hpp"
#include "libcommon/cli.hpp"
#include "libcommon/atomic_file.hpp"
#include "libcommon/errors.hpp"
#include "libcommon/fields.hpp"
#include "libcommon/file_identity.hpp"
#include "libcommon/ids.hpp"
#include "libcommon/signals.hpp"

namespace ca {
namespace {

using Value = std::variant<std::nullptr_t, std::string, double, int64_t>;

// SQLite's memory, its larger blocks pooled. A reader's scan makes SQLite allocate a buffer the size
// of each row's body (read whole for json_valid / json_extract, and its parse) and free it at the next
// row, while the reader keeps small objects of every row (report's rows). From the C heap the small
// objects land in the freed buffers' holes, each next buffer comes from fresh memory, and the process
// grows by what it read, not by what it keeps: 50,000 profiles of 20 KB took `run-store report` to
// 1 GB. Blocks of 2 KiB .. 1 MiB come from per-size free lists instead (powers of two), so a buffer
// freed at one row is the next row's buffer, and what the pool holds is bounded by the most SQLite
// had at once (and by kMaxFree a class). Other sizes go to malloc as before.
namespace sqlite_pool {
constexpr int kMinShift = 12, kMaxShift = 20;  // pooled blocks: 4 KiB .. 1 MiB, each with a 16-byte header
constexpr std::size_t kHeader = 16;            // keeps malloc's 16-byte alignment
constexpr int kMaxFree = 64;                   // free blocks kept per class; more go back to malloc
std::mutex g_mutex;
void* g_free[kMaxShift + 1] = {};
int g_free_count[kMaxShift + 1] = {};

// The class of a request of n bytes (0: not pooled).
int class_of(std::size_t n) {
  if (n <= 2048 || n > (std::size_t{1} << kMaxShift) - kHeader) return 0;
  int c = kMinShift;
  while ((std::size_t{1} << c) - kHeader < n) ++c;
  return c;
}
std::size_t usable(int c, std::size_t n) { return c ? (std::size_t{1} << c) - kHeader : (n + 7) & ~std::size_t{7}; }

// Header: [0] the usable size, [1] the class.
void* x_malloc(int n) {
  if (n <= 0) return nullptr;
  const int c = class_of(static_cast<std::size_t>(n));
  if (c) {
    std::lock_guard<std::mutex> lock(g_mutex);
    if (void* p = g_free[c]) {  // a free block's link to the next is kept where its user's bytes go
      std::memcpy(&g_free[c], p, sizeof(void*));
      --g_free_count[c];
      return p;
    }
  }
  const std::size_t size = usable(c, static_cast<std::size_t>(n));
  auto* block = static_cast<char*>(std::malloc(size + kHeader));
  if (!block) return nullptr;
  const uint64_t header[2] = {size, static_cast<uint64_t>(c)};
  std::memcpy(block, header, sizeof header);
  return block + kHeader;
}
uint64_t header_of(void* p, int i) {
  uint64_t h[2];
  std::memcpy(h, static_cast<char*>(p) - kHeader, sizeof h);
  return h[i];
}
void x_free(void* p) {
  if (!p) return;
  char* block = static_cast<char*>(p) - kHeader;
  const int c = static_cast<int>(header_of(p, 1));
  if (c) {
    std::lock_guard<std::mutex> lock(g_mutex);
    if (g_free_count[c] < kMaxFree) {
      std::memcpy(p, &g_free[c], sizeof(void*));  // the link past the header: the header stays as it is
      g_free[c] = p;
      ++g_free_count[c];
      return;
    }
  }
  std::free(block);
}
int x_size(void* p) { return p ? static_cast<int>(header_of(p, 0)) : 0; }
void* x_realloc(void* p, int n) {
  if (!p) return x_malloc(n);
  if (n <= 0) return nullptr;
  const std::size_t have = header_of(p, 0);
  if (static_cast<std::size_t>(n) <= have && class_of(static_cast<std::size_t>(n)) == static_cast<int>(header_of(p, 1)))
    return p;
  void* q = x_malloc(n);
  if (!q) return nullptr;
  std::memcpy(q, p, std::min(have, static_cast<std::size_t>(n)));
  x_free(p);
  return q;
}
int x_roundup(int n) { return n <= 0 ? n : static_cast<int>(usable(class_of(static_cast<std::size_t>(n)), static_cast<std::size_t>(n))); }
int x_init(void*) { return SQLITE_OK; }
void x_shutdown(void*) {}

// Before SQLite's first use in the process (once; a SQLite already started keeps its own allocator).
void install() {
  static std::once_flag once;
  std::call_once(once, [] {
    static const sqlite3_mem_methods methods = {x_malloc, x_free, x_realloc, x_size, x_roundup, x_init, x_shutdown, nullptr};
    (void)sqlite3_config(SQLITE_CONFIG_MALLOC, &methods);
  });
}
}  // namespace sqlite_pool

// Schema migrations: entry k moves user_version k to k+1. Never edit an entry once released.
const std::vector<std::string> kMigrations = {
    R"SQL(
CREATE TABLE runs (run_id TEXT PRIMARY KEY, tool TEXT NOT NULL, version TEXT NOT NULL, argv TEXT NOT NULL,
  host TEXT NOT NULL, gpu TEXT, started_at TEXT NOT NULL, ended_at TEXT, exit_status INTEGER, counts TEXT);
CREATE TABLE tasks (task_id TEXT PRIMARY KEY, run_id TEXT, body TEXT NOT NULL);
CREATE TABLE candidates (candidate_id TEXT PRIMARY KEY, task_id TEXT, run_id TEXT, body TEXT NOT NULL);
CREATE TABLE checks (candidate_id TEXT NOT NULL, run_id TEXT NOT NULL, task_id TEXT, status TEXT,
  correct INTEGER, body TEXT NOT NULL, PRIMARY KEY (candidate_id, run_id));
CREATE TABLE profiles (candidate_id TEXT NOT NULL, run_id TEXT NOT NULL, task_id TEXT, time_us REAL,
  speedup_vs_eager REAL, speedup_vs_compile REAL, body TEXT NOT NULL, PRIMARY KEY (candidate_id, run_id));
CREATE TABLE baselines (baseline_key TEXT PRIMARY KEY, task_id TEXT NOT NULL, gpu TEXT, driver TEXT,
  torch_version TEXT, method TEXT, time_us REAL, run_id TEXT, body TEXT NOT NULL);
CREATE TABLE rewards (candidate_id TEXT NOT NULL, run_id TEXT NOT NULL, task_id TEXT, value REAL,
  scheme TEXT, body TEXT NOT NULL, PRIMARY KEY (candidate_id, run_id));
CREATE TABLE episodes (candidate_id TEXT NOT NULL, run_id TEXT NOT NULL, task_id TEXT, body TEXT NOT NULL,
  PRIMARY KEY (candidate_id, run_id));
CREATE TABLE ppo_steps (step_id TEXT NOT NULL, run_id TEXT NOT NULL, body TEXT NOT NULL,
  PRIMARY KEY (step_id, run_id));
CREATE TABLE filter_results (task_id TEXT NOT NULL, run_id TEXT NOT NULL, kept INTEGER NOT NULL,
  reason TEXT, body TEXT NOT NULL, PRIMARY KEY (task_id, run_id));
CREATE INDEX checks_task ON checks(task_id);
CREATE INDEX profiles_task ON profiles(task_id);
CREATE INDEX rewards_task ON rewards(task_id);
)SQL",
    // 1 -> 2: the run that started this one (agent-run's locked kernel-check/kernel-prof calls), as the
    // child read it from CUDA_AGENT_PARENT_RUN: summary folds by it, never by overlapping times.
    R"SQL(
ALTER TABLE runs ADD COLUMN parent_run_id TEXT;
)SQL",
};

const std::vector<std::string> kTables = {"runs",     "tasks",   "candidates", "checks",    "profiles",
                                          "baselines", "rewards", "episodes",   "ppo_steps", "filter_results"};

std::string now_iso() {
  auto now = std::chrono::system_clock::now();
  std::time_t t = std::chrono::system_clock::to_time_t(now);
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000;
  char buf[40];
  std::tm tm{};
  gmtime_r(&t, &tm);
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%S", &tm);
  char out[48];
  std::snprintf(out, sizeof out, "%s.%03dZ", buf, static_cast<int>(ms));
  return out;
}

std::string hostname() {
  char buf[256] = {0};
  gethostname(buf, sizeof buf - 1);
  return buf;
}

class Statement {
 public:
  Statement(sqlite3* db, const std::string& sql) : db_(db) {
    if (sqlite3_prepare_v2(db, sql.c_str(), -1, &stmt_, nullptr) != SQLITE_OK)
      throw InputError(std::string("store: ") + sqlite3_errmsg(db) + " in: " + sql.substr(0, 200));
  }
  ~Statement() { sqlite3_finalize(stmt_); }
  void bind(const std::vector<Value>& values) {
    for (std::size_t i = 0; i < values.size(); ++i) {
      int k = static_cast<int>(i + 1);
      const Value& v = values[i];
      if (std::holds_alternative<std::nullptr_t>(v)) sqlite3_bind_null(stmt_, k);
      else if (auto* s = std::get_if<std::string>(&v)) sqlite3_bind_text(stmt_, k, s->data(), (int)s->size(), SQLITE_TRANSIENT);
      else if (auto* d = std::get_if<double>(&v)) {
        if (std::isfinite(*d)) sqlite3_bind_double(stmt_, k, *d);
        else sqlite3_bind_null(stmt_, k);
      } else sqlite3_bind_int64(stmt_, k, std::get<int64_t>(v));
    }
  }
  bool step() {
    int rc = sqlite3_step(stmt_);
    if (rc == SQLITE_ROW) return true;
    if (rc == SQLITE_DONE) return false;
    throw EnvironmentError(std::string("store: ") + sqlite3_errmsg(db_));
  }
  sqlite3_stmt* get() { return stmt_; }

 private:
  sqlite3* db_;
  sqlite3_stmt* stmt_ = nullptr;
};

Value optional_number(const Json& r, const char* key) {
  if (r.contains(key) && r[key].is_number()) return r[key].get<double>();
  if (r.contains(key) && r[key].is_object() && r[key].contains("median") && r[key]["median"].is_number())
    return r[key]["median"].get<double>();
  return nullptr;
}

std::string text_of(const Json& r, const char* key) {
  return r.contains(key) && r[key].is_string() ? r[key].get<std::string>() : std::string();
}

// An id that is there but is not a non-empty string is a mistyped field, never "no id": a numeric
// candidate_id must not file a candidate as a task over the real task's row.
std::string id_of(const Json& r, const char* key) {
  if (!r.contains(key)) return "";
  if (!r[key].is_string()) throw FieldError(key, std::string("expected a string id, got ") + r[key].type_name());
  std::string id = r[key].get<std::string>();
  if (id.empty()) throw FieldError(key, "empty id");
  return id;
}

// Rows of the runs table whose tool has not closed them yet (run_id -> store path). A tool that
// ends on an error or a signal before its end_run still gets its row closed with the true exit
// status: by Cli::run's exit path, or by the signal path (ca::signals cleanups).
struct OpenRun {
  std::string path;
  std::optional<std::pair<uint64_t, uint64_t>> identity;  // the file it was begun in
};
std::optional<std::pair<uint64_t, uint64_t>> file_identity(const std::string& path);
std::mutex g_open_runs_mutex;
std::map<std::string, OpenRun> g_open_runs;
std::once_flag g_open_runs_cleanup;

void close_open_runs(int exit_status) {
  std::map<std::string, OpenRun> runs;
  {
    std::lock_guard<std::mutex> lock(g_open_runs_mutex);
    runs.swap(g_open_runs);
  }
  for (const auto& [run_id, run] : runs) {
    const std::string& path = run.path;
    if (file_identity(path) != run.identity) continue;  // replaced or removed: not this run's store any more
    // Its own connection: the tool's may be inside a transaction that will never commit.
    sqlite3* db = nullptr;
    if (sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READWRITE, nullptr) == SQLITE_OK) {
      sqlite3_busy_timeout(db, 5000);
      sqlite3_stmt* st = nullptr;
      if (sqlite3_prepare_v2(db, "UPDATE runs SET ended_at = ?, exit_status = ? WHERE run_id = ? AND ended_at IS NULL",
                             -1, &st, nullptr) == SQLITE_OK) {
        std::string now = now_iso();
        sqlite3_bind_text(st, 1, now.c_str(), -1, SQLITE_TRANSIENT);
        sqlite3_bind_int(st, 2, exit_status);
        sqlite3_bind_text(st, 3, run_id.c_str(), -1, SQLITE_TRANSIENT);
        sqlite3_step(st);
      }
      sqlite3_finalize(st);
    }
    sqlite3_close(db);
  }
}

// Tables a store of ours has at every schema version, besides sqlite's own.
bool is_project_store(const std::set<std::string>& tables, int version) {
  return version >= 1 && tables.count("runs") && tables.count("tasks");
}

// Before anything is written (tables, journal mode): a file that is some other program's SQLite
// database is refused untouched. Ours: user_version >= 1 and our tables; new: no tables at all.
void refuse_foreign(sqlite3* db, const std::string& path) {
  int version = 0;
  std::set<std::string> tables;
  {
    Statement v(db, "PRAGMA user_version");
    if (v.step()) version = sqlite3_column_int(v.get(), 0);
    Statement t(db, "SELECT name FROM sqlite_master WHERE type IN ('table', 'view') AND name NOT LIKE 'sqlite_%'");
    while (t.step()) tables.insert(reinterpret_cast<const char*>(sqlite3_column_text(t.get(), 0)));
  }
  if ((version == 0 && tables.empty()) || is_project_store(tables, version)) return;
  std::string names;
  int shown = 0;
  for (const auto& t : tables) {
    if (shown++ == 5) {
      names += ", ...";
      break;
    }
    names += (names.empty() ? "" : ", ") + t;
  }
  throw EnvironmentError("'" + path + "' is a SQLite database but not a cuda-agent run store (user_version " +
                         std::to_string(version) + (names.empty() ? "" : ", tables " + names) +
                         "): left untouched; give --store a new file or a run store");
}

// "file:/a/b%20c.db?immutable=1" for a path that may hold any character.
std::string immutable_uri(const std::string& path) {
  std::string uri = "file:";
  for (unsigned char c : path) {
    if (std::isalnum(c) || c == '/' || c == '.' || c == '-' || c == '_' || c == '~') uri += static_cast<char>(c);
    else {
      char buf[4];
      std::snprintf(buf, sizeof buf, "%%%02X", c);
      uri += buf;
    }
  }
  return uri + "?immutable=1";
}

std::optional<std::pair<uint64_t, uint64_t>> file_identity(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return std::nullopt;
  return std::make_pair(uint64_t(st.st_dev), uint64_t(st.st_ino));
}

// Columns of a table in one schema of an open connection ("main", "incoming").
std::vector<std::string> table_columns(sqlite3* db, const std::string& schema, const std::string& table) {
  std::vector<std::string> out;
  Statement s(db, "SELECT name FROM pragma_table_info(?, ?)");
  s.bind({table, schema});
  while (s.step()) out.push_back(reinterpret_cast<const char*>(sqlite3_column_text(s.get(), 0)));
  return out;
}

// The JSON-bearing columns each table must hold valid JSON in (NULL allowed where the schema allows it).
const std::map<std::string, std::vector<std::string>> kJsonColumns = {
    {"runs", {"argv", "counts"}}, {"tasks", {"body"}},    {"candidates", {"body"}}, {"checks", {"body"}},
    {"profiles", {"body"}},       {"baselines", {"body"}}, {"rewards", {"body"}},   {"episodes", {"body"}},
    {"ppo_steps", {"body"}},      {"filter_results", {"body"}}};

}  // namespace

std::string BaselineKey::text() const {
  return task_id + "|" + gpu_name + "|" + driver + "|" + torch_version + "|" + method;
}

const std::vector<std::string>& Store::table_names() { return kTables; }

Store::Store(const std::string& path, bool read_only) : path_(path) {
  sqlite_pool::install();
  int flags = read_only ? SQLITE_OPEN_READONLY : (SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE);
  auto open = [&](const std::string& name, int extra) {
    if (sqlite3_open_v2(name.c_str(), &db_, flags | extra | SQLITE_OPEN_FULLMUTEX, nullptr) != SQLITE_OK) {
      std::string msg = db_ ? sqlite3_errmsg(db_) : "out of memory";
      sqlite3_close(db_);
      db_ = nullptr;
      throw EnvironmentError("cannot open store '" + path + "': " + msg);
    }
    sqlite3_busy_timeout(db_, 30000);
  };
  open(path, 0);
  if (read_only) {
    // A WAL store on read-only media (a read-only mount, chmod -w on file and folder) cannot get
    // its -shm file; when no -wal is left beside it every change is in the file itself, so it is
    // opened immutable. With a -wal left (a writer killed), opening needs the -shm and fails.
    struct stat wal {};
    bool wal_left = ::stat((path + "-wal").c_str(), &wal) == 0 && wal.st_size > 0;
    try {
      schema_version();
    } catch (const Error&) {
      if (wal_left) {
        sqlite3_close(db_);
        db_ = nullptr;
        throw EnvironmentError("cannot read store '" + path + "': it is read-only and a writer left its -wal file; "
                               "copy the store and its -wal to writable media to read it");
      }
      sqlite3_close(db_);
      db_ = nullptr;
      open(immutable_uri(path), SQLITE_OPEN_URI);
    }
    if (schema_version() > kSchemaVersion) {
      sqlite3_close(db_);
      db_ = nullptr;
      throw EnvironmentError("store '" + path + "' has a newer schema than this tool");
    }
    return;
  }
  try {
    identity_ = file_identity(path_);
    if (!identity_) throw EnvironmentError("store '" + path_ + "': opened, but the file cannot be stat()ed");
    refuse_foreign(db_, path);
    exec("PRAGMA journal_mode=WAL");
    // NORMAL in WAL mode survives a killed process (not a power cut) and keeps writes cheap.
    exec("PRAGMA synchronous=NORMAL");
    migrate();
  } catch (...) {
    sqlite3_close(db_);
    db_ = nullptr;
    throw;
  }
}

Store::~Store() {
  if (db_) sqlite3_close(db_);
}

void Store::exec(const std::string& sql) {
  char* err = nullptr;
  if (sqlite3_exec(db_, sql.c_str(), nullptr, nullptr, &err) != SQLITE_OK) {
    std::string msg = err ? err : "unknown";
    sqlite3_free(err);
    throw EnvironmentError("store '" + path_ + "': " + msg);
  }
}

void Store::check_identity() {
  if (!identity_) return;  // read-only: nothing is written
  auto now = file_identity(path_);
  if (now == identity_) return;
  throw EnvironmentError("store '" + path_ + "' was " + (now ? "replaced by another file" : "removed") +
                         " while this tool ran: nothing more is written (rows would go to a file no one reads); "
                         "run again against the store that is there now");
}

int Store::schema_version() {
  Statement s(db_, "PRAGMA user_version");
  s.step();
  return sqlite3_column_int(s.get(), 0);
}

void Store::migrate() {
  exec("BEGIN IMMEDIATE");
  try {
    int version = schema_version();
    if (version == 0) refuse_foreign(db_, path_);  // another program may have filled it since
    if (version > kSchemaVersion) throw EnvironmentError("store '" + path_ + "' has a newer schema (" +
                                                         std::to_string(version) + ") than this tool");
    for (int v = version; v < kSchemaVersion; ++v) {
      exec(kMigrations[v]);
      exec("PRAGMA user_version = " + std::to_string(v + 1));
    }
    exec("COMMIT");
  } catch (...) {
    sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
    throw;
  }
}

std::string Store::begin_run(const CommonOptions& options, const std::string& gpu) {
  std::random_device rd;
  check_identity();
  run_id_ = content_id(Json{{"host", hostname()}, {"pid", getpid()}, {"t", now_iso()}, {"r", rd()}});
  Json argv = options.argv;
  // The run that started this process, if it is a run (agent-run's locked calls): it set the variable
  // for its children below. A sibling in a pipeline never inherits it, whatever the times.
  const char* parent = std::getenv(kParentRunVariable);
  Statement s(db_, "INSERT INTO runs (run_id, tool, version, argv, host, gpu, started_at, parent_run_id) "
                   "VALUES (?,?,?,?,?,?,?,?)");
  s.bind({run_id_, options.tool, std::string(kVersion) + "+" + kGitRevision, argv.dump(), hostname(),
          gpu.empty() ? Value(nullptr) : Value(gpu), now_iso(),
          parent && *parent ? Value(std::string(parent)) : Value(nullptr)});
  s.step();
  ::setenv(kParentRunVariable, run_id_.c_str(), 1);  // every process this run starts records it as parent
  std::call_once(g_open_runs_cleanup, [] { signals::add_cleanup(close_open_runs); });
  {
    std::error_code ec;
    std::string absolute = std::filesystem::absolute(path_, ec).string();
    std::lock_guard<std::mutex> lock(g_open_runs_mutex);
    g_open_runs[run_id_] = OpenRun{ec ? path_ : absolute, identity_};
  }
  return run_id_;
}

void Store::set_run_gpu(const std::string& gpu) {
  check_identity();
  Statement s(db_, "UPDATE runs SET gpu = ? WHERE run_id = ?");
  s.bind({gpu, run_id_});
  s.step();
}

void Store::end_run(int exit_status, const Json& counts) {
  if (run_id_.empty()) return;
  if (signals::stopping()) return;  // the signal path closes it with 128+signal
  check_identity();
  {
    std::lock_guard<std::mutex> lock(g_open_runs_mutex);
    g_open_runs.erase(run_id_);
  }
  Statement s(db_, "UPDATE runs SET ended_at = ?, exit_status = ?, counts = ? WHERE run_id = ?");
  s.bind({now_iso(), int64_t(exit_status), counts.dump(), run_id_});
  s.step();
}

void Store::put_task(const Json& task) {
  check_identity();
  Statement s(db_, "INSERT OR REPLACE INTO tasks (task_id, run_id, body) VALUES (?,?,?)");
  s.bind({text_of(task, "task_id"), run_id_, task.dump()});
  s.step();
}

void Store::put_candidate(const Json& candidate) {
  check_identity();
  Statement s(db_, "INSERT OR REPLACE INTO candidates (candidate_id, task_id, run_id, body) VALUES (?,?,?,?)");
  s.bind({text_of(candidate, "candidate_id"), text_of(candidate, "task_id"), run_id_, candidate.dump()});
  s.step();
}

void Store::put_check(const std::string& candidate_id, const std::string& task_id, const Json& check) {
  check_identity();
  Statement s(db_, "INSERT OR REPLACE INTO checks (candidate_id, run_id, task_id, status, correct, body) VALUES (?,?,?,?,?,?)");
  Value correct = check.contains("correct") && check["correct"].is_boolean() ? Value(int64_t(check["correct"].get<bool>())) : Value(nullptr);
  s.bind({candidate_id, run_id_, task_id, text_of(check, "status"), correct, check.dump()});
  s.step();
}

void Store::put_profile(const std::string& candidate_id, const std::string& task_id, const Json& prof) {
  check_identity();
  Statement s(db_, "INSERT OR REPLACE INTO profiles (candidate_id, run_id, task_id, time_us, speedup_vs_eager, "
                   "speedup_vs_compile, body) VALUES (?,?,?,?,?,?,?)");
  s.bind({candidate_id, run_id_, task_id, optional_number(prof, "time_us"), optional_number(prof, "speedup_vs_eager"),
          optional_number(prof, "speedup_vs_compile"), prof.dump()});
  s.step();
}

void Store::put_reward(const std::string& candidate_id, const std::string& task_id, const Json& reward) {
  check_identity();
  Statement s(db_, "INSERT OR REPLACE INTO rewards (candidate_id, run_id, task_id, value, scheme, body) VALUES (?,?,?,?,?,?)");
  s.bind({candidate_id, run_id_, task_id, optional_number(reward, "value"), text_of(reward, "scheme"), reward.dump()});
  s.step();
}

void Store::put_episode(const std::string& candidate_id, const std::string& task_id, const Json& episode) {
  check_identity();
  Statement s(db_, "INSERT OR REPLACE INTO episodes (candidate_id, run_id, task_id, body) VALUES (?,?,?,?)");
  s.bind({candidate_id, run_id_, task_id, episode.dump()});
  s.step();
}

void Store::put_ppo_step(const std::string& step_id, const Json& metrics) {
  check_identity();
  Statement s(db_, "INSERT OR REPLACE INTO ppo_steps (step_id, run_id, body) VALUES (?,?,?)");
  s.bind({step_id, run_id_, metrics.dump()});
  s.step();
}

void Store::put_filter_result(const std::string& task_id, bool kept, const std::string& reason, const Json& detail) {
  check_identity();
  Statement s(db_, "INSERT OR REPLACE INTO filter_results (task_id, run_id, kept, reason, body) VALUES (?,?,?,?,?)");
  s.bind({task_id, run_id_, int64_t(kept), reason, detail.dump()});
  s.step();
}

void Store::put_baseline(const BaselineKey& key, const Json& timing) {
  check_identity();
  Statement s(db_, "INSERT OR REPLACE INTO baselines (baseline_key, task_id, gpu, driver, torch_version, method, "
                   "time_us, run_id, body) VALUES (?,?,?,?,?,?,?,?,?)");
  Value time = nullptr;
  if (timing.contains("time_us")) {
    const Json& t = timing["time_us"];
    if (t.is_number()) time = t.get<double>();
    else if (t.is_object() && t.contains("median")) time = t["median"].get<double>();
  }
  s.bind({key.text(), key.task_id, key.gpu_name, key.driver, key.torch_version, key.method, time, run_id_, timing.dump()});
  s.step();
}

namespace {
// A row's body, or an InputError naming the store, table and key (a truncated row is damage, not a crash).
Json parse_body(const std::string& path, sqlite3_stmt* row, const std::string& table, const std::string& key) {
  const char* text = reinterpret_cast<const char*>(sqlite3_column_text(row, 0));
  try {
    return parse_json(text ? text : "", table + " body");
  } catch (const std::exception&) {
    throw InputError("store '" + path + "': the " + table + " row of '" + key + "' has a body that is not valid JSON (truncated?)");
  }
}
}  // namespace

std::optional<Json> Store::get_task(const std::string& task_id) {
  Statement s(db_, "SELECT body FROM tasks WHERE task_id = ?");
  s.bind({task_id});
  if (!s.step()) return std::nullopt;
  return parse_body(path_, s.get(), "tasks", task_id);
}

std::optional<Json> Store::get_baseline(const BaselineKey& key) {
  Statement s(db_, "SELECT body FROM baselines WHERE baseline_key = ?");
  s.bind({key.text()});
  if (!s.step()) return std::nullopt;
  return parse_body(path_, s.get(), "baselines", key.text());
}

std::optional<Json> Store::latest(const std::string& table, const std::string& key) {
  static const std::map<std::string, std::string> key_column = {{"checks", "candidate_id"},   {"profiles", "candidate_id"},
                                                                {"rewards", "candidate_id"},  {"episodes", "candidate_id"},
                                                                {"filter_results", "task_id"}};
  auto column = key_column.find(table);
  if (column == key_column.end()) throw InternalError("store: no latest row by key in table " + table);
  Statement s(db_, "SELECT t.body FROM " + table + " t LEFT JOIN runs r USING (run_id) WHERE t." + column->second +
                   " = ? ORDER BY r.started_at DESC LIMIT 1");
  s.bind({key});
  if (!s.step()) return std::nullopt;
  return parse_body(path_, s.get(), table, key);
}

void Store::query(const std::string& sql, const std::function<void(const Json&)>& row) {
  Statement s(db_, sql);
  while (s.step()) {
    Json r = Json::object();
    int n = sqlite3_column_count(s.get());
    for (int i = 0; i < n; ++i) {
      std::string name = sqlite3_column_name(s.get(), i);
      switch (sqlite3_column_type(s.get(), i)) {
        case SQLITE_INTEGER: r[name] = sqlite3_column_int64(s.get(), i); break;
        case SQLITE_FLOAT: r[name] = sqlite3_column_double(s.get(), i); break;
        case SQLITE_NULL: r[name] = nullptr; break;
        default: {
          std::string text(reinterpret_cast<const char*>(sqlite3_column_text(s.get(), i)),
                           static_cast<std::size_t>(sqlite3_column_bytes(s.get(), i)));
          // JSON-bearing columns come back as JSON, so `query` output is records, not escaped strings.
          if ((name == "body" || name == "argv" || name == "counts") && !text.empty() && (text[0] == '{' || text[0] == '[')) {
            try {
              r[name] = parse_json(text, name);
              break;
            } catch (...) {
            }
          }
          r[name] = text;
        }
      }
    }
    row(r);
  }
}

namespace {

// What is wrong with a store to be merged, "" when it is whole (SQLite's own errors included):
// SQLite's check of the pages, then every JSON column parsed (a truncated body would fail `report`
// later). `version` gets its schema version.
std::string merge_input_problem(Store& other, int& version) {
  try {
    version = other.schema_version();
    Statement check(other.handle(), "PRAGMA quick_check");
    std::string problems;
    int shown = 0;
    while (check.step()) {
      std::string line = reinterpret_cast<const char*>(sqlite3_column_text(check.get(), 0));
      if (line == "ok") break;
      if (shown++ < 3) problems += (problems.empty() ? "" : "; ") + line;
    }
    if (!problems.empty()) return "quick_check: " + problems;
    if (version < 1 || version > Store::kSchemaVersion) return "";
    for (const auto& [table, columns] : kJsonColumns)
      for (const auto& column : columns) {
        Statement bad(other.handle(), "SELECT rowid FROM " + table + " WHERE " + column + " IS NOT NULL AND json_valid(" +
                                      column + ") = 0 LIMIT 1");
        if (bad.step())
          return "table " + table + " row " + std::to_string(sqlite3_column_int64(bad.get(), 0)) + ": " + column +
                 " is not valid JSON (truncated?)";
      }
    return "";
  } catch (const Error& e) {
    return e.what();
  }
}

}  // namespace

Json Store::merge_from(const std::string& other_path) {
  // ATTACHing the file itself would wait 30 s on its own lock and fail "database is locked".
  if (same_file(path_, other_path))
    throw UsageError("cannot merge store '" + other_path + "' into itself ('" + path_ + "' is the same file)");
  // The input is checked whole before one row moves, and every error names it, not OUT: SQLite's own
  // check of the pages, then every JSON column parsed (a truncated body would fail `report` later).
  auto damaged = [&](const std::string& why) {
    return InputError("merge: input store '" + other_path + "' is damaged: " + why + "; nothing merged from it");
  };
  {
    std::unique_ptr<Store> other;
    try {
      other = std::make_unique<Store>(other_path, true);
    } catch (const Error& e) {
      throw InputError("merge: cannot read input store '" + other_path + "': " + e.what());
    }
    int version = 0;
    const std::string problem = merge_input_problem(*other, version);
    if (!problem.empty()) throw damaged(problem);
    if (version < 1 || version > kSchemaVersion)
      throw InputError("merge: input store '" + other_path + "' has schema " + std::to_string(version) + ", this tool reads 1.." +
                       std::to_string(kSchemaVersion));
  }
  check_identity();
  Json added = Json::object();
  Statement attach(db_, "ATTACH DATABASE ? AS incoming");
  attach.bind({other_path});
  try {
    attach.step();
  } catch (const Error& e) {
    throw EnvironmentError("merge: cannot attach input store '" + other_path + "' to '" + path_ + "': " + e.what());
  }
  try {
    exec("BEGIN IMMEDIATE");
    for (const auto& table : kTables) {
      // By column name: an input of an older schema lacks the newer columns, which stay NULL.
      const auto theirs = table_columns(db_, "incoming", table);
      std::string list;
      for (const auto& c : table_columns(db_, "main", table))
        if (std::find(theirs.begin(), theirs.end(), c) != theirs.end()) list += (list.empty() ? "\"" : ", \"") + c + "\"";
      int before = sqlite3_total_changes(db_);
      exec("INSERT OR IGNORE INTO main." + table + " (" + list + ") SELECT " + list + " FROM incoming." + table);
      added[table] = sqlite3_total_changes(db_) - before;
    }
    exec("COMMIT");
  } catch (const Error& e) {
    sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
    sqlite3_exec(db_, "DETACH DATABASE incoming", nullptr, nullptr, nullptr);
    throw EnvironmentError("merge: '" + other_path + "' into '" + path_ + "': " + e.what() + " (rolled back)");
  } catch (...) {
    sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
    sqlite3_exec(db_, "DETACH DATABASE incoming", nullptr, nullptr, nullptr);
    throw;
  }
  exec("DETACH DATABASE incoming");
  return added;
}

Json Store::summary() {
  Json runs = Json::array();
  query(R"SQL(
SELECT r.run_id, r.tool, r.started_at, r.exit_status,
  (SELECT COUNT(*) FROM tasks t WHERE t.run_id = r.run_id) AS tasks,
  (SELECT COUNT(*) FROM candidates c WHERE c.run_id = r.run_id) AS candidates,
  (SELECT COUNT(*) FROM checks c WHERE c.run_id = r.run_id) AS checks,
  (SELECT AVG(correct) FROM checks c WHERE c.run_id = r.run_id) AS pass_rate,
  (SELECT COUNT(*) FROM profiles p WHERE p.run_id = r.run_id) AS profiles,
  (SELECT AVG(speedup_vs_eager > 1.0) FROM profiles p WHERE p.run_id = r.run_id) AS faster_than_eager,
  (SELECT AVG(speedup_vs_compile > 1.0) FROM profiles p WHERE p.run_id = r.run_id) AS faster_than_compile,
  (SELECT EXP(AVG(LN(speedup_vs_eager))) FROM profiles p WHERE p.run_id = r.run_id AND speedup_vs_eager > 0) AS geomean_speedup_vs_eager,
  (SELECT EXP(AVG(LN(speedup_vs_compile))) FROM profiles p WHERE p.run_id = r.run_id AND speedup_vs_compile > 0) AS geomean_speedup_vs_compile,
  (SELECT COUNT(*) FROM rewards w WHERE w.run_id = r.run_id) AS rewards,
  (SELECT AVG(value) FROM rewards w WHERE w.run_id = r.run_id) AS reward_mean,
  (SELECT COUNT(*) FROM episodes e WHERE e.run_id = r.run_id) AS episodes
FROM runs r ORDER BY r.started_at)SQL",
        [&](const Json& row) { runs.push_back(Json(row)); });
  return runs;
}

void Store::in_transaction(const std::function<void()>& body) {
  check_identity();
  exec("BEGIN IMMEDIATE");
  try {
    body();
    exec("COMMIT");
  } catch (...) {
    sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
    throw;
  }
}

std::string Store::import_record(const Json& record) {
  std::string schema = text_of(record, "schema");
  std::string kind;
  in_transaction([&] {
    if (schema.find("/ppo-metrics/") != std::string::npos || schema.find("/ppo-batch/") != std::string::npos) {
      put_ppo_step(record.contains("step_id") ? record["step_id"].dump() : content_id(record), record);
      kind = "ppo_step";
      return;
    }
    std::string candidate_id = id_of(record, "candidate_id");
    std::string task_id = id_of(record, "task_id");
    if (candidate_id.empty()) {
      if (task_id.empty()) throw FieldError("task_id", "missing (a record needs task_id or candidate_id to be stored)");
      put_task(record);
      kind = "task";
      return;
    }
    Json bare = record;
    for (const char* s : {"check", "prof", "reward", "episode"}) bare.erase(s);
    put_candidate(bare);
    kind = "candidate";
    for (const char* s : {"check", "prof", "reward", "episode"})
      if (record.contains(s) && record[s].is_object()) put_section(s, record);
  });
  return kind;
}

void Store::put_section(const std::string& section, const Json& record) {
  const std::string candidate_id = id_of(record, "candidate_id"), task_id = id_of(record, "task_id");
  if (candidate_id.empty()) throw FieldError("candidate_id", "missing (a " + section + " is stored by its candidate)");
  const Json& body = record.at(section);
  if (section == "check") put_check(candidate_id, task_id, body);
  else if (section == "prof") put_profile(candidate_id, task_id, body);
  else if (section == "reward") put_reward(candidate_id, task_id, body);
  else if (section == "episode") put_episode(candidate_id, task_id, body);
  else throw InternalError("store: no table for a record's '" + section + "' section");
}

namespace {
// Rows per table of an open database: what a copy is verified against.
std::map<std::string, int64_t> row_counts(sqlite3* db, const std::string& path) {
  std::map<std::string, int64_t> counts;
  std::vector<std::string> tables;
  {
    Statement t(db, "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY name");
    while (t.step()) tables.push_back(reinterpret_cast<const char*>(sqlite3_column_text(t.get(), 0)));
  }
  for (const auto& table : tables) {
    std::string quoted = "\"";
    for (char c : table) quoted += c == '"' ? std::string("\"\"") : std::string(1, c);
    Statement c(db, "SELECT COUNT(*) FROM " + quoted + "\"");
    if (!c.step()) throw EnvironmentError("copy: cannot count the rows of " + table + " in '" + path + "'");
    counts[table] = sqlite3_column_int64(c.get(), 0);
  }
  return counts;
}

struct Db {
  sqlite3* db = nullptr;
  ~Db() { sqlite3_close(db); }
};
}  // namespace

Json copy_store(const std::string& from, const std::string& to) {
  struct stat st {};
  if (::stat(from.c_str(), &st) != 0) throw EnvironmentError("copy: no store at '" + from + "': " + std::strerror(errno));
  if (!S_ISREG(st.st_mode)) throw InputError("copy: '" + from + "' is not a regular file");
  if (same_file(from, to)) throw UsageError("copy: '" + from + "' and '" + to + "' are the same file");
  // Read through SQLite, so the pages still in the -wal of a killed writer are in the copy (a plain cp
  // of the main file alone gave a store without tables).
  Db src, dst;
  sqlite_pool::install();
  if (sqlite3_open_v2(from.c_str(), &src.db, SQLITE_OPEN_READONLY, nullptr) != SQLITE_OK)
    throw EnvironmentError("copy: cannot open '" + from + "': " + (src.db ? sqlite3_errmsg(src.db) : "out of memory"));
  sqlite3_busy_timeout(src.db, 30000);
  std::map<std::string, int64_t> counts;
  try {
    Statement check(src.db, "PRAGMA quick_check");
    std::string first = check.step() ? reinterpret_cast<const char*>(sqlite3_column_text(check.get(), 0)) : "no answer";
    if (first != "ok") throw InputError("copy: '" + from + "' is damaged (quick_check: " + first + ")");
    counts = row_counts(src.db, from);
  } catch (const InputError& e) {
    if (std::string(e.what()).rfind("copy:", 0) == 0) throw;
    throw InputError("copy: '" + from + "' is not a readable SQLite store: " + e.what());
  } catch (const EnvironmentError& e) {
    throw InputError("copy: '" + from + "' is not a readable SQLite store: " + e.what());
  }
  const std::string tmp = to + ".tmp." + std::to_string(getpid());
  ::unlink(tmp.c_str());
  struct Cleanup {
    const std::string& path;
    bool keep = false;
    ~Cleanup() {
      if (!keep)
        for (const char* suffix : {"", "-journal", "-wal", "-shm"}) ::unlink((path + suffix).c_str());
    }
  } cleanup{tmp};
  if (sqlite3_open_v2(tmp.c_str(), &dst.db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, nullptr) != SQLITE_OK)
    throw EnvironmentError("copy: cannot create '" + tmp + "': " + (dst.db ? sqlite3_errmsg(dst.db) : "out of memory"));
  sqlite3_backup* backup = sqlite3_backup_init(dst.db, "main", src.db, "main");
  if (!backup) throw EnvironmentError("copy: '" + from + "' to '" + tmp + "': " + sqlite3_errmsg(dst.db));
  int rc;
  while ((rc = sqlite3_backup_step(backup, 1024)) == SQLITE_OK || rc == SQLITE_BUSY || rc == SQLITE_LOCKED)
    if (rc != SQLITE_OK) sqlite3_sleep(50);
  sqlite3_backup_finish(backup);
  if (rc != SQLITE_DONE) throw EnvironmentError("copy: '" + from + "' to '" + tmp + "': " + sqlite3_errmsg(dst.db));
  // One self-contained file (no -wal to carry along, readable on read-only or shared media), synced.
  char* err = nullptr;
  if (sqlite3_exec(dst.db, "PRAGMA journal_mode=DELETE; PRAGMA synchronous=FULL;", nullptr, nullptr, &err) != SQLITE_OK) {
    std::string msg = err ? err : "unknown";
    sqlite3_free(err);
    throw EnvironmentError("copy: '" + tmp + "': " + msg);
  }
  // Verified before it is put in place: pages whole and every table with the source's row count.
  {
    Statement check(dst.db, "PRAGMA quick_check");
    std::string first = check.step() ? reinterpret_cast<const char*>(sqlite3_column_text(check.get(), 0)) : "no answer";
    if (first != "ok") throw EnvironmentError("copy: the copy '" + tmp + "' does not verify (quick_check: " + first + ")");
  }
  if (row_counts(dst.db, tmp) != counts)
    throw EnvironmentError("copy: the copy '" + tmp + "' does not have the rows of '" + from + "'");
  if (sqlite3_close(dst.db) != SQLITE_OK) throw EnvironmentError("copy: cannot close '" + tmp + "'");
  dst.db = nullptr;
  {
    int fd = ::open(tmp.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0 || ::fsync(fd) != 0) {
      const int e = errno;
      if (fd >= 0) ::close(fd);
      throw EnvironmentError("copy: cannot sync '" + tmp + "': " + std::strerror(e));
    }
    ::close(fd);
  }
  if (::rename(tmp.c_str(), to.c_str()) != 0)
    throw EnvironmentError("copy: cannot rename '" + tmp + "' to '" + to + "': " + std::strerror(errno));
  cleanup.keep = true;
  auto parent = std::filesystem::path(to).parent_path();
  fsync_dir(parent.empty() ? std::string(".") : parent.string());
  Json out = Json::object();
  for (const auto& [table, n] : counts) out[table] = n;
  return out;
}

std::unique_ptr<Store> open_store_for(const CommonOptions& options, const std::string& gpu) {
  if (options.no_store) return nullptr;
  auto store = std::make_unique<Store>(options.resolved_store_path());
  store->begin_run(options, gpu);
  return store;
}

}  // namespace ca

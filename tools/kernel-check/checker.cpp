// kernel-check's record handling (see checker.hpp).
#include "tools/kernel-check/checker.hpp"

#include "libcommon/bundle/launch_limits.hpp"


#include "libcommon/cuda/driver.hpp"
#include "libcommon/errors.hpp"
#include "libcommon/fields.hpp"
#include "libcommon/ids.hpp"
#include "libcommon/log.hpp"
#include "libcommon/paths.hpp"
#include "ca/version.hpp"
#include "libcommon/measure/gpu_lock.hpp"
#include "libcommon/measure/gpu_state.hpp"
#include "tools/kernel-check/gpu_stage.hpp"
#include "tools/kernel-check/runner.hpp"
#include "tools/kernel-check/verdicts.hpp"

namespace ca::kernel_check {

struct Checker::Item : ca::RecordItem {
  std::string status;
  bool id_verified = true;  // the candidate_id is the hash of the record's task_id and bundle
};

namespace {

// What a verdict depends on besides the candidate and its task: the rules (their content, the shipped
// default and the --rules file), the judging options and the build (build_identity: this binary and
// the worker's sources, by content). A stored verdict is reused
// (--resume) only when this is the same: one judged under a lenient rules file, with the published
// tolerance, --allow-stochastic, another --arch or an older release is judged again, never taken for
// one of this run by its candidate id alone.
std::string judged_by(const CheckOptions& o, const ca::bundle::Rules& rules) {
  const ca::Json how = {{"tool", "kernel-check"},
                        {"version", ca::kVersion},
                        {"build", ca::build_identity()},
                        {"rules", rules.identity()},
                        {"compile_only", o.compile_only},
                        {"arch", o.arch},
                        {"tolerance", o.tolerance},
                        {"atol", o.atol},
                        {"rtol", o.rtol},
                        {"allow_stochastic", o.allow_stochastic},
                        {"trials", o.trials},
                        {"graph", o.graph},
                        {"timeout_s", o.timeout_s}};
  return ca::content_id(how);
}

}  // namespace

Checker::Checker(CheckOptions& options, const ca::CommonOptions& common)
    : options_(options), common_(common), rules_(ca::bundle::Rules::load(options.rules_path)), tasks_(options.tasks_path) {
  // The device: compile-only never touches it; otherwise no driver or GPU -> no_device verdicts.
  if (!options_.compile_only) {
    if (!ca::cuda::Driver::available(&no_device_why_)) {
      ca::log::warn("no GPU: ", no_device_why_, " (candidates get status no_device; use --compile-only for CPU checks)");
    } else {
      gpus_ = parse_gpu_list(options_.gpus, ca::cuda::Driver::get().device_count);
      if (options_.arch.empty()) options_.arch = ca::cuda::Driver::get().device_info(gpus_[0]).arch();
    }
  }
  if (options_.arch.empty()) options_.arch = "sm_90";
  try {
    ca::bundle::LaunchLimits::for_arch(options_.arch);  // its launch limits are known (sm_70 on)
  } catch (const ca::UsageError& e) {
    throw ca::UsageError(std::string("--arch: ") + e.what());
  }

  judged_by_ = judged_by(options_, rules_);
  candidate_.arch = options_.arch;
  candidate_.cache_dir = options_.cache_dir;
  candidate_.use_cache = !options_.no_cache;
  // A GPU judge holds scratch to the cap from its own worker's measurement (gpu_stage): the CPU stage
  // before it, on the record's shapes, leaves that cap to it; compile-only applies it there.
  cpu_rules_ = rules_;
  cpu_rules_.scratch_cap_by_judge = !options_.compile_only;
  candidate_.rules = &cpu_rules_;
  uint64_t base_seed = common_.run_seed();

  store_ = ca::open_store_for(common_);
  for (int g : gpus_) {
    ca::measure::GpuIdentity id = ca::measure::identify_gpu(g);
    gpus_json_.push_back({{"ordinal", g}, {"name", id.name}, {"uuid", id.uuid}, {"arch", id.arch}});
  }
  if (!gpus_.empty()) judge_ = std::make_unique<GpuStage>(options_, rules_, gpus_, base_seed);
  // As many lanes as can be busy at once: the compile threads and the GPU lanes, and one more so
  // the next record is read and parsed while they are.
  ca::RecordPathOptions path;
  path.lanes = options_.jobs + (judge_ ? judge_->lanes() : 0) + 1;
  path.window = path.lanes;
  path.store = store_.get();
  path.section = "check";
  path_ = std::make_unique<ca::RecordPath>(common_, path);
}

Checker::~Checker() = default;

ca::Json Checker::gpus_json() const { return gpus_json_; }

void Checker::serve(ca::ClientTasks client_tasks) {
  serving_ = true;
  tasks_.set_client_tasks(client_tasks);
}

std::string Checker::unavailable() const {
  if (options_.compile_only || judge_) return "";
  return "no GPU: " + no_device_why_;
}

// --resume: a verdict already in the store is reused; not a no_device or compile-only one, nor an
// environment failure (reference_error, node_error: the node's, judged again), nor one judged
// otherwise (judged_by: the task's content, the rules, the options, the release).
bool Checker::resume(Item& item, const std::string& judged_by) {
  if (!common_.resume || !store_) return false;
  std::lock_guard<std::mutex> lock(path_->store_mutex());
  auto prev = store_->latest("checks", item.record["candidate_id"].get<std::string>());
  if (!prev) return false;
  // A stored row that does not say (a status or judged_by missing or of another type) is judged again.
  const std::string st = string_or_empty(*prev, "status");
  if (st.empty() || st == "no_device" || st == "compiled" || st == "reference_error" || st == "node_error") return false;
  if (string_or_empty(*prev, "judged_by") != judged_by) {
    ca::log::verbose(item.where, ": the stored verdict (", st, ") was judged otherwise (the task's content, rules, options or release): judged again");
    return false;
  }
  item.record["check"] = *prev;
  item.status = st;
  item.resumed = true;
  return true;
}

Prepared Checker::prepare(const ca::Json& rec, const std::optional<ca::Json>& task) {
  // One bound on compilers for the whole tool, -j: a stream's lanes and a service's requests
  // together never run more (each may take gigabytes).
  std::unique_lock<std::mutex> lock(compile_mu_);
  compile_cv_.wait(lock, [&] { return compiling_ < options_.jobs; });
  ++compiling_;
  lock.unlock();
  struct Release {
    Checker& c;
    ~Release() {
      {
        std::lock_guard<std::mutex> l(c.compile_mu_);
        --c.compiling_;
      }
      c.compile_cv_.notify_one();
    }
  } release{*this};
  return cpu_stage(rec, task ? &*task : nullptr, candidate_);
}

// One record on a lane: its task found, its id settled, its verdict reused (--resume), or it is
// compiled and judged. A FieldError is the record path's: a bad record.
ca::Outcome Checker::process(Item& item) {
  ca::Json& rec = item.record;
  std::string task_id = ca::get_required<std::string>(rec, "/task_id");
  const ca::Json bundle = ca::get_required<ca::Json>(rec, "/bundle");
  std::optional<ca::Json> task;
  // A service takes a client's task only with --accept-tasks, and only under its content id.
  if (auto t = tasks_.find(rec, task_id, store_.get(), &path_->store_mutex())) task = ca::Json(*t);
  if (serving_ && !task && !options_.compile_only)
    throw ca::FieldError("task_id", "task " + task_id + " is unknown to this service: start it with --tasks FILE (or a "
                                    "store) holding the task");
  if (!rec.contains("candidate_id")) rec["candidate_id"] = ca::candidate_id_for(task_id, bundle);
  // A verdict is stored and reused under the candidate's id: a service (whose clients choose the
  // id) and --resume take a record only when the id is the hash of what it holds. A stream's
  // other records keep their ids, and are judged, but are not stored under an id of another bundle.
  if (serving_ || common_.resume) ca::verify_candidate_id(rec);
  else item.id_verified = rec["candidate_id"].get<std::string>() == ca::candidate_id_for(task_id, bundle);
  // How this record is judged: this run's rules and options, the task it is judged against by
  // content (a record's own task object may not be the task its task_id names: its verdict is stored
  // under that id, and is reused only for a record judged against the same content), and the bundle
  // by content (a stored row moved under another candidate's id, by hand or by an older version,
  // keeps the judged_by of the bundle it judged, so it is never reused for this one).
  ca::Json judged = {{"judge", judged_by_}, {"bundle", ca::candidate_id_for(task_id, bundle)}};
  if (task) judged["task"] = *task;
  const std::string judged_by = ca::content_id(judged);
  if (resume(item, judged_by)) return ca::Outcome::skipped;
  // The reference's mode and whether it is stochastic, as the task record says (a bad mode is a bad
  // record, before any compile); a GPU judge replaces it with what its worker's load measured.
  const std::optional<ca::Json> reference =
      task ? std::optional<ca::Json>(reference_check(*task, nullptr, options_.allow_stochastic)) : std::nullopt;
  Prepared p = prepare(rec, task);
  if (reference) p.check["reference"] = *reference;
  if (!p.final && !options_.compile_only) {
    if (!judge_) {
      set_verdict(p.check, "no_device", "no GPU: " + no_device_why_);
    } else if (!task || !task->contains("code")) {
      set_verdict(p.check, "plan_error", "task " + task_id + " unknown: give the record a task object, or --tasks FILE");
    } else {
      // The lane's worker keeps the task loaded under the hash of what it runs: a record's task_id
      // never names another task's loaded state.
      judge_->judge(p, *task, ca::task_cache_key(*task), item.where);  // the GPU's lock, shared, once a lane is free
    }
  } else if (!p.final) {
    p.check["status"] = "compiled";
    p.check["correct"] = nullptr;
    if (p.io.shapes_known()) {
      p.check["reason"] = "compile-only: compiled, plan and rules checks passed";
    } else {
      // A task that carries only its code: what needs its shapes could not be checked, and the
      // record says so rather than passing it off as checked.
      p.check["reason"] = "compile-only: compiled, plan and rules checks passed; the task's tensor shapes are unknown "
                          "(it carries only its code), so sizes, grids from shapes, buffer fits, views, conv and gemm "
                          "shapes and the scratch cap were not checked";
      p.check["unchecked"] = ca::Json::array({"shapes", "buffer_fits", "views", "library_step_shapes", "scratch_cap"});
    }
    // A task the record says no verdict can use: said here, so a policy does not optimize for it
    // (a GPU judge decides from its own worker's measurement, never from this word).
    if (reference)
      for (const char* flag : {"stochastic", "insensitive", "ill_conditioned"})
        if (reference->value(flag, ca::Json()) == true)
          p.check["reason"] = p.check["reason"].get<std::string>() + "; the task record says its reference is " + flag +
                              ": a GPU judge that measures so gives no verdict and no reward (task_" + flag + ")";
  }
  p.check["judged_by"] = judged_by;
  rec["check"] = p.check;
  item.status = p.check["status"].get<std::string>();
  return item.status == "passed" || item.status == "compiled" ? ca::Outcome::done : ca::Outcome::failed;
}

// In input order, a good record: its status counted; a verdict is stored only under its own id.
void Checker::tally(Item& item) {
  if (!item.resumed) {
    item.store = item.id_verified;
    if (store_ && !item.id_verified)
      ca::log::warn(item.where, ": not stored: candidate_id ", item.record["candidate_id"].dump(),
                    " is not the content id of its task_id and bundle");
    ca::log::verbose(item.where, ": ", item.status, ": ", item.record["check"].value("reason", ""));
  }
  std::lock_guard<std::mutex> lock(totals_mu_);
  ++by_status_[item.status];
  if (item.status == "no_device" && !item.resumed) ++no_device_;
}

ca::RecordJob<Checker::Item> Checker::job() {
  ca::RecordJob<Item> job;
  job.work = [this](int, Item& item) { return process(item); };
  job.emit = [this](Item& item) { tally(item); };
  return job;
}

ca::Counts Checker::check(const ca::RecordSource& next, const ca::RecordSink& write, bool shard) {
  return path_->run<Item>(next, job(), write, shard);
}

int Checker::stream() {
  const int status = path_->stream<Item>(job());
  return summary(status == ca::kExitOk ? std::nullopt : std::optional<int>(status));
}

int Checker::summary(std::optional<int> exit_code) {
  ca::Json statuses;
  int64_t no_device;
  {
    std::lock_guard<std::mutex> lock(totals_mu_);
    statuses = by_status_;
    no_device = no_device_;
  }
  int code = exit_code ? *exit_code : (no_device ? ca::kExitEnvironment : ca::kExitOk);
  path_->end(code, "; by status " + statuses.dump());
  if (no_device) ca::log::error(no_device, " candidate(s) not run: no GPU (", no_device_why_, ")");
  return code;
}

}  // namespace ca::kernel_check

// An episode's workspace made and removed: its folder (owned by this process, see ownership.cpp),
// ws/ with SKILL.md, model.py, kernels/ and plan.yaml, and the sandbox's tmp/. The file tools are in
// file_tools.cpp, the cap in disk_cap.cpp, the confined reads and writes in confined_io.cpp.
#include "tools/agent-run/workspace.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "libcommon/errors.hpp"
#include "libcommon/log.hpp"
#include "tools/agent-run/confined_io.hpp"

namespace ca::agent_run {

using detail::write_at;

Workspace::Workspace(const std::string& skill, const std::string& model_code, int64_t cap_bytes)
    : dir_(make_owned_dir("")), cap_bytes_(cap_bytes) {
  root_ = dir_ + "/ws";
  tmp_ = dir_ + "/tmp";
  try {
    if (mkdir(root_.c_str(), 0700) != 0 || mkdir(tmp_.c_str(), 0700) != 0 ||
        mkdir((root_ + "/kernels").c_str(), 0755) != 0)
      throw EnvironmentError("cannot create the workspace " + root_ + ": " + std::strerror(errno));
    root_fd_ = open(root_.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (root_fd_ < 0) throw EnvironmentError("cannot open the workspace " + root_ + ": " + std::strerror(errno));
    for (const char* name : {"SKILL.md", "model.py", "plan.yaml"}) {
      const std::string& text = name[0] == 'S' ? skill : name[0] == 'm' ? model_code : std::string();
      std::string why = write_at(root_fd_, name, text);
      if (!why.empty()) throw EnvironmentError("cannot write " + root_ + "/" + name + ": " + why);
    }
  } catch (...) {
    if (root_fd_ >= 0) ::close(root_fd_);
    remove_tree(dir_);
    throw;
  }
}

Workspace::~Workspace() {
  if (root_fd_ >= 0) ::close(root_fd_);
  if (!remove_tree(dir_)) log::warn("workspace ", dir_, " could not be removed in full");
}

}  // namespace ca::agent_run

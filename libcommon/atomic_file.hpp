// A file written whole or not at all: bytes go to a temp file beside the target, and only after every
// write, the fsync and the close succeeded is it renamed into place. Any failure (a full disk, EFBIG
// under `ulimit -f`, EIO) is an EnvironmentError naming the file and the reason, the temp file is
// removed and the target is left as it was: never an empty or cut file renamed over a good one.
// (write_file_atomic in paths.hpp is the one-string form; write_safetensors streams through it.)
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace ca {

class AtomicFile {
 public:
  // Creates PATH.tmp.<pid>.<n> beside `path` (O_EXCL; mode 0666 less the umask, as a plain create).
  explicit AtomicFile(std::string path);
  ~AtomicFile();  // not committed: the temp file is removed
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  void write(const void* data, std::size_t n);  // every byte, or EnvironmentError
  void write(std::string_view s) { write(s.data(), s.size()); }
  // Every byte at `offset` (pwrite), for several threads filling one file's parts. A failure is an
  // EnvironmentError that leaves the file open (other threads may still be writing); the destructor
  // removes the temp file.
  void write_at(uint64_t offset, const void* data, std::size_t n);
  // fsync, close, rename over the target, fsync of the folder: each checked.
  void commit();
  const std::string& path() const { return path_; }

 private:
  [[noreturn]] void fail(const std::string& what, int err);
  std::string path_, tmp_;
  int fd_ = -1;
  bool committed_ = false;
};

// fsync of a folder, so a rename in it survives a crash. A file system that cannot sync folders
// (EINVAL, EROFS) or a folder that cannot be opened for reading (EACCES) is not an error; anything
// else is an EnvironmentError.
void fsync_dir(const std::string& dir);

}  // namespace ca

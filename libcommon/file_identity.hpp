// Whether two names are one file (device and inode, through symlinks): -i F -o F, merge S S.
#pragma once
#include <string>

namespace ca {

// True when both paths exist and stat() to the same device and inode. "-" names no file here.
bool same_file(const std::string& a, const std::string& b);
// The same for an open descriptor (stdin, stdout) and a path; false unless `fd` is a regular file.
bool same_file(int fd, const std::string& path);

}  // namespace ca

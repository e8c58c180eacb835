// Regular expressions over text a policy wrote (kernel sources, PTX, compiler logs, plans): RE2,
// which runs in linear time without recursion (std::regex recursed per character and a 1 MiB line
// overflowed the stack), on bytes (Latin-1) as std::regex saw them: a byte that is not UTF-8 is a
// character like any other, so `[^;]*` does not stop at it and a rule cannot be split by one.
#pragma once
#include <re2/re2.h>

namespace ca {

inline re2::RE2::Options byte_regex_options() {
  re2::RE2::Options o;
  o.set_encoding(re2::RE2::Options::EncodingLatin1);
  o.set_log_errors(false);
  return o;
}

}  // namespace ca

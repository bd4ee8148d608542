// What kind of file a stat() mode names, for the refusals of the file opener and the writer
// ("not a regular file (a FIFO)").
#pragma once

#include <sys/stat.h>

namespace mantissa {

inline const char* file_type(mode_t mode) {
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISLNK(mode)) return "a symbolic link";
  if (S_ISREG(mode)) return "a regular file";
  return "not a plain file";
}

}  // namespace mantissa

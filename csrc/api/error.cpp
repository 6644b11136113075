// Thread-local storage for the last error and the last kernel name (see error.h).
#include "error.h"
#include "mha_fwd.h"

namespace {
thread_local std::string t_last_error;
thread_local std::string t_last_kernel;
} // namespace

namespace aiter {
void mha_set_last_error(const std::string& msg) { t_last_error = msg; }
void mha_set_last_kernel_name(const char* name) { t_last_kernel = name ? name : ""; }
const char* mha_get_last_error() { return t_last_error.c_str(); }
const char* mha_get_last_kernel_name() { return t_last_kernel.c_str(); }
} // namespace aiter

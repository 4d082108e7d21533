// Compiled by ctest twice, with -Werror: as is it must fail (a discarded
// apf::Result is a warning), with -DAPF_TEST_USE_RESULT it must compile, so
// the failure can only come from [[nodiscard]].
#include <apf.hpp>

void ignore_result(apf::Dispatcher &d) {
#ifdef APF_TEST_USE_RESULT
  (void)d.try_reconfigure("{}");
#else
  d.try_reconfigure("{}");
#endif
}

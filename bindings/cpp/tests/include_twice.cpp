// apf.hpp included twice in one unit: its include guard and its inline
// definitions must make the second inclusion harmless.
#include <apf.hpp>
#include <apf.hpp>

int main() {
  return apf::header_version == apf::library_version() ? 0 : 1;
}

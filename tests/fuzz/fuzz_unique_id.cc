// libFuzzer target: decodeUniqueId (the collUniqueId every rank receives from the launcher or the
// application), and that whatever it accepts encodes back to an id that decodes to the same contents.
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "src/oob/bootstrap.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  collUniqueId id;
  memset(&id, 0, sizeof(id));
  memcpy(id.internal, data, size < sizeof(id.internal) ? size : sizeof(id.internal));
  coll::UniqueIdContents c;
  if (!coll::decodeUniqueId(id, &c).ok()) return 0;
  (void)c.root.toString();
  collUniqueId again;
  if (!coll::encodeUniqueId(c, &again).ok()) __builtin_trap();
  coll::UniqueIdContents d;
  if (!coll::decodeUniqueId(again, &d).ok()) __builtin_trap();
  if (!(d.root == c.root) || d.secret != c.secret || d.authenticated != c.authenticated || d.commNonce != c.commNonce) {
    __builtin_trap();
  }
  return 0;
}

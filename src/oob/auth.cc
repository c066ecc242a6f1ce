// Connection authentication (see auth.h): HMAC-SHA256 challenge-response with OpenSSL.
#include "src/oob/auth.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include <openssl/sha.h>

#include <cstring>

#include "src/base/log.h"

namespace coll {

namespace {

constexpr uint32_t kPrologueMagic = 0x41434c43;  // "CLCA"
constexpr uint8_t kAuthVersion = 1;
constexpr size_t kNonceBytes = 32;
constexpr size_t kMacBytes = 32;
constexpr char kLabel[] = "libcollective connection auth v1";

struct Prologue {
  uint32_t magic;
  uint8_t version;
  uint8_t authenticated;
  uint8_t reserved[2];
};
static_assert(sizeof(Prologue) == 8);

bool computeMac(const Secret& secret, AuthRole role, const uint8_t* firstNonce, const uint8_t* secondNonce,
                uint8_t* mac) {
  uint8_t msg[sizeof(kLabel) + 1 + 2 * kNonceBytes];
  size_t n = 0;
  memcpy(msg + n, kLabel, sizeof(kLabel));
  n += sizeof(kLabel);
  msg[n++] = static_cast<uint8_t>(role);
  memcpy(msg + n, firstNonce, kNonceBytes);
  n += kNonceBytes;
  memcpy(msg + n, secondNonce, kNonceBytes);
  n += kNonceBytes;
  unsigned int len = 0;
  if (HMAC(EVP_sha256(), secret.data(), static_cast<int>(secret.size()), msg, n, mac, &len) == nullptr) {
    return false;
  }
  return len == kMacBytes;
}

Status fail(collResult_t code, const std::string& peerName, const std::string& why) {
  COLL_WARN(-1, "dropping connection with %s: %s", peerName.c_str(), why.c_str());
  return Status(code, "authentication with " + peerName + " failed: " + why);
}

}  // namespace

Status authenticate(Socket& socket, const Secret* secret, AuthRole role, Deadline deadline,
                    const std::string& peerName) {
  Prologue mine{kPrologueMagic, kAuthVersion, static_cast<uint8_t>(secret ? 1 : 0), {0, 0}};
  Prologue theirs{};
  Status st = socket.sendAll(&mine, sizeof(mine), deadline);
  if (st.ok()) st = socket.recvAll(&theirs, sizeof(theirs), deadline);
  if (!st.ok()) return fail(st.code(), peerName, st.message());
  if (theirs.magic != kPrologueMagic || theirs.version != kAuthVersion) {
    return fail(collRemoteError, peerName, "the peer does not speak this protocol version");
  }
  if (theirs.authenticated != mine.authenticated) {
    return fail(collInvalidUsage, peerName,
                mine.authenticated ? "the peer runs without a secret but we have one"
                                   : "the peer requires a secret but we have none "
                                     "(set COLL_COMM_SECRET or COLL_COMM_SECRET_FILE alike on all ranks)");
  }
  if (secret == nullptr) return okStatus();

  uint8_t myNonce[kNonceBytes], peerNonce[kNonceBytes];
  if (RAND_bytes(myNonce, sizeof(myNonce)) != 1) {
    return makeError(collSystemError, "RAND_bytes failed: the system random generator is unusable");
  }
  st = socket.sendAll(myNonce, sizeof(myNonce), deadline);
  if (st.ok()) st = socket.recvAll(peerNonce, sizeof(peerNonce), deadline);
  if (!st.ok()) return fail(st.code(), peerName, st.message());

  AuthRole peerRole = role == AuthRole::Connector ? AuthRole::Acceptor : AuthRole::Connector;
  uint8_t myMac[kMacBytes], expected[kMacBytes], peerMac[kMacBytes];
  if (!computeMac(*secret, role, peerNonce, myNonce, myMac) ||
      !computeMac(*secret, peerRole, myNonce, peerNonce, expected)) {
    return makeError(collSystemError, "HMAC-SHA256 failed (OpenSSL)");
  }
  st = socket.sendAll(myMac, sizeof(myMac), deadline);
  if (st.ok()) st = socket.recvAll(peerMac, sizeof(peerMac), deadline);
  if (!st.ok()) return fail(st.code(), peerName, st.message());
  if (CRYPTO_memcmp(peerMac, expected, kMacBytes) != 0) {
    return fail(collRemoteError, peerName,
                "the peer does not know the communicator's secret (a different job, a stale "
                "COLL_COMM_SECRET, or a stray client)");
  }
  return okStatus();
}

std::string cryptoLibraryVersion() { return OpenSSL_version(OPENSSL_VERSION); }

Status randomSecret(Secret* out) {
  if (RAND_bytes(out->data(), static_cast<int>(out->size())) != 1) {
    return makeError(collSystemError, "RAND_bytes failed: the system random generator is unusable");
  }
  return okStatus();
}

std::string hexEncode(const uint8_t* data, size_t size) {
  static const char kDigits[] = "0123456789abcdef";
  std::string s;
  s.reserve(size * 2);
  for (size_t i = 0; i < size; ++i) {
    s.push_back(kDigits[data[i] >> 4]);
    s.push_back(kDigits[data[i] & 15]);
  }
  return s;
}

bool hexDecode(const std::string& text, std::vector<uint8_t>* out) {
  if (text.size() % 2 != 0) return false;
  auto digit = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  std::vector<uint8_t> bytes(text.size() / 2);
  for (size_t i = 0; i < bytes.size(); ++i) {
    int hi = digit(text[2 * i]), lo = digit(text[2 * i + 1]);
    if (hi < 0 || lo < 0) return false;
    bytes[i] = static_cast<uint8_t>(hi << 4 | lo);
  }
  *out = std::move(bytes);
  return true;
}

Status secretFromText(const std::string& text, Secret* out) {
  if (text.empty()) {
    return makeError(collInvalidUsage, "the job secret is empty (COLL_COMM_SECRET / _FILE)");
  }
  std::vector<uint8_t> bytes;
  if (text.size() == 2 * out->size() && hexDecode(text, &bytes)) {
    memcpy(out->data(), bytes.data(), out->size());
    return okStatus();
  }
  auto digest = sha256(text.data(), text.size());
  memcpy(out->data(), digest.data(), out->size());
  return okStatus();
}

std::array<uint8_t, 32> sha256(const void* data, size_t size) {
  std::array<uint8_t, 32> d{};
  SHA256(static_cast<const unsigned char*>(data), size, d.data());
  return d;
}

}  // namespace coll

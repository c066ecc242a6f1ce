// Authentication of every bootstrap and data connection: a mutual HMAC-SHA256 challenge-response
// over a job secret (OpenSSL libcrypto), plus helpers to make, print and parse secrets.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "src/base/deadline.h"
#include "src/base/status.h"
#include "src/oob/socket.h"

namespace coll {

using Secret = std::array<uint8_t, 16>;  // same alias as in bootstrap.h

// Which end of the connection we are; the two ends prove different statements, so an answer
// cannot be reflected back to its sender.
enum class AuthRole : uint8_t { Connector = 1, Acceptor = 2 };

// Runs the handshake on a connected socket. Both ends first exchange a small prologue (magic,
// version, mode), so a peer in the other mode or a stray client fails fast instead of hanging.
// With `secret` == nullptr (unauthenticated mode) only the prologue is exchanged. With a secret,
// each end sends a random 32-byte nonce, answers HMAC(secret, label || role || peerNonce ||
// myNonce) and checks the peer's answer in constant time. On failure the caller must drop the
// socket; a warning naming `peerName` (never the secret) has been logged.
Status authenticate(Socket& socket, const Secret* secret, AuthRole role, Deadline deadline,
                    const std::string& peerName);

// A fresh random secret (RAND_bytes).
Status randomSecret(Secret* out);

// Lower-case hex of bytes; hexDecode accepts either case and fails on odd length or junk.
std::string hexEncode(const uint8_t* data, size_t size);
bool hexDecode(const std::string& text, std::vector<uint8_t>* out);

// COLL_COMM_SECRET text to a secret: exactly 32 hex digits are the secret's bytes; any other
// non-empty text is hashed (SHA-256, first 16 bytes).
Status secretFromText(const std::string& text, Secret* out);

// SHA-256 of data (for derived, secret-free identifiers).
std::array<uint8_t, 32> sha256(const void* data, size_t size);

// The OpenSSL the authentication runs on ("OpenSSL 3.0.x ..."), for collinfo.
std::string cryptoLibraryVersion();

}  // namespace coll

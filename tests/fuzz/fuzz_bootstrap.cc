// libFuzzer target: the bootstrap's parsers of remote bytes: a listener's hello header, a
// registration at the root, the rank table (src/oob/wire.h), and the failure-propagation control
// messages carried over the bootstrap (src/oob/failure.h: FAILED notices, wait-for answers).
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "src/oob/failure.h"
#include "src/oob/wire.h"

// Layout: [selector][4 bytes: nranks or knownNranks][8 bytes: the root's nonce][payload...].
extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 13) return 0;
  const uint8_t selector = data[0];
  int32_t n;
  uint64_t nonce;
  memcpy(&n, data + 1, 4);
  memcpy(&nonce, data + 5, 8);
  const uint8_t* body = data + 13;
  const size_t bodySize = size - 13;
  switch (selector % 5) {
    case 0: {
      coll::BootstrapHello hello;
      const char* bad = coll::parseBootstrapHello(body, bodySize, n, &hello);
      if (bad == nullptr) {
        // What the listener relies on once a hello is accepted.
        if (hello.type == 1 && (hello.fromRank < 0 || hello.fromRank >= n || hello.length > coll::kBootstrapMaxMessage))
          __builtin_trap();
        if (hello.type == 2 && hello.length != 0) __builtin_trap();
        if (hello.type == 3 && hello.length != static_cast<uint64_t>(n) * coll::kBootstrapEntryBytes) __builtin_trap();
      }
      break;
    }
    case 1: {
      coll::BootstrapRegistration reg;
      const uint32_t code = coll::parseBootstrapRegistration(body, bodySize, nonce, n, &reg);
      if (code == 0) {
        if (reg.nranks < 1 || reg.nranks > coll::kBootstrapMaxRanks || reg.rank < 0 || reg.rank >= reg.nranks)
          __builtin_trap();
        if (n >= 0 && reg.nranks != n) __builtin_trap();
        if (reg.info.cpus < 0 || reg.info.cpus > coll::kBootstrapMaxCpus) __builtin_trap();
        (void)reg.info.address.toString();
        // The root relies on these: the rank is in its block, a forwarded block is whole.
        if (reg.groups < 1 || reg.groups > reg.nranks || reg.group < 0 || reg.group >= reg.groups) __builtin_trap();
        const int start = coll::bootstrapGroupStart(reg.group, reg.groups, reg.nranks);
        const int end = coll::bootstrapGroupStart(reg.group + 1, reg.groups, reg.nranks);
        if (reg.blockCount == 0 && (reg.rank < start || reg.rank >= end)) __builtin_trap();
        if (reg.blockCount != 0 && (reg.group == 0 || reg.rank != start || reg.blockCount != uint32_t(end - start)))
          __builtin_trap();
      }
      break;
    }
    case 3: {
      coll::FailedMessage m;
      if (coll::decodeFailed(body, bodySize, n, &m)) {
        if (m.rank < 0 || m.rank >= n) __builtin_trap();
        std::vector<uint8_t> again = coll::encodeFailed(m);
        coll::FailedMessage m2;
        if (!coll::decodeFailed(again.data(), again.size(), n, &m2) || m2.rank != m.rank || m2.reason != m.reason) {
          __builtin_trap();
        }
      }
      break;
    }
    case 4: {
      coll::WaitForAnswer a;
      if (coll::decodeWaitFor(body, bodySize, n, &a)) {
        uint8_t wire[coll::kWaitForWire];
        coll::encodeWaitFor(a, wire);
        coll::WaitForAnswer b;
        if (!coll::decodeWaitFor(wire, sizeof(wire), n, &b) || b.seq != a.seq || b.waitPeer != a.waitPeer ||
            b.failedRank != a.failedRank) {
          __builtin_trap();
        }
      }
      break;
    }
    default: {
      // A table's rank count is whatever the receiver expects; keep it near the payload's size so
      // the entry decoder runs (and sometimes off by one or absurd).
      int nranks = static_cast<int>(bodySize / coll::kBootstrapEntryBytes) + (n & 3) - 1;
      if (n < 0) nranks = n;
      std::vector<coll::PeerInfo> peers;
      coll::Status st = coll::parseRankTable(body, bodySize, nranks, &peers);
      if (st.ok()) {
        if (static_cast<int>(peers.size()) != nranks) __builtin_trap();
        for (const auto& p : peers) {
          if (p.address.port() == 0) __builtin_trap();
          if (p.cpus < 0 || p.cpus > coll::kBootstrapMaxCpus) __builtin_trap();
          (void)p.address.toString();
        }
      }
      break;
    }
  }
  return 0;
}

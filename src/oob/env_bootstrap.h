// Environment bootstrap (collCommInitFromEnv): rank, size, rendezvous address and job secret
// from the launcher's variables (collrun, torchrun, Open MPI, PMI, Slurm), and the unique id
// that every rank derives identically from them.
#pragma once

#include <string>
#include <vector>

#include "collective/collective.h"
#include "src/base/status.h"
#include "src/oob/bootstrap.h"
#include "src/oob/socket.h"

namespace coll {

struct EnvBootstrap {
  int rank = -1;
  int nranks = 0;
  SocketAddress rendezvous;
  bool haveSecret = false;
  Secret secret{};
  std::string source;  // which variables were used, for logs ("RANK/WORLD_SIZE, MASTER_ADDR:MASTER_PORT+1")
};

// Reads rank/size from COLL_RANK/COLL_WORLD_SIZE, else RANK/WORLD_SIZE, else
// OMPI_COMM_WORLD_RANK/_SIZE, else PMI_RANK/PMI_SIZE, else SLURM_PROCID/SLURM_NTASKS; the
// rendezvous from COLL_COMM_ID, else MASTER_ADDR and MASTER_PORT+1, else the first Slurm node
// with port 20000 + SLURM_JOB_ID % 20000; the secret from COLL_COMM_SECRET or
// COLL_COMM_SECRET_FILE (none: unauthenticated, with a warning once).
Status resolveEnvBootstrap(EnvBootstrap* out);

// The communicator's unique id, the same on every rank. The root (rank 0) also starts the
// bootstrap root listening at the rendezvous port.
Status envUniqueId(const EnvBootstrap& env, bool isRoot, collUniqueId* id);

// Expands a Slurm host list ("node[01-04,07],gpu5" -> node01..node04, node07, gpu5), keeping
// zero padding; fails on malformed text or more than maxHosts names.
Status expandSlurmNodeList(const std::string& list, std::vector<std::string>* hosts, size_t maxHosts = 1 << 20);
// The first host of a Slurm host list, without expanding the rest.
Status firstSlurmNode(const std::string& list, std::string* host);

}  // namespace coll

/* An application as users write it: C99, only the installed header and library. Runs a 1-rank
 * communicator and an All-Reduce; used by the install test (CMake package and pkg-config). */
#include <collective/collective.h>
#include <stdio.h>

int main(void) {
  int version = 0;
  collUniqueId id;
  collComm_t comm = COLL_COMM_NULL;
  float send[4] = {1.0f, 2.0f, 3.0f, 4.0f};
  float recv[4] = {0};
  collConfig_t config = COLL_CONFIG_INITIALIZER;
  int i;
  if (collGetVersion(&version) != collSuccess || version != COLL_VERSION_CODE) return 1;
  if (collGetUniqueId(&id) != collSuccess) return 2;
  config.commName = "consumer";
  if (collCommInitRankConfig(&comm, 1, id, 0, &config) != collSuccess) {
    fprintf(stderr, "init: %s\n", collGetLastError(NULL));
    return 3;
  }
  if (collAllReduce(send, recv, 4, collFloat32, collSum, comm, NULL) != collSuccess) return 4;
  for (i = 0; i < 4; ++i) {
    if (recv[i] != send[i]) return 5;
  }
  if (collCommDestroy(comm) != collSuccess) return 6;
  printf("consumer: libcollective %d ok\n", version);
  return 0;
}

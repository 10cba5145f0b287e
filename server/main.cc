// conveyord: Conveyor's per-node data-loading daemon. See server/daemon.h.
#include "server/daemon.h"

int main(int argc, char** argv) { return conveyor::server::DaemonMain(argc, argv); }

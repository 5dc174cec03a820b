/* The helpers declared in quiver_dpdk.h. */
#include "quiver_dpdk.h"

int quiver_rte_errno(void)
{
	return rte_errno;
}

const uint64_t QUIVER_ETH_RSS_IP = RTE_ETH_RSS_IP;
const uint64_t QUIVER_ETH_RSS_UDP = RTE_ETH_RSS_UDP;
const uint64_t QUIVER_ETH_RSS_TCP = RTE_ETH_RSS_TCP;
const uint64_t QUIVER_ETH_RX_OFFLOAD_SCATTER = RTE_ETH_RX_OFFLOAD_SCATTER;
const uint64_t QUIVER_ETH_TX_OFFLOAD_MULTI_SEGS = RTE_ETH_TX_OFFLOAD_MULTI_SEGS;
const uint64_t QUIVER_BAD_IOVA = RTE_BAD_IOVA;
const uint32_t QUIVER_MEMPOOL_OBJHDR_SIZE = sizeof(struct rte_mempool_objhdr);

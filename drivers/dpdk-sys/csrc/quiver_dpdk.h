/*
 * Everything dpdk-sys binds: the DPDK 22.11 headers Quiver uses, and a few helpers of our own for
 * what bindgen cannot reach directly (a per-lcore TLS variable, values defined by function-like
 * macros or casts).
 */
#ifndef QUIVER_DPDK_H
#define QUIVER_DPDK_H

#include <stdint.h>

#include <rte_bus.h>
#include <rte_bus_vdev.h>
#include <rte_dev.h>
#include <rte_eal.h>
#include <rte_errno.h>
#include <rte_eth_ring.h>
#include <rte_ethdev.h>
#include <rte_lcore.h>
#include <rte_mbuf.h>
#include <rte_memory.h>
#include <rte_mempool.h>
#include <rte_ring.h>
#include <rte_version.h>

/* rte_errno of the calling thread (a per-lcore TLS variable, invisible to bindgen). */
int quiver_rte_errno(void);

/* RTE_ETH_RSS_IP, RTE_ETH_RSS_UDP and RTE_ETH_RSS_TCP (built with RTE_BIT64). */
extern const uint64_t QUIVER_ETH_RSS_IP;
extern const uint64_t QUIVER_ETH_RSS_UDP;
extern const uint64_t QUIVER_ETH_RSS_TCP;

/* RTE_ETH_RX_OFFLOAD_SCATTER and RTE_ETH_TX_OFFLOAD_MULTI_SEGS (built with RTE_BIT64). */
extern const uint64_t QUIVER_ETH_RX_OFFLOAD_SCATTER;
extern const uint64_t QUIVER_ETH_TX_OFFLOAD_MULTI_SEGS;

/* RTE_BAD_IOVA (a cast). */
extern const uint64_t QUIVER_BAD_IOVA;

/* sizeof(struct rte_mempool_objhdr): the bytes a mempool writes in front of each object. */
extern const uint32_t QUIVER_MEMPOOL_OBJHDR_SIZE;

#endif

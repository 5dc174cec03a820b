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
#include <rte_graph.h>
#include <rte_graph_worker.h>
#include <rte_lcore.h>
#include <rte_lpm.h>
#include <rte_mbuf.h>
#include <rte_memory.h>
#include <rte_mempool.h>
#include <rte_node_eth_api.h>
#include <rte_node_ip4_api.h>
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

/*
 * The graph benchmark (csrc/graph_bench.c): DPDK's own graph library routing IPv4 beside
 * Quiver's, fed by a source node of ours.
 */

/* The source node's name and the frames it makes (bytes). */
#define QUIVER_GB_SOURCE_NODE "quiver_bench_source"
#define QUIVER_GB_FRAME_LEN 64

/* Gives the source node its mempool, a QUIVER_GB_FRAME_LEN-byte Ethernet/IPv4 template and
 * `n_dsts` destinations (host order) to write into successive packets, with the IPv4 checksum
 * updated. `dsts` must stay valid until quiver_gb_source_stop. 0, or -EINVAL. */
int quiver_gb_source_config(struct rte_mempool *mp, const uint8_t *frame, const uint32_t *dsts,
			    uint32_t n_dsts);

/* Makes the source node produce nothing and forget the destinations. */
void quiver_gb_source_stop(void);

/* Configures ethdev `port` with one rx queue (buffers from `mp`) and one tx queue, and starts
 * it. 0, or a negative errno. */
int quiver_gb_port_start(uint16_t port, struct rte_mempool *mp);

/* The running totals rte_graph_walk keeps (RTE_LIBRTE_GRAPH_STATS) for node `node` of graph
 * `graph`. 0, or -ENOENT. */
int quiver_gb_node_totals(const char *graph, const char *node, uint64_t *calls, uint64_t *objs,
			  uint64_t *cycles);

/* Points graph `graph`'s ip4_lookup node at `lpm` instead of the table librte_node made for
 * socket `socket` (IPV4_L3FWD_LPM_<socket>, 1024 rules and 256 tbl8 groups). -EPROTO, and
 * nothing written, when the node's context does not start with that table's address. */
int quiver_gb_lookup_use_lpm(const char *graph, int socket, struct rte_lpm *lpm);

/* Writes `n` routes (`ips[i]`/`depths[i]` -> `values[i]`, in ascending order of depth) into
 * the tbl24 and tbl8 tables of an empty `lpm` made with `number_tbl8s` groups: the entries
 * rte_lpm_add would write, without its per-rule bookkeeping (whose linear scan of each depth's
 * rules makes a million adds take minutes). The number of tbl8 groups used, -EINVAL (a depth
 * out of order or range, a value over 24 bits), or -ENOSPC (groups exhausted). */
int quiver_gb_lpm_fill(struct rte_lpm *lpm, uint32_t number_tbl8s, const uint32_t *ips,
		       const uint8_t *depths, const uint32_t *values, uint32_t n);

#endif

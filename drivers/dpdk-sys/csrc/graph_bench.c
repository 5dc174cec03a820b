/*
 * The benchmark side of DPDK's graph library (benches' `graph-ip4` reference): a source node
 * that makes 64-byte IPv4/UDP packets as Quiver's bench source does, a loader that fills an
 * rte_lpm's tables with a sorted route list, and small helpers the Rust side calls (port start,
 * per-node totals, pointing librte_node's ip4_lookup at that table).
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "quiver_dpdk.h"

/* What the source node writes: one template, the next destination from an array. One graph
 * per process uses it (the bench makes one). */
static struct {
	struct rte_mempool *mp;
	uint8_t frame[QUIVER_GB_FRAME_LEN];
	const uint32_t *dsts;
	uint32_t n_dsts;
	uint32_t next;
} gb_source;

/* RFC 1624: the checksum `c` after a 16-bit word changed from `old` to `new_w`. */
static inline uint16_t gb_csum_update(uint16_t c, uint16_t old, uint16_t new_w)
{
	uint32_t s = (uint32_t)(uint16_t)~c + (uint16_t)~old + new_w;

	s = (s & 0xffff) + (s >> 16);
	s = (s & 0xffff) + (s >> 16);
	return (uint16_t)~s;
}

static uint16_t gb_source_process(struct rte_graph *graph, struct rte_node *node, void **objs,
				  uint16_t nb_objs)
{
	const uint16_t n = RTE_GRAPH_BURST_SIZE;
	struct rte_mbuf **to;
	uint16_t i;

	(void)objs;
	(void)nb_objs;
	if (gb_source.mp == NULL || gb_source.n_dsts == 0)
		return 0;
	to = (struct rte_mbuf **)rte_node_next_stream_get(graph, node, 0, n);
	if (rte_pktmbuf_alloc_bulk(gb_source.mp, to, n) != 0)
		return 0;
	for (i = 0; i < n; i++) {
		struct rte_mbuf *m = to[i];
		uint8_t *d = rte_pktmbuf_mtod(m, uint8_t *);
		uint32_t dst = gb_source.dsts[gb_source.next];
		uint16_t old_hi, old_lo, c;

		if (++gb_source.next == gb_source.n_dsts)
			gb_source.next = 0;
		memcpy(d, gb_source.frame, QUIVER_GB_FRAME_LEN);
		old_hi = (uint16_t)(d[30] << 8 | d[31]);
		old_lo = (uint16_t)(d[32] << 8 | d[33]);
		d[30] = (uint8_t)(dst >> 24);
		d[31] = (uint8_t)(dst >> 16);
		d[32] = (uint8_t)(dst >> 8);
		d[33] = (uint8_t)dst;
		c = (uint16_t)(d[24] << 8 | d[25]);
		c = gb_csum_update(c, old_hi, (uint16_t)(dst >> 16));
		c = gb_csum_update(c, old_lo, (uint16_t)dst);
		d[24] = (uint8_t)(c >> 8);
		d[25] = (uint8_t)c;
		m->data_len = QUIVER_GB_FRAME_LEN;
		m->pkt_len = QUIVER_GB_FRAME_LEN;
		/* What a NIC's parser reports for it, and all pkt_cls reads. */
		m->packet_type = RTE_PTYPE_L2_ETHER | RTE_PTYPE_L3_IPV4;
	}
	rte_node_next_stream_put(graph, node, 0, n);
	return n;
}

static struct rte_node_register gb_source_node = {
	.name = QUIVER_GB_SOURCE_NODE,
	.flags = RTE_NODE_SOURCE_F,
	.process = gb_source_process,
	.nb_edges = 1,
	.next_nodes = {"pkt_cls"},
};

RTE_NODE_REGISTER(gb_source_node);

int quiver_gb_source_config(struct rte_mempool *mp, const uint8_t *frame, const uint32_t *dsts,
			    uint32_t n_dsts)
{
	if (mp == NULL || frame == NULL || dsts == NULL || n_dsts == 0)
		return -EINVAL;
	memcpy(gb_source.frame, frame, QUIVER_GB_FRAME_LEN);
	gb_source.dsts = dsts;
	gb_source.n_dsts = n_dsts;
	gb_source.next = 0;
	gb_source.mp = mp;
	return 0;
}

void quiver_gb_source_stop(void)
{
	gb_source.mp = NULL;
	gb_source.dsts = NULL;
	gb_source.n_dsts = 0;
}

int quiver_gb_port_start(uint16_t port, struct rte_mempool *mp)
{
	struct rte_eth_conf conf;
	int socket = (int)rte_socket_id();
	int rc;

	memset(&conf, 0, sizeof(conf));
	rc = rte_eth_dev_configure(port, 1, 1, &conf);
	if (rc < 0)
		return rc;
	rc = rte_eth_rx_queue_setup(port, 0, 512, (unsigned int)socket, NULL, mp);
	if (rc < 0)
		return rc;
	rc = rte_eth_tx_queue_setup(port, 0, 512, (unsigned int)socket, NULL);
	if (rc < 0)
		return rc;
	return rte_eth_dev_start(port);
}

int quiver_gb_node_totals(const char *graph, const char *node, uint64_t *calls, uint64_t *objs,
			  uint64_t *cycles)
{
	struct rte_node *n = rte_graph_node_get_by_name(graph, node);

	if (n == NULL)
		return -ENOENT;
	*calls = n->total_calls;
	*objs = n->total_objs;
	*cycles = n->total_cycles;
	return 0;
}

int quiver_gb_lookup_use_lpm(const char *graph, int socket, struct rte_lpm *lpm)
{
	struct rte_node *n = rte_graph_node_get_by_name(graph, "ip4_lookup");
	char name[RTE_LPM_NAMESIZE];
	struct rte_lpm **slot;
	struct rte_lpm *own;

	if (n == NULL || lpm == NULL)
		return -ENOENT;
	snprintf(name, sizeof(name), "IPV4_L3FWD_LPM_%d", socket);
	own = rte_lpm_find_existing(name);
	/* The node's context starts with its socket's table (lib/node/ip4_lookup.c): refuse to
	 * write anything unless that is what is there. */
	slot = (struct rte_lpm **)(void *)n->ctx;
	if (own == NULL || *slot != own)
		return -EPROTO;
	*slot = lpm;
	return 0;
}

static inline void gb_fill_group(struct rte_lpm_tbl_entry *g, uint32_t first, uint32_t count,
				 uint8_t depth, uint32_t value)
{
	const struct rte_lpm_tbl_entry e = {
		.next_hop = value, .valid = 1, .valid_group = 1, .depth = depth};
	uint32_t j;

	for (j = first; j < first + count; j++)
		if (!g[j].valid || g[j].depth <= depth)
			g[j] = e;
}

int quiver_gb_lpm_fill(struct rte_lpm *lpm, uint32_t number_tbl8s, const uint32_t *ips,
		       const uint8_t *depths, const uint32_t *values, uint32_t n)
{
	uint32_t groups = 0, r;
	uint8_t last = 1;

	for (r = 0; r < n; r++) {
		uint8_t d = depths[r];
		uint32_t v = values[r];
		uint32_t ip = d == 32 ? ips[r] : ips[r] & ~(UINT32_MAX >> d);

		if (d < 1 || d > 32 || d < last || v > 0xffffff)
			return -EINVAL;
		last = d;
		if (d <= 24) {
			const struct rte_lpm_tbl_entry e = {
				.next_hop = v, .valid = 1, .valid_group = 0, .depth = d};
			uint32_t first = ip >> 8, count = 1u << (24 - d), i;

			for (i = first; i < first + count; i++) {
				struct rte_lpm_tbl_entry *t = &lpm->tbl24[i];

				if (t->valid && t->valid_group)
					gb_fill_group(&lpm->tbl8[t->next_hop *
								 RTE_LPM_TBL8_GROUP_NUM_ENTRIES],
						      0, RTE_LPM_TBL8_GROUP_NUM_ENTRIES, d, v);
				else if (!t->valid || t->depth <= d)
					*t = e;
			}
		} else {
			struct rte_lpm_tbl_entry *t = &lpm->tbl24[ip >> 8];

			if (!(t->valid && t->valid_group)) {
				/* A new group, every entry what the tbl24 entry was. */
				const struct rte_lpm_tbl_entry inherit = {
					.next_hop = t->next_hop,
					.valid = t->valid,
					.valid_group = 1,
					.depth = t->depth};
				const struct rte_lpm_tbl_entry ext = {
					.next_hop = groups, .valid = 1, .valid_group = 1, .depth = 0};
				struct rte_lpm_tbl_entry *g;
				uint32_t j;

				if (groups == number_tbl8s)
					return -ENOSPC;
				g = &lpm->tbl8[groups * RTE_LPM_TBL8_GROUP_NUM_ENTRIES];
				for (j = 0; j < RTE_LPM_TBL8_GROUP_NUM_ENTRIES; j++)
					g[j] = inherit;
				*t = ext;
				groups++;
			}
			gb_fill_group(&lpm->tbl8[t->next_hop * RTE_LPM_TBL8_GROUP_NUM_ENTRIES],
				      ip & 0xff, 1u << (32 - d), d, v);
		}
	}
	return (int)groups;
}

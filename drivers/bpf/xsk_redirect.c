// SPDX-License-Identifier: GPL-2.0 OR MIT
//
// Quiver's XDP program for AF_XDP ports (drivers/src/af_xdp). It hands each frame an interface
// receives to the AF_XDP socket bound to the frame's receive queue, if there is one, and to the
// kernel otherwise (XDP_PASS).
//
// In "tunnel" mode (a node uplink) only UDP to one of the ports in `tunnel_ports` (Quiver's VXLAN
// and WireGuard ports) goes to Quiver; everything else, ARP included, stays with the kernel: the
// node keeps its NIC.
//
// Self-contained on purpose: the few kernel ABI constants it needs are spelled out below, so it
// builds with a bare `clang -target bpf` and no kernel or libbpf headers.

typedef unsigned char __u8;
typedef unsigned short __u16;
typedef unsigned int __u32;
typedef unsigned long long __u64;

#define SEC(name) __attribute__((section(name), used))
#define __uint(name, val) int (*name)[val]
#define __type(name, val) typeof(val) *name

// enum bpf_map_type
#define BPF_MAP_TYPE_HASH 1
#define BPF_MAP_TYPE_ARRAY 2
#define BPF_MAP_TYPE_XSKMAP 17
// enum xdp_action
#define XDP_PASS 2
// enum bpf_func_id
#define BPF_FUNC_map_lookup_elem 1
#define BPF_FUNC_redirect_map 51

struct xdp_md {
  __u32 data;
  __u32 data_end;
  __u32 data_meta;
  __u32 ingress_ifindex;
  __u32 rx_queue_index;
  __u32 egress_ifindex;
};

static void *(*bpf_map_lookup_elem)(void *map, const void *key) = (void *)BPF_FUNC_map_lookup_elem;
static long (*bpf_redirect_map)(void *map, __u64 key, __u64 flags) = (void *)BPF_FUNC_redirect_map;

// The AF_XDP socket of each receive queue.
struct {
  __uint(type, BPF_MAP_TYPE_XSKMAP);
  __uint(max_entries, 256);
  __type(key, __u32);
  __type(value, __u32);
} xsks SEC(".maps");

// Entry 0: 0 takes every frame, 1 only tunnel traffic.
struct {
  __uint(type, BPF_MAP_TYPE_ARRAY);
  __uint(max_entries, 1);
  __type(key, __u32);
  __type(value, __u32);
} mode SEC(".maps");

// Entry `port` (the UDP destination port in network byte order, as the frame has it) is 1 when
// that port is tunnel traffic in tunnel mode. An array: one lookup of any port, and room for all
// of them (a node uplink holds VXLAN's port and NSM's whole WireGuard range).
struct {
  __uint(type, BPF_MAP_TYPE_ARRAY);
  __uint(max_entries, 65536);
  __type(key, __u32);
  __type(value, __u8);
} tunnel_ports SEC(".maps");

#define ETH_HLEN 14
#define ETH_P_IP 0x0800
#define ETH_P_IPV6 0x86DD
#define ETH_P_8021Q 0x8100
#define IPPROTO_UDP 17

static __attribute__((always_inline)) __u16 be16(const __u8 *p) { return (__u16)((p[0] << 8) | p[1]); }

// Whether the frame is UDP (IPv4 or IPv6, not a later fragment) to a port in `tunnel_ports`.
static __attribute__((always_inline)) int is_tunnel(struct xdp_md *ctx) {
  const __u8 *data = (const __u8 *)(unsigned long)ctx->data;
  const __u8 *end = (const __u8 *)(unsigned long)ctx->data_end;
  const __u8 *l3 = data + ETH_HLEN;
  if (l3 > end)
    return 0;
  __u16 type = be16(data + 12);
  if (type == ETH_P_8021Q) {
    if (l3 + 4 > end)
      return 0;
    type = be16(l3 + 2);
    l3 += 4;
  }
  const __u8 *l4;
  if (type == ETH_P_IP) {
    if (l3 + 20 > end)
      return 0;
    if (l3[9] != IPPROTO_UDP)
      return 0;
    if ((be16(l3 + 6) & 0x1fff) != 0) // a later fragment has no UDP header
      return 0;
    l4 = l3 + (l3[0] & 0x0f) * 4;
  } else if (type == ETH_P_IPV6) {
    if (l3 + 40 > end)
      return 0;
    if (l3[6] != IPPROTO_UDP) // extension headers: the kernel's
      return 0;
    l4 = l3 + 40;
  } else {
    return 0;
  }
  if (l4 + 8 > end)
    return 0;
  __u32 port = *(const __u16 *)(l4 + 2);
  __u8 *tunnel = bpf_map_lookup_elem(&tunnel_ports, &port);
  return tunnel && *tunnel;
}

SEC("xdp")
int quiver_xsk(struct xdp_md *ctx) {
  __u32 zero = 0;
  __u32 *m = bpf_map_lookup_elem(&mode, &zero);
  if (m && *m == 1 && !is_tunnel(ctx))
    return XDP_PASS;
  return bpf_redirect_map(&xsks, ctx->rx_queue_index, XDP_PASS);
}

char _license[] SEC("license") = "Dual MIT/GPL";

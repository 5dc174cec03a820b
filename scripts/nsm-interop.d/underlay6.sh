# shellcheck shell=bash
# scripts/nsm-interop.d/underlay6.sh, sourced by scripts/nsm-interop: the remote scenarios
# between nodes of an IPv6-only cluster, whose NSM_TUNNEL_IP is IPv6 (underlay_start with
# UNDERLAY_FAMILY=6: ul0 holds fd77::N/64 and no IPv4 address):
#
#   Kernel2Ethernet2Kernel_ul6  Kernel2Ethernet2Kernel (ETHERNET payload over VXLAN) with VXLAN
#                               over IPv6 between the nodes
#   Kernel2IP2Kernel_ul6        Kernel2IP2Kernel (IP payload over WireGuard) with WireGuard
#                               over IPv6 between the nodes
#   Kernel2IP2Kernel_ipv6_ul6   Kernel2IP2Kernel_ipv6 (scripts/nsm-interop.d/ipv6.sh: the
#                               connection has IPv6 addresses only) over an IPv6 underlay: an
#                               IPv6-only cluster, IPv6 inside WireGuard over IPv6
#
# Each checks what its IPv4-underlay scenario checks (kernel_ping_close: the NSC's address and
# ping both ways, the liveness check green, both Quivers' tunnels and their AF_XDP node uplinks
# on ul0 used, the nodes' own ping and TCP over ul0 meanwhile, nothing left after the Close), and
# what sharing an IPv6 NIC with the kernel asks: each Quiver's uplink mirrors the kernel's IPv6
# neighbour entry of the other node (show neighbors lists the other node's fd77::N on the
# uplink, with the MAC the kernel has), and Quiver sent no neighbour solicitation and no ARP
# request of its own (the kernel keeps neighbour discovery on its NIC).
SCENARIOS+=(Kernel2Ethernet2Kernel_ul6 Kernel2IP2Kernel_ul6 Kernel2IP2Kernel_ipv6_ul6)

# The sum of Quiver N's error counter NODE/REASON (`show errors` lists the non-zero ones).
ul6_error() {
  ctl "$1" show errors | jq --arg n "$2" --arg r "$3" '[.[] | select(.node == $n and .reason == $r) | .count] | add // 0'
}

# The MAC of the other node's ul0 in Quiver N's table (its uplink's neighbour of that address),
# or nothing.
ul6_quiver_neighbour() {
  local other=$((3 - $1))
  ctl "$1" show neighbors |
    jq -r --arg ip "${TUNNEL_IP[$other]}" '[.[] | select(.ip == $ip and .interface == "uplink") | .mac][0] // empty'
}

# ul6_checks: the uplinks' IPv6 neighbours are the kernel's, and neither Quiver solicited any.
# Run while the nodes' kernels still know each other (before the scenario ends).
ul6_checks() {
  local n other kernel mine sent arp
  for n in 1 2; do
    other=$((3 - n))
    kernel=$(ip -n "$PFX-node$n" -6 neigh show "${TUNNEL_IP[$other]}" dev ul0 | awk '{for (i = 1; i < NF; i++) if ($i == "lladdr") print $(i + 1)}')
    mine=$(ul6_quiver_neighbour "$n")
    if [[ -z $mine || ${mine,,} != "${kernel,,}" ]]; then
      FAIL="Quiver $n's uplink has ${mine:-no} neighbour for ${TUNNEL_IP[$other]}, the kernel ${kernel:-none}: $(ctl "$n" show neighbors | tr -d '\n' | cut -c1-300)"
      return 1
    fi
    sent=$(ul6_error "$n" ip6-nd-resolve solicitations-sent)
    arp=$(ul6_error "$n" ip4-arp requests-sent)
    if ((sent != 0 || arp != 0)); then
      FAIL="Quiver $n sent $sent neighbour solicitations and $arp ARP requests of its own on a NIC the kernel keeps"
      return 1
    fi
  done
  NOTE+="; each uplink's neighbour ${TUNNEL_IP[2]} / ${TUNNEL_IP[1]} as the kernel's, no solicitation of Quiver's"
}

# ul6_remote SCENARIO: the IPv4-underlay SCENARIO over an IPv6 underlay, then ul6_checks.
ul6_remote() {
  local UNDERLAY_FAMILY=6
  "scenario_$1" || return 1
  [[ -z $FAIL ]] || return 1
  ul6_checks
}

scenario_Kernel2Ethernet2Kernel_ul6() { ul6_remote Kernel2Ethernet2Kernel; }
scenario_Kernel2IP2Kernel_ul6() { ul6_remote Kernel2IP2Kernel; }
scenario_Kernel2IP2Kernel_ipv6_ul6() { ul6_remote Kernel2IP2Kernel_ipv6; }

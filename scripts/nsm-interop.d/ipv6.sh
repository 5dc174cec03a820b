# shellcheck shell=bash
# scripts/nsm-interop.d/ipv6.sh, sourced by scripts/nsm-interop: NSM's IPv6 and dual-stack
# suites over a REMOTE mechanism, as deployments-k8s v1.18.0 runs them, NSC on node 1 and
# icmp-responder on node 2 (the example's podAntiAffinity), the NSC's liveness check on (NSM's
# sdk-kernel check pings every pair of the connection's addresses of one family, 4 pings within
# its 1 s timeout, every 200 ms):
#
#   Kernel2IP2Kernel_ipv6        examples/features/ipv6/Kernel2IP2Kernel_ipv6: the NSE hands out
#                                IPv6 only (NSM_CIDR_PREFIX=2001:db8::/116), IP payload, so
#                                WireGuard carries IPv6 inside over the IPv4 underlay
#   Kernel2IP2Kernel_dual_stack  examples/features/dual-stack/Kernel2IP2Kernel_dual_stack: the
#                                NSE hands out 172.16.1.100/31 and 2001:db8::/116, IP payload:
#                                both families inside WireGuard
#   Kernel2Ethernet2Kernel_ipv6, Kernel2Ethernet2Kernel_dual_stack
#                                the same with ETHERNET payload, over VXLAN (deployments-k8s
#                                v1.18.0 has no such example: these are the two above with
#                                NSM_PAYLOAD=ETHERNET, as Kernel2Ethernet2Kernel is
#                                Kernel2IP2Kernel's)
#
# Each checks what NSM's example checks, ping (ping -6 here) NSC -> NSE at 2001:db8:: and NSE ->
# NSC at 2001:db8::1 (and, dual stack, 172.16.1.100 and 172.16.1.101), and more: the addresses
# are those the example pings; a full-size ping -6 of the NSC's MTU, not fragmented, both ways;
# both Quivers built the tunnel (wireguard or vxlan), with WireGuard its peers are the other
# Quiver's keys and a handshake completed (wg_crossed), and the NSE's pings crossed it (both
# Quivers' tunnel counters grew by them); the NSE's kernel answered the NSC's liveness check's
# pings of each family while the scenario ran; the NSC healed zero times (no `Data plane is
# down`, `Control plane is down` or `Heal success` in its log); after the Close both Quivers
# are empty (quiver_empty).
#
# Kernel2IP2Kernel_ipv6's connection has IPv6 addresses only: each Quiver's L3 cross-connect has
# IPv6 next hops only (the NSE's 2001:db8::, the NSC's 2001:db8::1; src/control/nsm/mod.rs's
# l3_cross_connect). All four run in the default list (scripts/test's too).
SCENARIOS+=(Kernel2IP2Kernel_dual_stack Kernel2IP2Kernel_ipv6 Kernel2Ethernet2Kernel_ipv6
  Kernel2Ethernet2Kernel_dual_stack)

# The first interface other than lo in pod NS with a global IPv6 address.
ip6_pod_iface() { ip -n "$PFX-$1" -6 -o addr show scope global 2>/dev/null | awk '$2 != "lo" {print $2; exit}'; }

has_ip6_pod_iface() { [[ -n $(ip6_pod_iface "$1") ]]; }

# ip6_ping FROM TO [ARGS...]: 4 pings from pod FROM to TO (either family, by the address), as
# NSM's examples ping (`ping -c 4`), 0.2 s apart.
ip6_ping() {
  local from=$1 to=$2 fam=-4
  shift 2
  [[ $to != *:* ]] || fam=-6
  ip netns exec "$PFX-$from" ping "$fam" -c 4 -i 0.2 -W 1 "$@" "$to" >/dev/null 2>&1
}

# The echo requests pod NS's kernel received and the replies it sent, of family 4 or 6, as
# `IN OUT` (/proc/net/snmp's Icmp InEchos/OutEchoReps, /proc/net/snmp6's Icmp6InEchos/
# Icmp6OutEchoReplies).
ip6_echo_counters() {
  if [[ $2 == 6 ]]; then
    ip netns exec "$PFX-$1" awk '$1 == "Icmp6InEchos" {i = $2} $1 == "Icmp6OutEchoReplies" {o = $2} END {print i + 0, o + 0}' /proc/net/snmp6
  else
    ip netns exec "$PFX-$1" awk '$1 == "Icmp:" && $2 !~ /^[0-9]+$/ {for (i = 2; i <= NF; i++) h[$i] = i; next}
      $1 == "Icmp:" {print $h["InEchos"] + 0, $h["OutEchoReps"] + 0; exit}' /proc/net/snmp
  fi
}

# What Quiver N's tunnel received and sent, as `RX-PACKETS RX-BYTES TX-PACKETS TX-BYTES`: with
# WireGuard its peer's (decrypted and encrypted); with VXLAN (a tunnel has no counters of its
# own) its node uplink's, which in tunnel mode takes only its tunnels' datagrams.
ip6_tunnel_counters() {
  local f='"\(.rx_packets // 0) \(.rx_bytes // 0) \(.tx_packets // 0) \(.tx_bytes // 0)"'
  if [[ $TUNNEL_TYPE == wireguard ]]; then
    ctl "$1" show wireguard | jq -r ".[0].peers[0] | $f"
  else
    ctl "$1" show interfaces | jq -r "[.[] | select(.name == \"uplink\")][0] | $f"
  fi
}

# ip6_tunnel_grew BEFORE AFTER PACKETS BYTES: each way, the counters of ip6_tunnel_counters
# grew by at least PACKETS packets and BYTES bytes; sets GREW to how much they grew.
ip6_tunnel_grew() {
  local b a i d ok=0
  read -ra b <<<"$1"
  read -ra a <<<"$2"
  GREW=""
  for i in 0 1 2 3; do
    d=$((a[i] - b[i]))
    GREW+="${GREW:+ }$d"
    if ((i % 2 == 0 && d < $3 || i % 2 == 1 && d < $4)); then ok=1; fi
  done
  return $ok
}

# ip6_never_healed NSC: the NSC's log has no heal at all: no `Data plane is down` (its liveness
# check failed), no `Control plane is down`, no `Heal success` (sdk heal's eventloop logs).
ip6_never_healed() {
  local n
  n=$(grep -c -E "Data plane is down|Control plane is down|Heal success" "$SLOG/$1.log" || true)
  ((n == 0)) && return 0
  FAIL="$1 healed during the scenario ($n heal lines: $(grep -m3 -o -E "Data plane is down|Control plane is down|Heal success" "$SLOG/$1.log" | tr '\n' ',' ))$(liveness "$1")"
  return 1
}

# Why the NSC's first Request failed: the innermost reason (after the last `desc = `) of the
# first failure its log has (nsc_failure's lines), 240 characters; the chain of forwarders and
# nsmgrs before it is the same every time.
ip6_nsc_failure() {
  { grep -m1 -o -E "(Request [^ ]+-[0-9]+|failed connect to NSMgr): .*" "$SLOG/$1.log" || true; } |
    sed -E 's/.*desc = //; s/"? *(cmd|time|level)=.*$//' | cut -c1-240
}

# ip6_remote PAYLOAD SERVICE FAMILIES: the example's set-up and checks (above); FAMILIES is `6`
# or `4 6`. The tunnel follows the payload (IP: wireguard, ETHERNET: vxlan).
ip6_remote() {
  local payload=$1 svc=$2 fams
  read -ra fams <<<"$3"
  local cidr=2001:db8::/116
  [[ ${#fams[@]} == 1 ]] || cidr=172.16.1.100/31,2001:db8::/116
  # Local, yet seen by tunnels_of and ip6_tunnel_counters (bash's dynamic scope); the other
  # scenarios' kernel_ping_close reads it too.
  local TUNNEL_TYPE=vxlan
  [[ $payload != IP ]] || TUNNEL_TYPE=wireguard
  # The addresses the example pings: the NSE's first of each prefix, the NSC's the next.
  declare -A nse_ip=([6]=2001:db8:: [4]=172.16.1.100) nsc_ip=([6]=2001:db8::1 [4]=172.16.1.101)
  registry_start || return 1
  underlay_start || return 1
  node_start 1 || return 1
  node_start 2 || return 1
  nse_start nse1 2 NSM_CIDR_PREFIX="$cidr" NSM_PAYLOAD="$payload" NSM_SERVICE_NAMES="$svc" || return 1
  local t0=$SECONDS
  nsc_start nsc1 1 "kernel://$svc/nsm-1"
  if ! wait_for 60 has_addr6 nsc1 nsm-1; then
    local why
    why=$(ip6_nsc_failure nsc1)
    FAIL="the NSC's nsm-1 got no IPv6 address within 60 s${why:+; nsc: $why}"
    return 1
  fi
  local latency
  latency=$(nsc_latency "$SLOG/nsc1.log")
  wait_for 30 has_ip6_pod_iface nse1 || { FAIL="the NSE's namespace has no interface with an IPv6 address"; return 1; }
  local nse_if f got
  nse_if=$(ip6_pod_iface nse1)
  for f in "${fams[@]}"; do
    if [[ $f == 6 ]]; then
      got="$(addr6 nsc1 nsm-1) $(addr6 nse1 "$nse_if")"
    else
      wait_for 10 has_addr4 nsc1 nsm-1 || { FAIL="the NSC's nsm-1 got no IPv4 address"; return 1; }
      wait_for 10 has_addr4 nse1 "$nse_if" || { FAIL="the NSE's $nse_if got no IPv4 address"; return 1; }
      got="$(addr4 nsc1 nsm-1) $(addr4 nse1 "$nse_if")"
    fi
    [[ $got == "${nsc_ip[$f]} ${nse_ip[$f]}" ]] ||
      { FAIL="NSC and NSE have $got, not the example's ${nsc_ip[$f]} ${nse_ip[$f]}"; return 1; }
  done
  if ((${#fams[@]} == 1)) && [[ -n $(addr4 nsc1 nsm-1) ]]; then
    FAIL="the NSC's nsm-1 has an IPv4 address from an IPv6-only NSE: $(addr4 nsc1 nsm-1)"
    return 1
  fi
  # NSM's checks: ping NSC -> NSE and NSE -> NSC, per family.
  for f in "${fams[@]}"; do
    wait_for 15 ip6_ping nsc1 "${nse_ip[$f]}" ||
      { FAIL="ping -$f NSC ${nsc_ip[$f]} -> NSE ${nse_ip[$f]} fails$(liveness nsc1)"; return 1; }
  done
  local first_ping=$((SECONDS - t0))
  for f in "${fams[@]}"; do
    ip6_ping nse1 "${nsc_ip[$f]}" || { FAIL="ping -$f NSE ${nse_ip[$f]} -> NSC ${nsc_ip[$f]} fails$(liveness nsc1)"; return 1; }
  done
  # Full-size IPv6 both ways, not fragmented: the NSC's MTU less the IPv6 and ICMPv6 headers.
  local mtu
  mtu=$(ip -n "$PFX-nsc1" -j link show dev nsm-1 | jq -r '.[0].mtu')
  ip6_ping nsc1 "${nse_ip[6]}" -M do -s $((mtu - 48)) ||
    { FAIL="ping -6 of $mtu bytes (nsm-1's MTU) NSC -> NSE fails$(liveness nsc1)"; return 1; }
  ip6_ping nse1 "${nsc_ip[6]}" -M do -s $((mtu - 48)) ||
    { FAIL="ping -6 of $mtu bytes (nsm-1's MTU) NSE -> NSC fails$(liveness nsc1)"; return 1; }
  # The tunnel: both Quivers built it, and the NSE's IPv6 crosses it: 20 pings -6 of 1000
  # bytes NSE -> NSC grow each Quiver's tunnel counters both ways by at least 20 packets and
  # 20 x 1048 bytes (the liveness check's pings, 24 bytes each, add packets, never that much).
  local n
  for n in 1 2; do
    [[ $(tunnels_of "$n") != "[]" ]] ||
      { FAIL="ping passes but Quiver $n lists no $TUNNEL_TYPE interface: $(ctl "$n" show interfaces | tr -d '\n' | cut -c1-400)"; return 1; }
  done
  local wg=""
  if [[ $TUNNEL_TYPE == wireguard ]]; then
    wg_crossed || return 1
    wg=" ($WG_NOTE)"
  fi
  uplinks_used || return 1
  local c1 c2 replies grew=()
  c1=$(ip6_tunnel_counters 1) c2=$(ip6_tunnel_counters 2)
  ip netns exec "$PFX-nse1" ping -6 -c 20 -i 0.05 -W 1 -s 1000 "${nsc_ip[6]}" >"$WORK/ip6-ping.txt" 2>&1 || true
  replies=$(grep -o '[0-9]* received' "$WORK/ip6-ping.txt" | cut -d' ' -f1)
  ((${replies:-0} == 20)) || { FAIL="ping -6 -s 1000 NSE -> NSC: ${replies:-0} of 20 replies"; return 1; }
  for n in 1 2; do
    local before
    before=$c1
    [[ $n == 1 ]] || before=$c2
    if ! ip6_tunnel_grew "$before" "$(ip6_tunnel_counters "$n")" 20 $((20 * 1048)); then
      FAIL="20 pings -6 of 1000 bytes NSE -> NSC answered, but Quiver $n's $TUNNEL_TYPE counters (rx packets, bytes, tx packets, bytes) grew by only $GREW"
      return 1
    fi
    grew+=("$GREW")
  done
  # The liveness check is on and passes: the NSE's kernel answers its pings of every family,
  # here over 2 s in which nothing else pings the NSE.
  declare -A e0=()
  for f in "${fams[@]}"; do e0[$f]=$(ip6_echo_counters nse1 "$f"); done
  sleep 2
  local live=""
  for f in "${fams[@]}"; do
    local now in0 out0 in1 out1
    now=$(ip6_echo_counters nse1 "$f")
    read -r in0 out0 <<<"${e0[$f]}"
    read -r in1 out1 <<<"$now"
    if ((in1 - in0 < 4 || out1 - out0 < 4)); then
      FAIL="in 2 s the NSE's kernel got $((in1 - in0)) IPv$f echo requests and sent $((out1 - out0)) replies: the NSC's liveness check does not ping it over IPv$f"
      return 1
    fi
    live+="${live:+, }IPv$f $((out1 - out0))"
  done
  ip6_never_healed nsc1 || return 1
  stop nsc1 TERM 20
  for n in 1 2; do
    wait_for 15 quiver_empty "$n" ||
      { FAIL="15 s after the NSC closed, Quiver $n still has: $(quiver_leftovers "$n" | tr '\n' ';')"; return 1; }
  done
  local addrs=""
  for f in "${fams[@]}"; do addrs+="${addrs:+, }nsc ${nsc_ip[$f]} <-> nse ${nse_ip[$f]}"; done
  NOTE="$addrs ($nse_if) over $TUNNEL_TYPE ${TUNNEL_IP[1]} <-> ${TUNNEL_IP[2]}$wg; full-size ping -6 ($mtu) both ways; tunnel counters (rx packets, bytes, tx packets, bytes) grew by ${grew[0]} / ${grew[1]} under 20 pings -6 of 1000 bytes; liveness replies in 2 s: $live; no heal; Request ${latency:-?} as the NSC saw it; first ping after ${first_ping} s"
}

scenario_Kernel2IP2Kernel_ipv6() { ip6_remote IP kernel2ip2kernel-ipv6 6; }
scenario_Kernel2IP2Kernel_dual_stack() { ip6_remote IP kernel2ip2kernel-dual-stack "4 6"; }
scenario_Kernel2Ethernet2Kernel_ipv6() { ip6_remote ETHERNET kernel2ethernet2kernel-ipv6 6; }
scenario_Kernel2Ethernet2Kernel_dual_stack() { ip6_remote ETHERNET kernel2ethernet2kernel-dual-stack "4 6"; }

# shellcheck shell=bash
# scripts/nsm-interop.d/pbr.sh, sourced by scripts/nsm-interop: NSM's policy-based routing as
# deployments-k8s v1.18.0 shapes and checks it, for the policy-based-routing scenario (here)
# and the heal scenarios (heal.sh), whose NSE is the same apps/nse-kernel-pbr.
#
#   policy-based-routing  NSM's examples/features/policy-based-routing: the icmp-responder
#                         (NSM_CIDR_PREFIX=172.16.1.100/31) serves NSM's policy file; the NSC
#                         and the NSE ping each other, from and to every IPv4 address of the
#                         NSC, and the NSC's kernel routes each policy's traffic as NSM's
#                         example asks (`ip route get`)
#
# NSM's endpoint adds each policy's `from` to the NSC's addresses (sdk policyroute): the NSC
# has 172.16.2.201/24 and 2004::3/120 beside its IPAM address, and NSM's liveness check pings
# from each of them; the NSE answers 172.16.2.201 through the route to it that the forwarder
# gives its side (sdk-kernel's routes to the other side's addresses).

# nsm_pbr_file NSE: NSE's NSM_PBR_CONFIG_PATH file (nse_start's) holds deployments-k8s
# v1.18.0 apps/nse-kernel-pbr/config-file-nse.yaml's policies, as they are there.
nsm_pbr_file() {
  cat >"$WORK/$1-pbr.yaml" <<'YAML'
- from: 172.16.2.201/24
  proto: 6
  dstport: 6666
  routes:
    - prefix: 172.16.3.0/24
      nexthop: 172.16.2.200
- from: 172.16.2.201/24
  proto: 6
  srcport: 5555
- proto: 17
  dstport: 6666
- proto: 17
  dstport: 6667-6670
- from: 2004::3/120
  proto: 17
  dstport: 5555
  routes:
    - prefix: 2004::5/120
      nexthop: 2004::6
YAML
}

# The policies' `from` address the NSC gets (IPv4).
NSM_PBR_FROM=172.16.2.201

# pbr_route POD [-6] ARGS...: `ip [-6] route get ARGS` in pod POD, on one line.
pbr_route() {
  local pod=$1 fam=()
  shift
  [[ $1 != -6 ]] || { fam=(-6); shift; }
  ip -n "$PFX-$pod" "${fam[@]}" route get "$@" 2>&1 | tr -s ' \n' ' '
}

# nsm_pbr_check POD SRC: NSC POD (its IPAM address SRC) routes each policy of nsm_pbr_file as
# NSM's examples check it, word for word (`ip route get` with the policy's selectors, grep -E
# of the answer: tables 1 to 5 in the policies' order, the ones without routes by the default
# route through nsm-1); and more: each table holds one route, traffic no policy selects has no
# route there, the pod has five rules of Quiver's. Sets FAIL, or PBR_TABLES.
nsm_pbr_check() {
  local pod=$1 src=$2 got want args t routes rules
  while IFS='|' read -r args want; do
    # shellcheck disable=SC2086 # args are words
    got=$(pbr_route "$pod" $args)
    grep -E -q -- "$want" <<<"$got" ||
      { FAIL="$pod: ip route get $args is '$got', NSM's example wants '$want'"; return 1; }
  done <<EOF
172.16.3.1 from 172.16.2.201 ipproto tcp dport 6666|172.16.3.1 from 172.16.2.201 via 172.16.2.200 dev nsm-1 table 1
172.16.3.1 from 172.16.2.201 ipproto tcp sport 5555|172.16.3.1 from 172.16.2.201 dev nsm-1 table 2
172.16.4.1 ipproto udp dport 6666|172.16.4.1 dev nsm-1 table 3 src $src
172.16.4.1 ipproto udp dport 6668|172.16.4.1 dev nsm-1 table 4 src $src
-6 2004::5 from 2004::3 ipproto udp dport 5555|via 2004::6 dev nsm-1 table 5 src 2004::3
EOF
  got=$(pbr_route "$pod" 172.16.3.1 ipproto tcp dport 6667)
  [[ $got == *unreachable* ]] || { FAIL="$pod: TCP to 172.16.3.1:6667, which no policy selects, goes '$got'"; return 1; }
  for t in 1 2 3 4 5; do
    routes=$(pbr_table "$pod" -4 "$t"; pbr_table "$pod" -6 "$t")
    if [[ $(grep -c . <<<"$routes") != 1 ]]; then
      FAIL="$pod: table $t holds $(tr '\n' ';' <<<"$routes"), not one route"
      return 1
    fi
  done
  rules=$(pods_rules | awk -v p="$pod" '$1 == p')
  if [[ $(grep -c . <<<"$rules") != 5 ]]; then
    FAIL="$pod has $(grep -c . <<<"$rules") rules of Quiver's, not 5: $(tr '\n' ';' <<<"$rules")"
    return 1
  fi
  PBR_TABLES=1-5
}

# pbr_table POD -4|-6 T: the routes of that family in table T of pod POD (none when the
# family has no table T: ip says so, and that is not shown), errors shown.
pbr_table() {
  ip -n "$PFX-$1" "$2" route show table "$3" 2>&1 |
    grep -v -e '^Error: ipv[46]: FIB table does not exist\.$' -e '^Dump terminated$' || true
}

ping_src() { ip netns exec "$PFX-$1" ping -c 3 -i 0.2 -W 1 -I "$2" "$3" >/dev/null 2>&1; }

# nsm_pbr_pings NSC NSE NSE-ADDR: the NSC pings the NSE from the policies' `from` address, and
# the NSE pings that address (NSM's liveness check does the first; the second needs the route
# to it the forwarder gives the NSE's side).
nsm_pbr_pings() {
  ping_src "$1" "$NSM_PBR_FROM" "$3" ||
    { FAIL="ping $1 from $NSM_PBR_FROM (the policies' from) -> $2 $3 fails$(liveness "$1")"; return 1; }
  ping_src "$2" "$3" "$NSM_PBR_FROM" ||
    { FAIL="ping $2 $3 -> $1's $NSM_PBR_FROM (the policies' from) fails$(liveness "$1")"; return 1; }
}

# deployments-k8s examples/features/policy-based-routing: NSC and icmp-responder on node 1,
# the NSE with NSM_CIDR_PREFIX=172.16.1.100/31 and NSM's policy file. NSM's checks: ping
# NSC -> 172.16.1.100 and NSE -> 172.16.1.101, then the policies with `ip route get`. Here
# also: the pings from and to the `from` address, the NSC's liveness check never sees the
# data plane down (it pings from that address too), five rules, none left after Close.
scenario_policy-based-routing() {
  registry_start || return 1
  node_start 1 || return 1
  nsm_pbr_file nse1
  nse_start nse1 1 NSM_CIDR_PREFIX=172.16.1.100/31 || return 1
  nsc_start nsc1 1 kernel://icmp-responder/nsm-1
  if ! wait_for 60 has_addr4 nsc1 nsm-1; then
    FAIL="the NSC's nsm-1 got no IPv4 address within 60 s; nsc: $(nsc_failure "$SLOG/nsc1.log")"
    return 1
  fi
  local nsc_ip
  nsc_ip=$(addr4 nsc1 nsm-1)
  [[ $nsc_ip == 172.16.1.101 ]] || { FAIL="the NSC's first address is $nsc_ip, not NSM's 172.16.1.101"; return 1; }
  wait_for 15 ping_src nsc1 172.16.1.101 172.16.1.100 ||
    { FAIL="ping NSC 172.16.1.101 -> NSE 172.16.1.100 fails$(liveness nsc1)"; return 1; }
  ping_src nse1 172.16.1.100 172.16.1.101 || { FAIL="ping NSE 172.16.1.100 -> NSC 172.16.1.101 fails$(liveness nsc1)"; return 1; }
  nsm_pbr_pings nsc1 nse1 172.16.1.100 || return 1
  nsm_pbr_check nsc1 172.16.1.101 || return 1
  if grep -q "Data plane is down" "$SLOG/nsc1.log"; then
    FAIL="the NSC's liveness check saw the data plane down$(liveness nsc1)"
    return 1
  fi
  stop nsc1 TERM 20
  wait_for 15 quiver_empty 1 || { FAIL="after Close Quiver still has: $(quiver_leftovers 1 | tr '\n' ';')"; return 1; }
  NOTE="NSM's five policies in tables $PBR_TABLES as its example checks them; pings both ways from and to 172.16.1.101 and $NSM_PBR_FROM; liveness green; no rule left after Close"
}

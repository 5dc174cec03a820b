# shellcheck shell=bash
# scripts/nsm-interop.d/heal.sh, sourced by scripts/nsm-interop: more of NSM's heal suite, as
# deployments-k8s v1.18.0 runs it (examples/heal/<name>), each scenario doing to NSM's
# components what the example does and checking what it checks (pings both ways after the heal,
# the policy routes, the link ID), and more strictly: the heal leaves the connection made once,
# exactly as before (the interfaces in the pods and the nodes, Quiver's connections,
# cross-connects and ports, the policy rules: nothing twice, nothing missing), and after the
# Close nothing is left anywhere (quiver_empty).
#
#   local-nsmgr-restart       NSC on node 1, NSE on node 2 (VXLAN); node 1's nsmgr is killed
#                             and started again: the NSC heals through it, in place
#   registry-restart          NSCs and NSEs on node 1; the registry is killed and started
#                             again: a new NSC gets through at once, the old connections are
#                             refreshed through Quiver and keep their interfaces (the link IDs)
#   remote-forwarder-restart  NSC on node 1, NSE on node 2 (VXLAN); Quiver on node 2 is killed
#                             and started again: the NSC heals through the new one
#   dataplane-interrupt       NSC and NSE on node 1; the NSC's nsm-1 is set down: the NSC's
#                             liveness check sees it and heals, the policy routes come back
#
# As in NSM's examples the NSE is apps/nse-kernel-pbr's icmp-responder with the example's
# NSM_CIDR_PREFIX (172.16.1.100/31; registry-restart's 172.16.1.100/30,172.16.2.200/30), serving
# NSM's policy file (pbr.sh's nsm_pbr_file): NSM's endpoint adds its `from` prefixes to the NSC's
# addresses, which the NSC's liveness check pings from, so a heal that came back without the
# route to them on the NSE's side would show as another heal. Each scenario checks, before and
# after, what NSM's example checks: pings both ways (and here from and to the `from` address),
# and the policies with `ip route get` (nsm_pbr_check, word for word as the example greps).

# Each runs in the default list under both KERNEL backends, as the other heal scenarios do.
SCENARIOS+=(local-nsmgr-restart local-nsmgr-restart@veth registry-restart registry-restart@veth
  remote-forwarder-restart remote-forwarder-restart@veth dataplane-interrupt dataplane-interrupt@veth)

# Per NSE started by heal_nse: its network service, whether its IPAM is IPv6 (6) or IPv4,
# how many policy rules its policy file makes in each NSC, and whether it is NSM's
# apps/nse-kernel-pbr file (pbr.sh's nsm_pbr_file; its `from` address is pinged both ways).
declare -A NSE_SVC=() NSE_FAMILY=() NSE_RULES=() NSE_PBR=()

# heal_nse NSE NODE SERVICE FAMILY RULES PBR [VAR=value...]: nse_start with the service name,
# and what heal_connect and heal_expected need to know of it; PBR is 1 when its file is NSM's.
heal_nse() {
  local nse=$1 n=$2
  NSE_SVC[$nse]=$3 NSE_FAMILY[$nse]=$4 NSE_RULES[$nse]=$5 NSE_PBR[$nse]=$6
  shift 6
  nse_start "$nse" "$n" NSM_SERVICE_NAMES="${NSE_SVC[$nse]}" "$@"
}

# heal_peer NSE ADDR: the NSE's own address toward the NSC at ADDR (the source of its route
# there, through an interface of the connection; IPv6 for an IPv6 ADDR); fails when it has
# none.
heal_peer() {
  local fam=-4
  [[ $2 != *:* ]] || fam=-6
  ip -n "$PFX-$1" "$fam" route get "$2" 2>/dev/null |
    sed -nE 's/.* dev ([^ ]+) .*src ([0-9a-f.:]+).*/\1 \2/p' |
    awk '$1 != "lo" {print $2; ok = 1} END {exit !ok}'
}

# The first address of the NSC's nsm-1 of its NSE's IPAM family (an IPv4 one comes first: its
# IPAM's, then those its NSE's policies added).
heal_addr() {
  if [[ ${NSE_FAMILY[$2]} == 6 ]]; then addr6 "$1" nsm-1; else addr4 "$1" nsm-1; fi
}

has_heal_addr() { [[ -n $(heal_addr "$@") ]]; }

# ping_any NS ADDR: ping or ping -6 from pod NS to ADDR.
ping_any() { if [[ $2 == *:* ]]; then ping6_from "$@"; else ping_from "$@"; fi; }

# Per NSC, its address and the NSE's on its connection (heal_connect).
declare -A NSC_ADDR=() NSE_ADDR=()

# heal_pings NSC NSE TIMEOUT: ping NSC -> NSE resumes within TIMEOUT s, then NSE -> NSC; with
# NSM's policy file, also from and to the NSC's `from` address (nsm_pbr_pings).
heal_pings() {
  local nsc=$1 nse=$2
  wait_for "$3" ping_any "$nsc" "${NSE_ADDR[$nsc]}" ||
    { FAIL="ping $nsc ${NSC_ADDR[$nsc]} -> $nse ${NSE_ADDR[$nsc]} fails (waited $3 s)$(liveness "$nsc")"; return 1; }
  ping_any "$nse" "${NSC_ADDR[$nsc]}" ||
    { FAIL="ping $nse ${NSE_ADDR[$nsc]} -> $nsc ${NSC_ADDR[$nsc]} fails$(liveness "$nsc")"; return 1; }
  [[ ${NSE_PBR[$nse]} != 1 ]] || nsm_pbr_pings "$nsc" "$nse" "${NSE_ADDR[$nsc]}"
}

# heal_connect NSC NODE NSE [VAR=value...]: the NSC on node NODE Requests
# kernel://SERVICE/nsm-1 (NSE's, started by heal_nse); its nsm-1 gets an address of the NSE's
# family, the NSE its side, and they ping each other. Sets NSC_ADDR[NSC], NSE_ADDR[NSC].
heal_connect() {
  local nsc=$1 n=$2 nse=$3
  shift 3
  nsc_start "$nsc" "$n" "kernel://${NSE_SVC[$nse]}/nsm-1" "$@"
  if ! wait_for 60 has_heal_addr "$nsc" "$nse"; then
    FAIL="$nsc's nsm-1 got no IPv${NSE_FAMILY[$nse]} address within 60 s; nsc: $(nsc_failure "$SLOG/$nsc.log")"
    return 1
  fi
  NSC_ADDR[$nsc]=$(heal_addr "$nsc" "$nse")
  wait_for 30 heal_peer "$nse" "${NSC_ADDR[$nsc]}" ||
    { FAIL="$nsc has ${NSC_ADDR[$nsc]} but $nse has no interface toward it"; return 1; }
  NSE_ADDR[$nsc]=$(heal_peer "$nse" "${NSC_ADDR[$nsc]}")
  heal_pings "$nsc" "$nse" 15
}

# heal_addresses_kept NSC NSE: the NSC's and the NSE's addresses are those of heal_connect
# (NSM's examples ping the same addresses after the heal).
heal_addresses_kept() {
  local nsc=$1 now peer
  now=$(heal_addr "$nsc" "$2")
  peer=$(heal_peer "$2" "$now")
  if [[ $now != "${NSC_ADDR[$nsc]}" || $peer != "${NSE_ADDR[$nsc]}" ]]; then
    FAIL="after the heal $nsc has ${now:-no address} and $2 ${peer:-none} toward it, before ${NSC_ADDR[$nsc]} and ${NSE_ADDR[$nsc]}"
    return 1
  fi
}

# heal_state NODE...: what the connections are made of, one line each, sorted: in each node
# what Quiver made there (`nodeN KIND TAG-PREFIX`), in each Quiver of NODEs its connections
# (`quiverN connection CLIENT-MECH ENDPOINT-MECH STATE`), cross-connects and ports (but its
# uplink), in the pods each interface (`POD KIND ALIAS-PREFIX`) and each rule of Quiver's
# (`POD rule`). Something made twice shows as a line too many.
heal_state() {
  local n
  {
    for n in "$@"; do
      node_made "$n" | awk -v n="$n" '{sub(/:.*/, ":", $3); print "node" n, $2, $3}'
      ctl "$n" show connections |
        jq -r --arg q "quiver$n" '.[] | "\($q) connection \(.client_mechanism) \(.endpoint_mechanism) \(.state)"'
      ctl "$n" show cross-connects | jq -r --arg q "quiver$n" '.[] | "\($q) cross-connect \(.kind)"'
      ctl_interfaces "$n" | jq -r --arg q "quiver$n" '.[] | "\($q) port \(.type)"'
    done
    pods_made | awk '{sub(/-.*/, "-", $4); print $1, $3, $4}'
    pods_rules | awk '{print $1, "rule"}'
  } 2>&1 | LC_ALL=C sort
}

# heal_expected CONNECTION...: heal_state of the connections, each `NSC NODE NSE NODE`, made
# once with the KERNEL backend in use: per pod one interface (a TAP, `tun`, or a veth's end)
# with NSM's alias and, in the NSC's, a rule per policy of its NSE's file (heal_nse's RULES);
# with veths, each side's veth's other end, tagged, in that side's node; in each Quiver the
# connection, its cross-connect and its two ports (KERNEL ones of the backend's type, a VXLAN
# one toward the other node).
heal_expected() {
  local kind=tun port=tap c nsc cn nse en i
  [[ ${KERNEL_BACKEND:-tap} == veth ]] && kind=veth port=af_packet
  for c in "$@"; do
    read -r nsc cn nse en <<<"$c"
    echo "$nsc $kind client-"
    echo "$nse $kind server-"
    for ((i = 0; i < ${NSE_RULES[$nse]}; i++)); do echo "$nsc rule"; done
    if [[ $kind == veth ]]; then
      printf 'node%s veth quiver:\n' "$cn" "$en"
    fi
    if [[ $cn == "$en" ]]; then
      echo "quiver$cn connection KERNEL KERNEL up"
      echo "quiver$cn cross-connect l2"
      printf "quiver$cn port %s\n" "$port" "$port"
    else
      echo "quiver$cn connection KERNEL VXLAN up"
      echo "quiver$en connection VXLAN KERNEL up"
      echo "quiver$cn cross-connect l2"
      echo "quiver$en cross-connect l2"
      printf 'quiver%s port %s\n' "$cn" "$port" "$cn" vxlan "$en" vxlan "$en" "$port"
    fi
  done | LC_ALL=C sort
}

# heal_made_once WHEN EXPECTED NODE...: heal_state of the NODEs is EXPECTED (heal_expected);
# sets FAIL naming WHEN otherwise.
heal_made_once() {
  local when=$1 want=$2 got
  shift 2
  got=$(heal_state "$@")
  [[ $got == "$want" ]] && return 0
  FAIL="$when the connections are not made once as ${KERNEL_BACKEND:-tap} makes them: missing $(comm -23 <(echo "$want") <(echo "$got") | tr '\n' ';'), extra $(comm -13 <(echo "$want") <(echo "$got") | tr '\n' ';') (have: $(tr '\n' ';' <<<"$got"))"
  return 1
}

# The link (ifindex) of interface IF in pod POD.
heal_link() { ip -n "$PFX-$1" -j link show dev "$2" 2>/dev/null | jq -r '.[0].ifindex // empty'; }

# Whether interface IF in pod POD is up, with its carrier.
heal_link_up() {
  ip -n "$PFX-$1" -j link show dev "$2" 2>/dev/null |
    jq -e '.[0].flags | index("UP") != null and index("LOWER_UP") != null' >/dev/null
}

# Quiver N's connections as `ID EXPIRES` (unix seconds), sorted: a Request through Quiver
# (a refresh or a heal) moves EXPIRES on.
heal_expiries() { ctl "$1" show connections | jq -r '.[] | "\(.id) \(.expires_unix)"' | LC_ALL=C sort; }

# heal_refreshed N BEFORE: each connection of BEFORE (heal_expiries) is still in Quiver N and
# was refreshed since (a later expiry).
heal_refreshed() {
  local now id e cur
  now=$(heal_expiries "$1") || return 1
  while read -r id e; do
    cur=$(awk -v id="$id" '$1 == id {print $2}' <<<"$now")
    [[ -n $cur ]] && ((cur > e)) || return 1
  done <<<"$2"
}

# The last error the NSC logged (its reason, 200 characters), for a heal that did not come.
heal_nsc_error() {
  { grep -F '[ERRO]' "$SLOG/$1.log" || true; } | tail -1 | sed -E 's/.*desc = //; s/.*\] //' | cut -c1-200
}

# How many lines of log FILE match the extended regex RE.
heal_count() { grep -c -E "$2" "$1" 2>/dev/null || true; }

# heal_more FILE RE COUNT: FILE has more lines matching RE than COUNT.
heal_more() { (($(heal_count "$1" "$2") > $3)); }

# heal_heals NSC WANT: the NSC logged WANT heals in all (one more after its connection went
# down means it healed once: another one means the connection the heal made went down again).
heal_heals() {
  local n
  n=$(heal_count "$SLOG/$1.log" "Heal success")
  ((n == $2)) && return 0
  FAIL="$1 logged $n heals, not $2$(liveness "$1")"
  return 1
}

# heal_in_place NSC: the NSC never saw the data plane down nor reselected (a heal it made, if
# any, was a Request again on the same path, keeping its interface): what is left of a
# connection's heals when one of its refreshes fell in the registry's outage, which nsmgr
# answers "network service ... is not found" until the NSE has registered again.
heal_in_place() {
  if grep -q -E "Data plane is down|Reconnect with reselect" "$SLOG/$1.log"; then
    FAIL="$1 saw the data plane down or reselected$(liveness "$1")"
    return 1
  fi
}

# The time now, and the seconds since T0 (one decimal).
heal_now() { echo "$EPOCHREALTIME"; }
heal_since() { awk -v a="$1" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }'; }

# heal_close NSC... then NODE...: the NSCs stop (each Closes) and every Quiver of the NODEs is
# left with nothing (quiver_empty) within 15 s.
heal_close() {
  local n
  while [[ $# -gt 0 && $1 != -- ]]; do
    stop "$1" TERM 20
    shift
  done
  shift
  for n in "$@"; do
    wait_for 15 quiver_empty "$n" ||
      { FAIL="15 s after the Close Quiver $n still has: $(quiver_leftovers "$n" | tr '\n' ';')"; return 1; }
  done
}

# heal_pbr_nse NODE: nse1 on node NODE as NSM's heal examples have it: apps/nse-kernel-pbr's
# icmp-responder with NSM's policy file and the examples' NSM_CIDR_PREFIX=172.16.1.100/31.
heal_pbr_nse() {
  nsm_pbr_file nse1
  heal_nse nse1 "$1" icmp-responder 4 5 1 NSM_CIDR_PREFIX=172.16.1.100/31
}

# The two-node set-up of local-nsmgr-restart and remote-forwarder-restart: the NSE on node 2
# (heal_pbr_nse), the NSC on node 1, over VXLAN; checks the policies and the state.
heal_two_nodes_up() {
  registry_start || return 1
  underlay_start || return 1
  node_start 1 || return 1
  node_start 2 || return 1
  heal_pbr_nse 2 || return 1
  heal_connect nsc1 1 nse1 || return 1
  nsm_pbr_check nsc1 "${NSC_ADDR[nsc1]}" || return 1
  HEAL_WANT=$(heal_expected "nsc1 1 nse1 2")
  heal_made_once "before the restart" "$HEAL_WANT" 1 2
}

# ---------------------------------------------------------------------------------------------

# deployments-k8s examples/heal/local-nsmgr-restart: NSC and NSE on two nodes (VXLAN between
# the Quivers), the NSC's node's nsmgr restarted (here kill -9 and started again), then pings
# both ways and the policy routes. Here also: the NSC sees the control plane down and heals
# through the new nsmgr without reselecting (its liveness check never sees the data plane
# down: nothing of the data path depends on nsmgr); the heal's Request reaches both Quivers
# (each one's expiry moves on); the NSC keeps its interface (the same link), its address, its
# policies; the state is the same as before; after the Close both Quivers are empty.
scenario_local-nsmgr-restart() {
  heal_two_nodes_up || return 1
  local link before1 before2 heals t0
  link=$(heal_link nsc1 nsm-1)
  before1=$(heal_expiries 1) before2=$(heal_expiries 2)
  heals=$(heal_count "$SLOG/nsc1.log" "Heal success")
  stop nsmgr1 KILL 5
  t0=$(heal_now)
  nsmgr_start 1 || return 1
  wait_for 30 heal_more "$SLOG/nsc1.log" "Heal success" "$heals" ||
    { FAIL="the NSC did not heal within 30 s of nsmgr 1's restart (its last error: $(heal_nsc_error nsc1))"; return 1; }
  local healed
  healed=$(heal_since "$t0")
  wait_for 10 heal_refreshed 1 "$before1" ||
    { FAIL="the heal did not reach Quiver 1 (connection and expiry before: $before1; now: $(heal_expiries 1))"; return 1; }
  wait_for 10 heal_refreshed 2 "$before2" ||
    { FAIL="the heal did not reach Quiver 2 (connection and expiry before: $before2; now: $(heal_expiries 2))"; return 1; }
  heal_pings nsc1 nse1 10 || return 1
  if grep -q "Data plane is down" "$SLOG/nsc1.log"; then
    FAIL="the NSC's liveness check saw the data plane down around nsmgr's restart$(liveness nsc1)"
    return 1
  fi
  [[ $(heal_link nsc1 nsm-1) == "$link" ]] ||
    { FAIL="the NSC's nsm-1 was made again (link $link before, $(heal_link nsc1 nsm-1) after)"; return 1; }
  heal_addresses_kept nsc1 nse1 || return 1
  nsm_pbr_check nsc1 "${NSC_ADDR[nsc1]}" || return 1
  heal_made_once "after the heal" "$HEAL_WANT" 1 2 || return 1
  heal_heals nsc1 $((heals + 1)) || return 1
  heal_close nsc1 -- 1 2 || return 1
  NOTE="healed ${healed} s after nsmgr 1 was killed and started again, in place (link $link, tables $PBR_TABLES kept); made once before and after"
}

# deployments-k8s examples/heal/remote-forwarder-death (the endpoint's node's forwarder
# deleted and started again): NSC and NSE on two nodes, Quiver on the NSE's node killed with -9
# and started again, then pings both ways and the policy routes. Here also: the NSC heals
# (its liveness check sees the data plane down) through the new Quiver 2 within 20 s, with
# the same addresses and policies; the state is the same as before (one VXLAN port per
# Quiver, one interface per pod: the new Quiver 2 reaped what its predecessor left, Quiver 1
# replaced its side of the tunnel); after the Close both Quivers are empty.
scenario_remote-forwarder-restart() {
  heal_two_nodes_up || return 1
  local heals t0
  heals=$(heal_count "$SLOG/nsc1.log" "Heal success")
  stop quiver2 KILL 5
  t0=$(heal_now)
  quiver_start 2 || return 1
  wait_for 20 ping1 nsc1 "${NSE_ADDR[nsc1]}" ||
    { FAIL="ping NSC -> NSE did not resume within 20 s of Quiver 2's restart (the NSC's last error: $(heal_nsc_error nsc1))"; return 1; }
  local healed
  healed=$(heal_since "$t0")
  heal_more "$SLOG/nsc1.log" "Heal success" "$heals" ||
    { FAIL="ping resumed but the NSC logged no heal since Quiver 2 was killed"; return 1; }
  heal_pings nsc1 nse1 5 || return 1
  heal_addresses_kept nsc1 nse1 || return 1
  nsm_pbr_check nsc1 "${NSC_ADDR[nsc1]}" || return 1
  heal_made_once "after the heal" "$HEAL_WANT" 1 2 || return 1
  heal_heals nsc1 $((heals + 1)) || return 1
  heal_close nsc1 -- 1 2 || return 1
  NOTE="ping resumed ${healed} s after Quiver 2 was killed and started again; tables $PBR_TABLES; made once before and after"
}

# deployments-k8s examples/heal/dataplane-interrupt: NSC and NSE on node 1; with a pinger
# running, the NSC's nsm-1 is set down; the pinger misses replies; then pings both ways and
# the policy routes. Here also: the NSC's liveness check sees the data plane down and heals
# (within 15 s); nsm-1 is up again with the same addresses; the policy rules and tables are
# back (the kernel took the tables' routes away with the link), once each; the state is the
# same as before (one interface per pod, no second TAP or veth, no rule twice); after the
# Close Quiver is empty.
scenario_dataplane-interrupt() {
  registry_start || return 1
  node_start 1 || return 1
  heal_pbr_nse 1 || return 1
  heal_connect nsc1 1 nse1 || return 1
  nsm_pbr_check nsc1 "${NSC_ADDR[nsc1]}" || return 1
  local want
  want=$(heal_expected "nsc1 1 nse1 1")
  heal_made_once "before the interruption" "$want" 1 || return 1
  local downs heals
  downs=$(heal_count "$SLOG/nsc1.log" "Data plane is down")
  heals=$(heal_count "$SLOG/nsc1.log" "Heal success")
  # NSM's pinger, every 0.2 s (stopped below, or with the scenario).
  start pinger nsc1 "$SLOG/pinger.log" -- ping -i 0.2 -W 1 -I "${NSC_ADDR[nsc1]}" "${NSE_ADDR[nsc1]}"
  local t0
  wait_for 5 grep -q "bytes from" "$SLOG/pinger.log" || { FAIL="the pinger got no reply"; return 1; }
  ip -n "$PFX-nsc1" link set nsm-1 down
  t0=$(heal_now)
  wait_for 15 heal_more "$SLOG/nsc1.log" "Heal success" "$heals" ||
    { FAIL="the NSC did not heal within 15 s of nsm-1 going down (its last error: $(heal_nsc_error nsc1))"; return 1; }
  local healed
  healed=$(heal_since "$t0")
  heal_more "$SLOG/nsc1.log" "Data plane is down" "$downs" ||
    { FAIL="the NSC healed, but its liveness check did not see the data plane down"; return 1; }
  heal_pings nsc1 nse1 10 || return 1
  stop pinger INT 5
  local sent got
  sent=$(sed -nE 's/^([0-9]+) packets transmitted, ([0-9]+) received.*/\1/p' "$SLOG/pinger.log")
  got=$(sed -nE 's/^([0-9]+) packets transmitted, ([0-9]+) received.*/\2/p' "$SLOG/pinger.log")
  ((${sent:-0} > ${got:-0})) || { FAIL="the pinger missed no reply (${got:-?} of ${sent:-?}): the interruption did not interrupt"; return 1; }
  heal_link_up nsc1 nsm-1 || { FAIL="after the heal nsm-1 is not up: $(ip -n "$PFX-nsc1" link show dev nsm-1 | head -1)"; return 1; }
  heal_addresses_kept nsc1 nse1 || return 1
  nsm_pbr_check nsc1 "${NSC_ADDR[nsc1]}" || return 1
  heal_made_once "after the heal" "$want" 1 || return 1
  heal_heals nsc1 $((heals + 1)) || return 1
  heal_close nsc1 -- 1 || return 1
  NOTE="healed ${healed} s after nsm-1 went down (the pinger missed $((sent - got)) of $sent); tables $PBR_TABLES back; made once before and after"
}

# deployments-k8s examples/heal/registry-restart: NSCs and NSEs on node 1 (NSM's nettools, with
# the liveness check, on nse-kernel, apps/nse-kernel-pbr's icmp-responder with
# NSM_CIDR_PREFIX=172.16.1.100/30,172.16.2.200/30; client-cp, without it, whose token lives 2
# minutes, on nse-kernel-ipv6, 2001:db8::/116, whose policy file has one policy from
# 172.16.3.101/32), the registry deleted and started again, a new NSC applied: it pings the NSE
# both ways; after 120 s both old NSCs' interfaces have the link IDs they had; nettools' policy
# routes. Here: the registry is killed with -9 and started again; the new NSC nsc3 must get
# through within 10 s of the registry being back (the NSEs and Quiver register again at once;
# Quiver took ~35 s before it re-registered when its watch ended cleanly, issue 34 item 6); the
# old NSCs' tokens live 20 s, so each refreshes every ~4 s, and instead of NSM's 120 s the
# scenario waits (up to 15 s) for a refresh of each through Quiver after the restart (each
# connection's expiry moves on: the refresh found its forwarder and its endpoint in the new
# registry), then checks the link IDs, the pings of all three, nsc1's policies, and that each
# connection is made once; after the Close Quiver is empty. Unlike NSM's example, the new NSC
# is nse-kernel-ipv6's (nse2's), not nse-kernel's: every connection of nse-kernel has its
# policies' `from` address 172.16.2.201, and the route the forwarder gives the NSE's side to it
# (sdk-kernel's, Quiver's alike: one route per prefix, the last connection's) can go through
# one connection only; nettools' own IPAM address 172.16.2.201/32 (of the second prefix) keeps
# the NSE's replies to it on nettools' connection, so a second NSC there would never get its
# pings from 172.16.2.201 answered and its liveness check would heal it again and again.
# nse-kernel-ipv6's NSCs share 172.16.3.101 too, but their liveness checks ping over IPv6
# only (NSM's pings pair addresses of one family, and the NSE has IPv6 ones only).
scenario_registry-restart() {
  registry_start || return 1
  node_start 1 || return 1
  nsm_pbr_file nse1
  heal_nse nse1 1 registry-restart 4 5 1 NSM_CIDR_PREFIX=172.16.1.100/30,172.16.2.200/30 || return 1
  cat >"$WORK/nse2-pbr.yaml" <<'YAML'
- from: 172.16.3.101/32
  proto: 6
  dstport: 6666
  routes:
    - prefix: 172.16.3.100/32
YAML
  heal_nse nse2 1 registry-restart-ipv6 6 1 0 NSM_CIDR_PREFIX=2001:db8::/116 || return 1
  # As NSM's client-cp, a Request timeout well under the token's life: nsmgr closes a
  # connection when the previous segment's token expires less the Request's timeout.
  local short=(NSM_MAX_TOKEN_LIFETIME=20s NSM_REQUEST_TIMEOUT=5s)
  heal_connect nsc1 1 nse1 "${short[@]}" || return 1
  heal_connect nsc2 1 nse2 "${short[@]}" NSM_LIVENESS_CHECK_ENABLED=false || return 1
  nsm_pbr_check nsc1 "${NSC_ADDR[nsc1]}" || return 1
  local want
  want=$(heal_expected "nsc1 1 nse1 1" "nsc2 1 nse2 1")
  heal_made_once "before the restart" "$want" 1 || return 1
  local link1 link2 before t0
  link1=$(heal_link nsc1 nsm-1) link2=$(heal_link nsc2 nsm-1)
  stop registry KILL 5
  rm -f "$WORK/registry.sock"
  registry_start || return 1
  t0=$(heal_now)
  before=$(heal_expiries 1)
  heal_connect nsc3 1 nse2 || return 1
  local joined
  joined=$(heal_since "$t0")
  if awk -v t="$joined" 'BEGIN { exit !(t > 10) }'; then
    FAIL="the new NSC got through ${joined} s after the registry was back, not within 10 s"
    return 1
  fi
  wait_for 15 heal_refreshed 1 "$before" ||
    { FAIL="no refresh of both old connections through Quiver within 15 s of the registry's restart (connection and expiry then: $(tr '\n' ';' <<<"$before") now: $(heal_expiries 1 | tr '\n' ';'))$(liveness nsc1)"; return 1; }
  local refreshed
  refreshed=$(heal_since "$t0")
  [[ $(heal_link nsc1 nsm-1) == "$link1" && $(heal_link nsc2 nsm-1) == "$link2" ]] ||
    { FAIL="the link IDs changed: nsc1 $link1 -> $(heal_link nsc1 nsm-1), nsc2 $link2 -> $(heal_link nsc2 nsm-1)"; return 1; }
  heal_pings nsc1 nse1 5 || return 1
  heal_pings nsc2 nse2 5 || return 1
  heal_pings nsc3 nse2 5 || return 1
  heal_addresses_kept nsc1 nse1 || return 1
  heal_addresses_kept nsc2 nse2 || return 1
  nsm_pbr_check nsc1 "${NSC_ADDR[nsc1]}" || return 1
  heal_made_once "after the restart" "$(heal_expected "nsc1 1 nse1 1" "nsc2 1 nse2 1" "nsc3 1 nse2 1")" 1 || return 1
  local nsc in_place=""
  for nsc in nsc1 nsc2 nsc3; do
    heal_in_place "$nsc" || return 1
    in_place+=" $(heal_count "$SLOG/$nsc.log" "Heal success")"
  done
  heal_close nsc1 nsc2 nsc3 -- 1 || return 1
  NOTE="a new NSC pinged ${joined} s after the registry was back; both old connections refreshed through Quiver ${refreshed} s after it, links $link1 and $link2 kept; no data plane down or reselect (heals in place of nsc1-3:$in_place); made once before and after"
}

-- LPM range sweep with pktgen-dpdk: destinations walk a range of /24s so that Quiver's ip4-lookup
-- touches many FIB lines, and the rate is read per range width (1, 256, 65536, 2^24 /24s).
--
--   pktgen -l 0-4 -n 4 -- -P -m "[1:2].0,[3:4].1" -f pktgen-scripts/pktgen/lpm_sweep.lua
--
-- Load the routes first (e.g. `quiver ctl add route` in a loop, or the config in ../quiver/).
-- The rate received on port 1 at a fixed offered load shows how lookup cost grows as the
-- working set leaves the caches. Results go to lpm-sweep-results.csv.

package.path = package.path .. ";?.lua;test/?.lua;app/?.lua;"
require "Pktgen"

local function printf(...)
  io.write(string.format(...))
end

local tx_port, rx_port = "0", "1"
local base = "16.0.0.1"
-- Widths as the last destination address of the range.
local sweeps = {
  { name = "1 /24", max = "16.0.0.254" },
  { name = "256 /24s", max = "16.0.255.254" },
  { name = "65536 /24s", max = "16.255.255.254" },
  { name = "2^24 /24s", max = "79.255.255.254" },
}
local measure_ms = 5000

local function rx_packets(port)
  return pktgen.portStats(port, "port")[tonumber(port)].ipackets
end

pktgen.stop("all")
pktgen.set_range(tx_port, "on")
pktgen.set_proto(tx_port, "udp")
pktgen.dst_mac(tx_port, "start", "02:00:00:00:00:01")
pktgen.src_ip(tx_port, "start", "10.10.0.2")
pktgen.src_ip(tx_port, "inc", "0.0.0.0")
pktgen.src_ip(tx_port, "min", "10.10.0.2")
pktgen.src_ip(tx_port, "max", "10.10.0.2")
pktgen.pkt_size(tx_port, "start", 64)
pktgen.pkt_size(tx_port, "inc", 0)
pktgen.set(tx_port, "rate", 100)

local out = io.open("lpm-sweep-results.csv", "w")
out:write("range,rx_pps\n")
for _, s in ipairs(sweeps) do
  pktgen.dst_ip(tx_port, "start", base)
  pktgen.dst_ip(tx_port, "inc", "0.0.1.0")
  pktgen.dst_ip(tx_port, "min", base)
  pktgen.dst_ip(tx_port, "max", s.max)
  pktgen.clear("all")
  local before = rx_packets(rx_port)
  pktgen.start(tx_port)
  pktgen.delay(measure_ms)
  local pps = (rx_packets(rx_port) - before) * 1000 / measure_ms
  pktgen.stop(tx_port)
  printf("%-12s %12.0f pps received\n", s.name, pps)
  out:write(string.format("%s,%.0f\n", s.name, pps))
end
out:close()
pktgen.set_range(tx_port, "off")

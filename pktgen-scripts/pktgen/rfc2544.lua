-- RFC 2544 throughput search with pktgen-dpdk against Quiver (routing or cross-connect).
--
--   pktgen -l 0-4 -n 4 -- -P -m "[1:2].0,[3:4].1" -f pktgen-scripts/pktgen/rfc2544.lua
--
-- Port 0 sends toward Quiver, port 1 receives what Quiver forwards. For each frame size a
-- binary search on the offered rate (percent of line rate) finds the highest rate at which the
-- loss stays within the tolerance: 0 for NDR, 0.5 % for PDR (FD.io CSIT's definitions). Each
-- trial sends a fixed number of frames, waits for the receive counter to settle, and compares.
-- Results go to the console and to rfc2544-results.csv.

package.path = package.path .. ";?.lua;test/?.lua;app/?.lua;"
require "Pktgen"

local function printf(...)
  io.write(string.format(...))
end

local config = {
  tx_port = "0",
  rx_port = "1",
  sizes = { 64, 128, 256, 512, 1024, 1280, 1518 },
  frames_per_trial = 20000000,
  -- Loss tolerances searched, in percent: NDR then PDR.
  tolerances = { { name = "NDR", loss_pct = 0.0 }, { name = "PDR", loss_pct = 0.5 } },
  -- The search stops when the bounds are this close (percent of line rate).
  resolution_pct = 0.5,
  -- Quiver's side: traffic is routed to dst_ip via Quiver's address on port 0's segment.
  src_ip = "10.10.0.2/24",
  dst_ip = "10.20.0.2",
  dst_mac = "02:00:00:00:00:01", -- Quiver's port facing pktgen port 0
  settle_ms = 500,
}

local function rx_tx(port)
  local stats = pktgen.portStats(port, "port")[tonumber(port)]
  return stats.ipackets, stats.opackets
end

local function setup(size)
  pktgen.stop("all")
  pktgen.clear("all")
  pktgen.set_ipaddr(config.tx_port, "src", config.src_ip)
  pktgen.set_ipaddr(config.tx_port, "dst", config.dst_ip)
  pktgen.set_mac(config.tx_port, "dst", config.dst_mac)
  pktgen.set_proto(config.tx_port, "udp")
  pktgen.set(config.tx_port, "size", size)
  pktgen.set(config.tx_port, "count", config.frames_per_trial)
end

-- One trial at `rate` percent: returns the loss in percent of the frames sent.
local function trial(rate)
  pktgen.clear("all")
  pktgen.set(config.tx_port, "rate", rate)
  local rx0 = rx_tx(config.rx_port)
  local _, tx0 = rx_tx(config.tx_port)
  pktgen.start(config.tx_port)
  -- pktgen stops the port by itself after `count` frames; wait for that, then let the
  -- receive side drain.
  repeat
    pktgen.delay(100)
    local _, tx = rx_tx(config.tx_port)
  until tx - tx0 >= config.frames_per_trial
  pktgen.delay(config.settle_ms)
  local rx = rx_tx(config.rx_port) - rx0
  local _, tx = rx_tx(config.tx_port)
  local sent = tx - tx0
  if sent == 0 then
    return 100.0
  end
  return 100.0 * (sent - rx) / sent
end

local function search(tolerance)
  local low, high, best = 0.0, 100.0, 0.0
  local rate = 100.0
  while high - low > config.resolution_pct do
    local loss = trial(rate)
    if loss <= tolerance then
      best, low = rate, rate
    else
      high = rate
    end
    rate = (low + high) / 2
  end
  return best
end

local out = io.open("rfc2544-results.csv", "w")
out:write("size,search,rate_pct\n")
for _, size in ipairs(config.sizes) do
  setup(size)
  for _, t in ipairs(config.tolerances) do
    local rate = search(t.loss_pct)
    printf("size %4d  %s %6.2f%% of line rate\n", size, t.name, rate)
    out:write(string.format("%d,%s,%.2f\n", size, t.name, rate))
  end
end
out:close()
pktgen.stop("all")

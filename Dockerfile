# Quiver's container image: NSM's forwarder DaemonSet (deploy/) runs it.
#   docker build -t quiver .
#   docker run --rm quiver --help
#
# Build stage: Debian 12 with the same packages as scripts/setup-host needs for a build with the
# `dpdk` feature (DPDK 22.11 headers through pkg-config, libclang for bindgen).
FROM rust:1-bookworm AS build
RUN apt-get update \
 && apt-get install -y --no-install-recommends pkg-config libdpdk-dev libclang-dev clang \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
RUN cargo build --release --locked --features dpdk --bin quiver \
 && install -D target/release/quiver /out/quiver

# Runtime stage: slim Debian with only DPDK's runtime libraries that `quiver` links to, and the
# poll-mode drivers it can load: the virtual devices (memif, tap, ring, null, af_packet) and the
# common NICs (Intel i40e/ice/ixgbe/iavf, Mellanox mlx5). iproute2 is for operators' debugging
# inside the pod (`ip netns`, `ip link`); Quiver itself speaks netlink directly.
FROM debian:bookworm-slim
RUN apt-get update \
 && apt-get install -y --no-install-recommends \
      librte-eal23 librte-ethdev23 librte-mbuf23 librte-mempool23 librte-ring23 librte-kvargs23 \
      librte-telemetry23 librte-net23 librte-meter23 \
      librte-net-memif23 librte-net-tap23 librte-net-ring23 librte-net-null23 \
      librte-net-af-packet23 librte-net-i40e23 librte-net-ice23 librte-net-ixgbe23 \
      librte-net-iavf23 librte-net-mlx5-23 librte-mempool-ring23 \
      iproute2 ca-certificates \
 && rm -rf /var/lib/apt/lists/*
COPY --from=build /out/quiver /usr/local/bin/quiver
COPY quiver.example.toml /etc/quiver/quiver.toml
# The admin socket (quiver ctl) and memif sockets live here; NSM's listen socket is NSM_LISTEN_ON.
VOLUME ["/run/quiver"]
# Health: the NSM service's gRPC health check over its listen socket (deploy/ uses the same).
HEALTHCHECK --interval=10s --timeout=3s --start-period=5s \
  CMD ["quiver", "ctl", "health", "--nsm-socket", "/listen.on.sock"]
ENTRYPOINT ["quiver"]
CMD ["run", "--config", "/etc/quiver/quiver.toml"]

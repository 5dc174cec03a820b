//! Finds DPDK with `pkg-config libdpdk`, generates bindings for the allowlisted part of its API
//! with bindgen, and compiles C wrappers for the static inline functions among them (bindgen's
//! `wrap_static_fns`) together with `csrc/shim.c`.

use std::env;
use std::path::PathBuf;
use std::process::Command;

/// Functions Quiver calls. Static inline ones among them (the rx/tx bursts, mempool and mbuf
/// fast paths, `rte_lcore_id`) get C wrappers.
const FUNCTIONS: &[&str] = &[
    // EAL, lcores, errors, memory, devices.
    "rte_eal_init",
    "rte_eal_iova_mode",
    "rte_eal_has_hugepages",
    "rte_strerror",
    "rte_version",
    "rte_socket_id",
    "rte_lcore_id",
    "rte_thread_register",
    "rte_thread_unregister",
    "rte_extmem_register",
    "rte_extmem_unregister",
    "rte_dev_dma_map",
    "rte_dev_dma_unmap",
    "rte_dev_name",
    "rte_dev_bus",
    "rte_bus_name",
    "rte_vdev_init",
    "rte_vdev_uninit",
    // ethdev.
    "rte_eth_dev_get_port_by_name",
    "rte_eth_dev_get_name_by_port",
    "rte_eth_dev_is_valid_port",
    "rte_eth_dev_socket_id",
    "rte_eth_dev_info_get",
    "rte_eth_dev_configure",
    "rte_eth_dev_adjust_nb_rx_tx_desc",
    "rte_eth_rx_queue_setup",
    "rte_eth_tx_queue_setup",
    "rte_eth_dev_start",
    "rte_eth_dev_stop",
    "rte_eth_dev_close",
    "rte_eth_dev_set_mtu",
    "rte_eth_dev_get_mtu",
    "rte_eth_promiscuous_enable",
    "rte_eth_link_get_nowait",
    "rte_eth_macaddr_get",
    "rte_eth_stats_get",
    "rte_eth_stats_reset",
    "rte_eth_rx_burst",
    "rte_eth_tx_burst",
    "rte_eth_from_rings",
    // mempool and mbuf.
    "rte_mempool_create_empty",
    "rte_mempool_free",
    "rte_mempool_register_ops",
    "rte_mempool_set_ops_byname",
    "rte_mempool_populate_iova",
    "rte_mempool_avail_count",
    "rte_mempool_in_use_count",
    "rte_mempool_default_cache",
    "rte_mempool_cache_flush",
    "rte_mempool_ops_enqueue_bulk",
    "rte_pktmbuf_pool_init",
    "rte_pktmbuf_alloc",
    "rte_pktmbuf_free",
    // rings (test and benchmark ports built from rings).
    "rte_ring_create",
    "rte_ring_free",
    "rte_ring_lookup",
    "rte_ring_enqueue_burst",
    "rte_ring_dequeue_burst",
    "rte_ring_count",
    "rte_pktmbuf_pool_create",
    // the graph library, librte_node's IPv4 and ethdev nodes, LPM (the graph-ip4 benchmark).
    "rte_graph_create",
    "rte_graph_destroy",
    "rte_graph_lookup",
    "rte_graph_walk",
    "rte_node_eth_config",
    "rte_node_ip4_route_add",
    "rte_node_ip4_rewrite_add",
    "rte_lpm_create",
    "rte_lpm_free",
    "rte_lpm_find_existing",
    "rte_lpm_lookup",
    // ours (csrc/shim.c, csrc/graph_bench.c).
    "quiver_.*",
];

/// Types named directly (everything they reach comes along).
const TYPES: &[&str] = &[
    "rte_eth_conf",
    "rte_eth_dev_info",
    "rte_eth_stats",
    "rte_eth_link",
    "rte_ether_addr",
    "rte_mbuf",
    "rte_mempool",
    "rte_mempool_ops",
    "rte_mempool_cache",
    "rte_mempool_objhdr",
    "rte_pktmbuf_pool_private",
    "rte_iova_mode",
    "rte_eth_rx_mq_mode",
    "rte_ring",
    "rte_graph_param",
    "rte_node_ethdev_config",
    "rte_lpm_config",
    "rte_node_ip4_lookup_next",
];

/// Constants (object-like macros and our own `QUIVER_*` values).
const VARS: &[&str] = &[
    "RTE_MAX_LCORE",
    "LCORE_ID_ANY",
    "SOCKET_ID_ANY",
    "RTE_PKTMBUF_HEADROOM",
    "RTE_MEMPOOL_CACHE_MAX_SIZE",
    "RTE_MEMPOOL_OPS_NAMESIZE",
    "RTE_MEMPOOL_NAMESIZE",
    "RTE_MEMPOOL_F_.*",
    "RTE_MBUF_F_RX_RSS_HASH",
    "RTE_ETH_LINK_UP",
    "RTE_ETH_LINK_DOWN",
    "RTE_ETH_NAME_MAX_LEN",
    "RING_F_SP_ENQ",
    "RING_F_SC_DEQ",
    "RTE_GRAPH_ID_INVALID",
    "RTE_GRAPH_BURST_SIZE",
    "QUIVER_.*",
];

fn pkg_config(args: &[&str]) -> String {
    let pkg_config = env::var("PKG_CONFIG").unwrap_or_else(|_| "pkg-config".into());
    let out = Command::new(&pkg_config)
        .args(args)
        .arg("libdpdk")
        .output()
        .unwrap_or_else(|e| {
            panic!("cannot run `{pkg_config}`: {e}; install pkg-config (scripts/setup-host)")
        });
    if !out.status.success() {
        panic!(
            "`{pkg_config} {} libdpdk` failed: {}\nDPDK's development files are missing: \
             install libdpdk-dev (scripts/setup-host does)",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    String::from_utf8(out.stdout).expect("pkg-config prints UTF-8")
}

fn main() {
    println!("cargo:rerun-if-changed=csrc/quiver_dpdk.h");
    println!("cargo:rerun-if-changed=csrc/shim.c");
    println!("cargo:rerun-if-changed=csrc/graph_bench.c");
    println!("cargo:rerun-if-env-changed=PKG_CONFIG_PATH");
    println!("cargo:rerun-if-env-changed=PKG_CONFIG");

    let version = pkg_config(&["--modversion"]);
    let version = version.trim();
    if !version.starts_with("22.11") {
        println!(
            "cargo:warning=dpdk-sys is written against DPDK 22.11; pkg-config found {version}"
        );
    }

    // -I…, `-include rte_config.h`, -march=…: the bindings and the wrappers must see the headers
    // exactly as DPDK's own build does (struct layouts depend on rte_config.h).
    let cflags: Vec<String> = pkg_config(&["--cflags"])
        .split_whitespace()
        .map(str::to_owned)
        .collect();

    // Link every library pkg-config names, plus the two we call that it leaves out: the vdev
    // bus (rte_vdev_init) and the ring PMD (rte_eth_from_rings). Other PMDs (net_null,
    // net_memif, net_tap, NIC drivers) need no link: with Debian's shared build, rte_eal_init
    // dlopens every plugin in its RTE_EAL_PMD_PATH (/usr/lib/<triplet>/dpdk/pmds-23.0), and
    // EAL's `-d <file or dir>` adds more.
    let libs = pkg_config(&["--libs"]);
    for flag in libs.split_whitespace() {
        if let Some(dir) = flag.strip_prefix("-L") {
            println!("cargo:rustc-link-search=native={dir}");
        } else if let Some(lib) = flag.strip_prefix("-l") {
            println!("cargo:rustc-link-lib=dylib={lib}");
        }
    }
    for lib in ["rte_bus_vdev", "rte_net_ring"] {
        println!("cargo:rustc-link-lib=dylib={lib}");
    }

    let out = PathBuf::from(env::var("OUT_DIR").unwrap());
    let header = PathBuf::from(env::var("CARGO_MANIFEST_DIR").unwrap()).join("csrc/quiver_dpdk.h");
    let wrappers = out.join("static_fns");
    let mut builder = bindgen::Builder::default()
        .header(header.to_str().expect("a UTF-8 path"))
        .clang_args(&cflags)
        // rte_dev_dma_map and a few others are still marked experimental in 22.11.
        .clang_arg("-DALLOW_EXPERIMENTAL_API")
        .parse_callbacks(Box::new(bindgen::CargoCallbacks::new()))
        .wrap_static_fns(true)
        .wrap_static_fns_path(&wrappers)
        .derive_default(true)
        .derive_debug(false)
        .prepend_enum_name(false)
        .generate_comments(false)
        .layout_tests(true)
        .allowlist_recursively(true);
    for f in FUNCTIONS {
        builder = builder.allowlist_function(f);
    }
    for t in TYPES {
        builder = builder.allowlist_type(t);
    }
    for v in VARS {
        builder = builder.allowlist_var(v);
    }
    let bindings = builder
        .generate()
        .expect("bindgen could not generate DPDK bindings (is libclang-dev installed?)");
    bindings
        .write_to_file(out.join("bindings.rs"))
        .expect("write bindings.rs");

    // bindgen wrote static_fns.c: one exported `<name>__extern` per static inline function, which
    // the bindings link to. Compile it with our shim, with DPDK's own flags.
    let mut cc = cc::Build::new();
    cc.file(wrappers.with_extension("c"))
        .file("csrc/shim.c")
        .file("csrc/graph_bench.c")
        .include("csrc")
        .define("ALLOW_EXPERIMENTAL_API", None)
        .opt_level(3)
        .warnings(false);
    for f in &cflags {
        cc.flag(f);
    }
    cc.compile("quiver_dpdk_shim");
}

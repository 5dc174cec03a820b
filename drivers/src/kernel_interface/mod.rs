//! NSM's KERNEL mechanism: a veth pair whose one end is Quiver's (in Quiver's namespace, opened
//! as an AF_PACKET port) and whose other end is the client's interface, inside the client's
//! network namespace, with the addresses, routes, neighbours and policy routes of the
//! connection's IP context, IPv4 and IPv6.
//! Everything is done over route netlink; no `ip` is spawned.
//!
//! - Quiver's end is named from the connection id ([`host_name_for`]: `qvk` and 12 hex digits
//!   of a hash, so the same id always gives the same name); the other end is created directly
//!   inside the target namespace under the requested name (it never exists under that name in
//!   Quiver's namespace, so it cannot clash with a host interface).
//! - Quiver's end carries the alias (`IFLA_IFALIAS`) `quiver:<connection-id>`: [`list_owned`]
//!   finds Quiver's interfaces by it, and [`remove_orphans`] deletes, at startup, those no live
//!   connection owns. The namespace's end carries the config's alias (NSM's `client-<id>` /
//!   `server-<id>`), or the same tag when it names none.
//! - The namespace end keeps the kernel's default offloads (transmit checksum, TSO): the
//!   AF_PACKET port on Quiver's end takes frames with their checksum still to fill in and GSO
//!   super-frames as they come (virtio-net headers, see [`crate::af_packet`]), and hands that
//!   work back to the kernel on egress or does it in software.
//! - A failure midway deletes what was created: a veth goes with either of its ends.
//!
//! [`KernelInterface`] is a record, not a guard: dropping it leaves the interface; call
//! [`KernelInterface::delete`] (or [`delete_for_connection`]) on Close.
//!
//! Or, with [`KernelInterface::adopt_tap`], a TAP device Quiver opened as its port from inside
//! the namespace, configured the same way (no veth; gone with Quiver's descriptors).
//!
//! Files: `config` (what to create, checked into a plan first), `veth` ([`KernelInterface`]),
//! `tap` (the TAP form),
//! `links` (the netlink requests), `route` (routes and addresses parsed), `policy` (policy routes:
//! rules and their tables, checked), `rules` (their rules and tables made and removed), `owned`
//! (finding what Quiver made), `error`.

mod config;
mod error;
mod links;
mod owned;
mod policy;
mod route;
mod rules;
mod tap;
mod veth;

pub use config::{
    host_name_for, parse_cidr, parse_mac, validate_name, KernelInterfaceConfig, NeighborConfig,
    PolicyConfig, RouteConfig, ALIAS_PREFIX, MAX_CONNECTION_ID_LEN, MAX_NAME_LEN,
};
pub use error::KernelInterfaceError;
pub use owned::{delete_for_connection, list_owned, remove_orphans, OwnedInterface};
pub use policy::RULE_PROTOCOL;
pub use veth::KernelInterface;

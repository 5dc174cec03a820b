//! Where a packet came from, as a buffer flag the forwarding nodes set and read.

use dataplane::buffer::flags;

/// Buffer flag: the packet was made by Quiver itself (ARP, ICMP replies, VXLAN outer headers):
/// `ip4-rewrite` does not decrement its TTL.
pub const LOCALLY_ORIGINATED: u32 = flags::USER_0;

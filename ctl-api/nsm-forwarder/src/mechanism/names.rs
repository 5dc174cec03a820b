//! The names NSM gives mechanism classes, types and parameters that Quiver reads without
//! needing the rest of [`super`] (the field checks in `validate` use them too).

/// `cls` of mechanisms on this node.
pub const LOCAL: &str = "LOCAL";
/// `cls` of mechanisms between nodes.
pub const REMOTE: &str = "REMOTE";
/// Shared-memory packet interface.
pub const MEMIF: &str = "MEMIF";
/// A kernel interface (veth) in a namespace.
pub const KERNEL: &str = "KERNEL";

/// Parameter: the namespace (`file://…` or `inode://dev/ino`).
pub const INODE_URL: &str = "inodeURL";
/// Parameter: the memif control socket.
pub const SOCKETFILE: &str = "socketfile";
/// Parameter: the kernel interface's name.
pub const NAME: &str = "name";
/// Parameter: the MTU.
pub const MTU: &str = "MTU";

//! [`index_type!`](crate::index_type): a typed `u32` index, free at run time.

/// Defines a typed index: a `repr(transparent)` `u32` with `NONE` (`u32::MAX`), `new`, `get`,
/// `as_usize`, `is_none` (all `#[inline(always)]`) and `Display` as the number, so one kind of
/// index cannot be passed where another is meant and the data path pays nothing for it.
/// [`BufferIndex`](crate::BufferIndex) is one; `graph-nodes` makes its interface and adjacency
/// indices with it.
#[macro_export]
macro_rules! index_type {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[repr(transparent)]
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub struct $name(u32);

        impl $name {
            /// None: `u32::MAX`, as the tables and buffer metadata mark "none".
            pub const NONE: $name = $name(u32::MAX);

            /// The index `i`.
            #[inline(always)]
            pub const fn new(i: u32) -> $name {
                $name(i)
            }

            /// The index as a `u32` (for buffer metadata, a ring descriptor, the wire).
            #[inline(always)]
            pub const fn get(self) -> u32 {
                self.0
            }

            /// The index as a `usize`, for indexing a table or address arithmetic.
            #[inline(always)]
            pub const fn as_usize(self) -> usize {
                self.0 as usize
            }

            /// Whether this is [`Self::NONE`].
            #[inline(always)]
            pub const fn is_none(self) -> bool {
                self.0 == u32::MAX
            }
        }

        impl ::std::fmt::Display for $name {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                ::std::fmt::Display::fmt(&self.0, f)
            }
        }
    };
}

//! The writer's bookkeeping of the shared node memory: which 64-byte lines are free, in use, or
//! retired (unlinked, but perhaps still being read by a worker).
//!
//! The same allocator as the IPv4 table's: blocks are whole lines, a free block is reused for a
//! block of the same size or split when only larger ones are free, nothing is coalesced (node
//! sizes repeat, so exact reuse is the common case). A retired block becomes free only in
//! [`Arena::recycle_retired`], which the caller invokes once every reader has passed a quiescent
//! state.

/// Line allocator over `capacity` lines.
pub(super) struct Arena {
    capacity: u32,
    /// Lines never handed out start here.
    bump: u32,
    /// Free blocks by size in lines: `free[n]` holds the first line of each free n-line block.
    free: Vec<Vec<u32>>,
    retired: Vec<(u32, u32)>,
    in_use: u64,
}

impl Arena {
    /// An empty arena of `capacity` lines; line 0 is never handed out (so that no node sits at
    /// offset 0).
    pub fn new(capacity: u32) -> Arena {
        Arena {
            capacity,
            bump: 1,
            free: Vec::new(),
            retired: Vec::new(),
            in_use: 0,
        }
    }

    /// A block of `lines` lines, or `None` when no free block or unused space is large enough.
    pub fn alloc(&mut self, lines: u32) -> Option<u32> {
        let n = lines as usize;
        let block = if let Some(b) = self.free.get_mut(n).and_then(Vec::pop) {
            b
        } else if self.capacity - self.bump >= lines {
            self.bump += lines;
            self.bump - lines
        } else {
            // Split the smallest larger free block.
            let size = (n + 1..self.free.len()).find(|&s| !self.free[s].is_empty())?;
            let b = self.free[size].pop()?;
            self.put_free(b + lines, (size - n) as u32);
            b
        };
        self.in_use += lines as u64;
        Some(block)
    }

    fn put_free(&mut self, start: u32, lines: u32) {
        let n = lines as usize;
        if self.free.len() <= n {
            self.free.resize_with(n + 1, Vec::new);
        }
        self.free[n].push(start);
    }

    /// Parks a block that readers may still be reading.
    pub fn retire(&mut self, start: u32, lines: u32) {
        self.in_use -= lines as u64;
        self.retired.push((start, lines));
    }

    /// Lines retired and not yet reusable.
    pub fn retired_lines(&self) -> u64 {
        self.retired.iter().map(|&(_, n)| n as u64).sum()
    }

    /// Lines in use.
    pub fn lines_in_use(&self) -> u64 {
        self.in_use
    }

    /// The most lines ever handed out at once (the high-water mark of the node memory).
    pub fn lines_touched(&self) -> u64 {
        self.bump as u64 - 1
    }

    /// Makes every retired block reusable. Call only once every reader has passed a quiescent
    /// state since the blocks were retired.
    pub fn recycle_retired(&mut self) {
        for (start, lines) in std::mem::take(&mut self.retired) {
            self.put_free(start, lines);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_are_reused_only_after_recycling_and_split_when_needed() {
        let mut a = Arena::new(10);
        let x = a.alloc(4).unwrap();
        let y = a.alloc(5).unwrap();
        assert_eq!((x, y), (1, 5));
        assert_eq!(a.alloc(1), None, "full");
        a.retire(x, 4);
        assert_eq!(a.retired_lines(), 4);
        assert_eq!(a.alloc(4), None, "retired, not free");
        a.recycle_retired();
        assert_eq!(a.alloc(1), Some(1), "split from the 4-line block");
        assert_eq!(a.alloc(3), Some(2), "the rest of it");
        assert_eq!(a.lines_in_use(), 9);
        assert_eq!(a.lines_touched(), 9);
    }
}

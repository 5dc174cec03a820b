//! [`Arcs`]: where a frame's packets go next, written only when they do not all go one way.

use dataplane::{Context, Frame, Next};

/// The next arcs of a frame's packets when most take one common arc: nothing is written for
/// packets taking it until one takes another, and a frame whose packets all take it is handed on
/// whole.
pub(crate) struct Arcs<'a> {
    arcs: &'a mut [Next],
    common: Next,
    mixed: bool,
}

impl<'a> Arcs<'a> {
    /// Arcs for `arcs.len()` packets, all `common` so far.
    #[inline(always)]
    pub fn new(arcs: &'a mut [Next], common: Next) -> Self {
        Arcs {
            arcs,
            common,
            mixed: false,
        }
    }

    /// Sends packet `i` along `arc` (only needed when it is not the common one).
    #[inline(always)]
    pub fn set(&mut self, i: usize, arc: Next) {
        if !self.mixed {
            if arc == self.common {
                return;
            }
            self.arcs.fill(self.common);
            self.mixed = true;
        }
        if let Some(a) = self.arcs.get_mut(i) {
            *a = arc;
        }
    }

    /// Hands the frame on along the arcs set: whole (a pointer swap when the next node has
    /// nothing pending) when every packet takes one arc, the common one or another.
    #[inline]
    pub fn enqueue<S>(self, cx: &mut Context<'_, S>, frame: &mut Frame) {
        if !self.mixed {
            cx.enqueue_frame(self.common, frame);
            return;
        }
        let arcs = &self.arcs[..frame.len().min(self.arcs.len())];
        match arcs.first() {
            // Checked without branches (vectorised).
            Some(&first) if arcs.iter().fold(0u16, |acc, a| acc | (a.0 ^ first.0)) == 0 => {
                cx.enqueue_frame(first, frame)
            }
            _ => cx.enqueue_to_nexts(self.arcs, frame.as_slice()),
        }
    }
}

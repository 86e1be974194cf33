//! The order and due times of the frames one direction of the relay holds.

/// A ring of `capacity` slots, indices and due times only: the frames' bytes live in the slot
/// of the same index elsewhere (`sys::Slots`), written in place by the receive and sent from
/// there, so nothing is allocated or copied per frame. Frames leave in the order they came:
/// every frame gets the same delay, and a due time is never earlier than the one before it
/// (two arrival stamps from two CPUs can be a little out of order), so the head is always
/// the first one due.
#[derive(Debug)]
pub(crate) struct Fifo {
    due: Vec<u64>,
    head: usize,
    len: usize,
    /// The due time of the last frame pushed.
    last_due: u64,
}

impl Fifo {
    pub(crate) fn new(capacity: usize) -> Fifo {
        assert!(capacity > 0, "a ring needs a slot");
        Fifo {
            due: vec![0; capacity],
            head: 0,
            len: 0,
            last_due: 0,
        }
    }

    pub(crate) fn capacity(&self) -> usize {
        self.due.len()
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }

    pub(crate) fn is_full(&self) -> bool {
        self.len == self.capacity()
    }

    /// The free slots after the last frame, up to the end of the ring (a receive fills
    /// consecutive slots): (first slot, how many).
    pub(crate) fn free_run(&self) -> (usize, usize) {
        let cap = self.capacity();
        let tail = (self.head + self.len) % cap;
        (tail, (cap - self.len).min(cap - tail))
    }

    /// Appends a frame (in the first free slot) due at `due`, or at the due time of the one
    /// before it if that is later; returns the due time it got.
    pub(crate) fn push(&mut self, due: u64) -> u64 {
        assert!(!self.is_full(), "push into a full ring");
        let due = due.max(self.last_due);
        let cap = self.capacity();
        self.due[(self.head + self.len) % cap] = due;
        self.len += 1;
        self.last_due = due;
        due
    }

    /// When the first frame is due, if one is held.
    pub(crate) fn head_due(&self) -> Option<u64> {
        (self.len > 0).then(|| self.due[self.head])
    }

    /// The frames due at `now` from the first, at most `max` and up to the end of the ring
    /// (a send takes consecutive slots): (first slot, how many).
    pub(crate) fn due_run(&self, now: u64, max: usize) -> (usize, usize) {
        let run = self.len.min(self.capacity() - self.head).min(max);
        let n = self.due[self.head..self.head + run]
            .iter()
            .take_while(|&&d| d <= now)
            .count();
        (self.head, n)
    }

    /// The due time of the frame in `slot` (held or not).
    pub(crate) fn due_of(&self, slot: usize) -> u64 {
        self.due[slot]
    }

    /// Removes the first `n` frames (sent or given up).
    pub(crate) fn pop(&mut self, n: usize) {
        assert!(n <= self.len, "pop {n} of {}", self.len);
        self.head = (self.head + n) % self.capacity();
        self.len -= n;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_leave_in_order_when_due_across_the_wrap() {
        let mut f = Fifo::new(4);
        assert_eq!(f.free_run(), (0, 4));
        for t in [10, 20, 30] {
            f.push(t);
        }
        assert_eq!(f.head_due(), Some(10));
        assert_eq!(f.due_run(5, 64), (0, 0));
        assert_eq!(f.due_run(25, 64), (0, 2));
        assert_eq!(f.due_run(25, 1), (0, 1));
        f.pop(2);
        // The free run stops at the end of the ring, then goes on from slot 0.
        assert_eq!(f.free_run(), (3, 1));
        f.push(40);
        assert_eq!(f.free_run(), (0, 2));
        f.push(50);
        assert_eq!(f.len(), 3);
        // The due run stops at the end of the ring too.
        assert_eq!(f.due_run(100, 64), (2, 2));
        f.pop(2);
        assert_eq!(f.due_run(100, 64), (0, 1));
        assert_eq!(f.due_of(0), 50);
        f.pop(1);
        assert_eq!(f.head_due(), None);
        assert_eq!(f.due_run(100, 64), (1, 0));
    }

    #[test]
    fn a_due_time_is_never_earlier_than_the_one_before() {
        let mut f = Fifo::new(3);
        assert_eq!(f.push(100), 100);
        assert_eq!(f.push(90), 100);
        assert_eq!(f.push(120), 120);
        assert!(f.is_full());
        assert_eq!(f.free_run().1, 0);
        assert_eq!(f.due_run(100, 64), (0, 2));
    }

    #[test]
    #[should_panic(expected = "push into a full ring")]
    fn pushing_into_a_full_ring_is_a_bug() {
        let mut f = Fifo::new(1);
        f.push(1);
        f.push(2);
    }
}

//! Bookkeeping the schedulers share: queue pairs in intrusive FIFO lists (no allocation per
//! decision, O(1) removal from the middle), and tenants mapped to dense slots.

use std::collections::HashMap;

use super::Tenant;

/// No item, no list.
pub(crate) const NIL: u32 = u32::MAX;

/// Items (queue pairs) in FIFO lists (one per class: a tenant, or a queue pair itself), each
/// item in at most one list. Doubly linked through per-item arrays, so that unlinking a
/// queue pair destroyed or moved to another tenant costs no scan.
#[derive(Debug, Clone, Default)]
pub(crate) struct Lists {
    prev: Vec<u32>,
    next: Vec<u32>,
    owner: Vec<u32>,
    head: Vec<u32>,
    tail: Vec<u32>,
}

impl Lists {
    /// Makes room for item `item`.
    pub(crate) fn grow_items(&mut self, item: u32) {
        let n = item as usize + 1;
        if self.owner.len() < n {
            self.prev.resize(n, NIL);
            self.next.resize(n, NIL);
            self.owner.resize(n, NIL);
        }
    }

    /// Makes room for list `list`.
    pub(crate) fn grow_lists(&mut self, list: u32) {
        let n = list as usize + 1;
        if self.head.len() < n {
            self.head.resize(n, NIL);
            self.tail.resize(n, NIL);
        }
    }

    #[inline]
    pub(crate) fn is_empty(&self, list: u32) -> bool {
        self.head[list as usize] == NIL
    }

    /// The list `item` is in, if any.
    #[inline]
    pub(crate) fn owner(&self, item: u32) -> Option<u32> {
        self.owner.get(item as usize).copied().filter(|&o| o != NIL)
    }

    #[inline]
    pub(crate) fn push_back(&mut self, list: u32, item: u32) {
        debug_assert_eq!(self.owner[item as usize], NIL, "item {item} listed twice");
        let (l, i) = (list as usize, item as usize);
        let tail = self.tail[l];
        self.prev[i] = tail;
        self.next[i] = NIL;
        self.owner[i] = list;
        if tail == NIL {
            self.head[l] = item;
        } else {
            self.next[tail as usize] = item;
        }
        self.tail[l] = item;
    }

    #[inline]
    pub(crate) fn pop_front(&mut self, list: u32) -> Option<u32> {
        let item = self.head[list as usize];
        if item == NIL {
            return None;
        }
        self.unlink(item);
        Some(item)
    }

    /// Takes `item` out of its list; returns the list.
    #[inline]
    pub(crate) fn unlink(&mut self, item: u32) -> Option<u32> {
        let list = self.owner(item)?;
        let i = item as usize;
        let (prev, next) = (self.prev[i], self.next[i]);
        if prev == NIL {
            self.head[list as usize] = next;
        } else {
            self.next[prev as usize] = next;
        }
        if next == NIL {
            self.tail[list as usize] = prev;
        } else {
            self.prev[next as usize] = prev;
        }
        self.owner[i] = NIL;
        Some(list)
    }
}

/// Tenants by dense slot: which slot each queue pair's tenant has, and each slot's weight.
/// The map from tenant id to slot is read only when a queue pair changes tenant.
#[derive(Debug, Clone, Default)]
pub(crate) struct Tenants {
    slots: HashMap<u32, u32>,
    /// Each slot's weight, at least 1.
    pub(crate) weight: Vec<u32>,
    /// Each queue pair's slot.
    pub(crate) of: Vec<u32>,
}

impl Tenants {
    /// Makes room for queue pair `qp`, in the default tenant until told otherwise.
    pub(crate) fn reset(&mut self, qp: u32) {
        if self.weight.is_empty() {
            self.slot(Tenant::default());
        }
        let n = qp as usize + 1;
        if self.of.len() < n {
            self.of.resize(n, 0);
        }
        self.of[qp as usize] = 0;
    }

    /// The slot of `tenant` (made if new), its weight updated.
    pub(crate) fn slot(&mut self, tenant: Tenant) -> u32 {
        let next = self.weight.len() as u32;
        let slot = *self.slots.entry(tenant.id).or_insert(next);
        if slot == next {
            self.weight.push(tenant.weight.max(1));
        } else {
            self.weight[slot as usize] = tenant.weight.max(1);
        }
        slot
    }

    /// Slots there are.
    pub(crate) fn len(&self) -> usize {
        self.weight.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_keep_fifo_order_and_unlink_from_the_middle() {
        let mut l = Lists::default();
        l.grow_lists(1);
        l.grow_items(9);
        for i in [4, 7, 2, 9] {
            l.push_back(1, i);
        }
        assert_eq!(l.unlink(7), Some(1));
        assert_eq!(l.unlink(7), None);
        l.push_back(0, 7);
        assert_eq!(l.owner(7), Some(0));
        let drained: Vec<u32> = std::iter::from_fn(|| l.pop_front(1)).collect();
        assert_eq!(drained, [4, 2, 9]);
        assert!(l.is_empty(1) && !l.is_empty(0));
    }

    #[test]
    fn tenants_get_dense_slots_and_their_latest_weight() {
        let mut t = Tenants::default();
        t.reset(3);
        assert_eq!(t.slot(Tenant { id: 42, weight: 3 }), 1);
        assert_eq!(t.slot(Tenant { id: 0, weight: 0 }), 0);
        assert_eq!(t.slot(Tenant { id: 42, weight: 5 }), 1);
        assert_eq!(t.weight, [1, 5]);
        assert_eq!(t.len(), 2);
    }
}

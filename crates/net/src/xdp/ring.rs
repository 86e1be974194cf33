//! One of an XDP socket's four rings, mapped from the kernel.
//!
//! Unsafe code: the mapping, and the ring's entries and indices in it; every unsafe block
//! says why it is sound.
#![allow(unsafe_code)]

use std::io;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicU32, Ordering};

use libc::c_void;

use super::umem::FRAMES;

/// Entries of each ring (a power of two; the fill ring can hold every receive chunk).
pub(super) const RING: u32 = (FRAMES / 2) as u32;

// SAFETY: a ring is memory this link alone uses from user space (the kernel is the other
// party, through the socket); moving the link moves the only user.
unsafe impl<T> Send for Ring<T> {}

/// One of the socket's four rings: a single-producer single-consumer queue in memory shared
/// with the kernel. User space produces on the fill and transmit rings and consumes on the
/// completion and receive rings; `cached` is its own index, published by `publish` or
/// `release`.
pub(super) struct Ring<T> {
    map: *mut c_void,
    map_len: usize,
    producer: *const AtomicU32,
    consumer: *const AtomicU32,
    descs: *mut T,
    /// Our index (producer or consumer), ahead of what is published.
    cached: u32,
}

impl<T: Copy> Ring<T> {
    pub(super) fn map(fd: RawFd, off: &libc::xdp_ring_offset, pgoff: i64) -> io::Result<Ring<T>> {
        let map_len = off.desc as usize + RING as usize * size_of::<T>();
        // SAFETY: maps the ring the kernel made for this socket at its documented offset;
        // the result is checked.
        let map = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                map_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_POPULATE,
                fd,
                pgoff,
            )
        };
        if map == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let base = map.cast::<u8>();
        // SAFETY: the kernel's offsets lie inside the mapping it sized (`off.desc` plus the
        // descriptors); the producer and consumer are aligned u32s.
        let (producer, consumer, descs) = unsafe {
            (
                base.add(off.producer as usize).cast::<AtomicU32>(),
                base.add(off.consumer as usize).cast::<AtomicU32>(),
                base.add(off.desc as usize).cast::<T>(),
            )
        };
        Ok(Ring {
            map,
            map_len,
            producer,
            consumer,
            descs,
            // A new ring's producer and consumer are both 0.
            cached: 0,
        })
    }

    fn producer(&self) -> &AtomicU32 {
        // SAFETY: points into the mapping, alive as long as `self`.
        unsafe { &*self.producer }
    }

    fn consumer(&self) -> &AtomicU32 {
        // SAFETY: as for `producer`.
        unsafe { &*self.consumer }
    }

    // -- as producer (fill, transmit) --

    /// Free entries: the ring's size less those not yet consumed by the kernel.
    pub(super) fn room(&self) -> u32 {
        RING - self
            .cached
            .wrapping_sub(self.consumer().load(Ordering::Acquire))
    }

    /// Entries published and not yet consumed by the kernel.
    pub(super) fn unconsumed(&self) -> u32 {
        self.producer()
            .load(Ordering::Relaxed)
            .wrapping_sub(self.consumer().load(Ordering::Acquire))
    }

    /// Writes an entry (the caller checked `room`, or owns fewer entries than the ring holds).
    pub(super) fn push(&mut self, value: T) {
        debug_assert!(self.room() > 0);
        let i = (self.cached & (RING - 1)) as usize;
        // SAFETY: `i` is within the ring's RING descriptors, and an entry not yet published
        // is not read by the kernel.
        unsafe { self.descs.add(i).write(value) };
        self.cached = self.cached.wrapping_add(1);
    }

    /// Makes the pushed entries visible to the kernel.
    pub(super) fn publish(&mut self) {
        self.producer().store(self.cached, Ordering::Release);
    }

    // -- as consumer (completion, receive) --

    /// The entry `k` places after the next one to pop, if the kernel has published it.
    pub(super) fn peek(&self, k: u32) -> Option<T> {
        let available = self
            .producer()
            .load(Ordering::Acquire)
            .wrapping_sub(self.cached);
        if k >= available {
            return None;
        }
        let i = (self.cached.wrapping_add(k) & (RING - 1)) as usize;
        // SAFETY: the kernel published entry `i` (acquire above) and does not rewrite it
        // until we release it.
        Some(unsafe { self.descs.add(i).read() })
    }

    pub(super) fn pop(&mut self) -> Option<T> {
        let value = self.peek(0)?;
        self.cached = self.cached.wrapping_add(1);
        Some(value)
    }

    /// Hands the popped entries back to the kernel.
    pub(super) fn release(&mut self) {
        self.consumer().store(self.cached, Ordering::Release);
    }
}

impl<T> Drop for Ring<T> {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `map`, unmapped once.
        unsafe { libc::munmap(self.map, self.map_len) };
    }
}

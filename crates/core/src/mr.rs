//! Memory regions: application memory the engine may read and write, with the keys and
//! access rights that guard it.
//!
//! A key is `slot << 8 | tag`, as in Linux Soft-RoCE: the slot finds the region in O(1), the
//! random tag makes keys hard to guess and makes a stale key (of a region since deregistered
//! and its slot reused) fail, since a reused slot always gets a different tag.

use crate::qp::SgList;
use crate::rng::Rng;
use crate::{Error, Payload, PayloadAt, PdId};

/// Access rights of a memory region (and, for the remote ones, of a queue pair).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Access(u8);

impl Access {
    /// No right.
    pub const NONE: Access = Access(0);
    /// The engine may write the region for local work requests: receive buffers and the
    /// result buffers of READs and atomics. Required by the remote write and atomic rights.
    pub const LOCAL_WRITE: Access = Access(1);
    /// A peer may RDMA WRITE into the region (or the queue pair).
    pub const REMOTE_WRITE: Access = Access(2);
    /// A peer may RDMA READ the region (or the queue pair).
    pub const REMOTE_READ: Access = Access(4);
    /// A peer may perform atomics on the region (or the queue pair).
    pub const REMOTE_ATOMIC: Access = Access(8);
    /// Every right.
    pub const ALL: Access = Access(15);

    /// Whether every right in `other` is in `self`.
    pub const fn contains(self, other: Access) -> bool {
        self.0 & other.0 == other.0
    }

    /// The rights of both.
    pub const fn union(self, other: Access) -> Access {
        Access(self.0 | other.0)
    }
}

impl core::ops::BitOr for Access {
    type Output = Access;
    fn bitor(self, rhs: Access) -> Access {
        self.union(rhs)
    }
}

/// What backs a memory region.
#[derive(Debug)]
pub enum Memory {
    /// Real bytes, owned by the engine while registered (read them back with
    /// [`crate::Engine::mr_bytes`]).
    Bytes(Box<[u8]>),
    /// A length only: the simulator moves terabytes without touching a byte. Reads and writes
    /// are checked exactly as for real bytes and then do nothing.
    LengthOnly(u64),
}

impl Memory {
    fn len(&self) -> u64 {
        match self {
            Memory::Bytes(b) => b.len() as u64,
            Memory::LengthOnly(n) => *n,
        }
    }
}

/// The keys and extent of a registered region.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MrInfo {
    /// The key local work requests name the region by.
    pub lkey: u32,
    /// The key a peer names it by (the same value, as in Soft-RoCE).
    pub rkey: u32,
    /// The virtual address of the first byte.
    pub addr: u64,
    /// The length in bytes.
    pub len: u64,
}

/// Why an access to a memory region was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AccessError {
    /// No region has this key (never had, or since deregistered).
    BadKey,
    /// The region belongs to another protection domain.
    WrongPd,
    /// The range is not inside the region.
    OutOfBounds,
    /// The region does not grant the access.
    Permission,
}

#[derive(Debug)]
struct Region {
    key: u32,
    pd: PdId,
    addr: u64,
    access: Access,
    memory: Memory,
}

impl Region {
    /// Offset of `[va, va + len)` in the region, if the range lies inside it.
    fn offset(&self, va: u64, len: u64) -> Option<usize> {
        let start = va.checked_sub(self.addr)?;
        let end = start.checked_add(len)?;
        (end <= self.memory.len()).then_some(start as usize)
    }
}

/// Every registered region of one engine, with a bound on how many there may be.
#[derive(Debug)]
pub(crate) struct MrTable {
    slots: Vec<Option<Region>>,
    /// The tag each slot last had, so that a reused slot gets a different one.
    last_tag: Vec<u8>,
    free: Vec<u32>,
    max: usize,
}

/// The most bytes of a packet's payload [`MrTable::gather`] copies next to its headers
/// even when they lie in one piece. Sent from where they lie, they would be one more piece
/// for the kernel to gather and one more call of the ICRC; copied, a small packet is one
/// contiguous piece.
const COPY_AT_MOST: u32 = 256;

impl MrTable {
    pub(crate) fn new(max: usize) -> MrTable {
        MrTable {
            slots: Vec::new(),
            last_tag: Vec::new(),
            free: Vec::new(),
            max: max.min(1 << 24),
        }
    }

    pub(crate) fn register(
        &mut self,
        rng: &mut Rng,
        pd: PdId,
        addr: u64,
        memory: Memory,
        access: Access,
    ) -> Result<MrInfo, Error> {
        let remote_writes = Access::REMOTE_WRITE | Access::REMOTE_ATOMIC;
        if access.0 & remote_writes.0 != 0 && !access.contains(Access::LOCAL_WRITE) {
            return Err(Error::InvalidArgument(
                "remote write or atomic access needs local write access too",
            ));
        }
        let len = memory.len();
        if addr.checked_add(len).is_none() {
            return Err(Error::InvalidArgument(
                "the region wraps past the end of the address space",
            ));
        }
        let slot = match self.free.pop() {
            Some(slot) => slot,
            None if self.slots.len() < self.max => {
                self.slots.push(None);
                self.last_tag.push(0);
                (self.slots.len() - 1) as u32
            }
            None => return Err(Error::Exhausted("memory regions")),
        };
        let mut tag = rng.next_u32() as u8;
        if tag == self.last_tag[slot as usize] {
            tag = tag.wrapping_add(1);
        }
        self.last_tag[slot as usize] = tag;
        let key = (slot << 8) | u32::from(tag);
        self.slots[slot as usize] = Some(Region {
            key,
            pd,
            addr,
            access,
            memory,
        });
        Ok(MrInfo {
            lkey: key,
            rkey: key,
            addr,
            len,
        })
    }

    pub(crate) fn deregister(&mut self, key: u32) -> Result<Memory, Error> {
        let slot = (key >> 8) as usize;
        match self.slots.get_mut(slot) {
            Some(entry @ Some(_)) if entry.as_ref().is_some_and(|r| r.key == key) => {
                let region = entry.take().expect("checked just above");
                self.free.push(slot as u32);
                Ok(region.memory)
            }
            _ => Err(Error::NoSuchObject("memory region")),
        }
    }

    /// Whether region `key` holds real bytes (not a length only).
    fn has_bytes(&self, key: u32) -> bool {
        self.get(key)
            .is_some_and(|r| matches!(r.memory, Memory::Bytes(_)))
    }

    fn get(&self, key: u32) -> Option<&Region> {
        self.slots
            .get((key >> 8) as usize)?
            .as_ref()
            .filter(|r| r.key == key)
    }

    fn get_mut(&mut self, key: u32) -> Option<&mut Region> {
        self.slots
            .get_mut((key >> 8) as usize)?
            .as_mut()
            .filter(|r| r.key == key)
    }

    /// Checks that `[va, va + len)` of region `key` may be accessed with `need` from `pd`.
    /// A zero-length access names no memory and always passes (IBTA: the R_Key of a
    /// zero-length RDMA operation is not checked).
    pub(crate) fn check(
        &self,
        key: u32,
        pd: PdId,
        va: u64,
        len: u64,
        need: Access,
    ) -> Result<(), AccessError> {
        if len == 0 {
            return Ok(());
        }
        let region = self.get(key).ok_or(AccessError::BadKey)?;
        if region.pd != pd {
            return Err(AccessError::WrongPd);
        }
        if !region.access.contains(need) {
            return Err(AccessError::Permission);
        }
        region
            .offset(va, len)
            .map(|_| ())
            .ok_or(AccessError::OutOfBounds)
    }

    /// Copies `dst.len()` bytes from `va` of region `key` (already checked). A length-only
    /// region leaves `dst` as it is.
    pub(crate) fn read(&self, key: u32, va: u64, dst: &mut [u8]) {
        if dst.is_empty() {
            return;
        }
        let region = self.get(key).expect("access checked before reading");
        let at = region
            .offset(va, dst.len() as u64)
            .expect("bounds checked before reading");
        if let Memory::Bytes(bytes) = &region.memory {
            dst.copy_from_slice(&bytes[at..at + dst.len()]);
        }
    }

    /// Copies `src` to `va` of region `key` (already checked).
    pub(crate) fn write(&mut self, key: u32, va: u64, src: &[u8]) {
        if src.is_empty() {
            return;
        }
        let region = self.get_mut(key).expect("access checked before writing");
        let at = region
            .offset(va, src.len() as u64)
            .expect("bounds checked before writing");
        if let Memory::Bytes(bytes) = &mut region.memory {
            bytes[at..at + src.len()].copy_from_slice(src);
        }
    }

    /// Finds message bytes `offset .. offset + dst.len()` of a scatter/gather list, checking
    /// every piece against `pd` (regions may be deregistered after posting). In one piece
    /// of more than [`COPY_AT_MOST`] bytes (the usual case for bulk data), and `in_place`
    /// allowed, they are not copied: where they lie is returned. Otherwise they are copied
    /// into `dst`.
    ///
    /// Inline (its one caller builds each request packet): out of line, its answer came
    /// back through memory and was read back wider than it was written, a load the CPU
    /// cannot forward from the narrower stores (a fifth of `packet_at_cursor`'s samples in
    /// write-bw, `perf annotate`).
    #[inline(always)]
    pub(crate) fn gather(
        &self,
        pd: PdId,
        sgl: &SgList,
        offset: u32,
        dst: &mut [u8],
        in_place: bool,
    ) -> Result<PayloadAt, AccessError> {
        let len = dst.len() as u32;
        let mut at = 0usize;
        for (lkey, addr, n) in sgl.pieces(offset, len) {
            self.check(lkey, pd, addr, u64::from(n), Access::NONE)?;
            // Length-only memory has no bytes to copy: its payload stays a length, however
            // short (copied, it would become zeros in the buffer that in-line services
            // then grow, where a length is passed over: `policy::service`).
            let length_only = !self.has_bytes(lkey);
            if (in_place || length_only) && n == len && (len > COPY_AT_MOST || length_only) {
                return Ok(PayloadAt::Region { key: lkey, addr });
            }
            self.read(lkey, addr, &mut dst[at..at + n as usize]);
            at += n as usize;
        }
        Ok(PayloadAt::Buffer)
    }

    /// `len` bytes from `va` of region `key`, if it is registered and holds them: the bytes,
    /// or the length of a length-only region. Zero bytes name no memory: always there.
    pub(crate) fn slice(&self, key: u32, va: u64, len: u32) -> Option<Payload<'_>> {
        if len == 0 {
            return Some(Payload::Bytes(&[]));
        }
        let region = self.get(key)?;
        let at = region.offset(va, u64::from(len))?;
        Some(match &region.memory {
            Memory::Bytes(bytes) => Payload::Bytes(&bytes[at..at + len as usize]),
            Memory::LengthOnly(_) => Payload::Len(len),
        })
    }

    /// Copies `src` (or, for a length-only payload, nothing) to message bytes `offset ..` of
    /// a scatter/gather list, checking every piece for local write access first.
    pub(crate) fn scatter(
        &mut self,
        pd: PdId,
        sgl: &SgList,
        offset: u32,
        len: u32,
        src: Option<&[u8]>,
    ) -> Result<(), AccessError> {
        for (lkey, addr, n) in sgl.pieces(offset, len) {
            self.check(lkey, pd, addr, u64::from(n), Access::LOCAL_WRITE)?;
        }
        if let Some(src) = src {
            let mut at = 0usize;
            for (lkey, addr, n) in sgl.pieces(offset, len) {
                self.write(lkey, addr, &src[at..at + n as usize]);
                at += n as usize;
            }
        }
        Ok(())
    }

    /// The `len` bytes at `va` of region `key`, to change in place (`None`: a length-only
    /// region, or out of bounds).
    pub(crate) fn slice_mut(&mut self, key: u32, va: u64, len: u32) -> Option<&mut [u8]> {
        let region = self.get_mut(key)?;
        let at = region.offset(va, u64::from(len))?;
        match &mut region.memory {
            Memory::Bytes(b) => Some(&mut b[at..at + len as usize]),
            Memory::LengthOnly(_) => None,
        }
    }

    pub(crate) fn bytes(&self, key: u32) -> Option<&[u8]> {
        match &self.get(key)?.memory {
            Memory::Bytes(b) => Some(b),
            Memory::LengthOnly(_) => None,
        }
    }

    pub(crate) fn bytes_mut(&mut self, key: u32) -> Option<&mut [u8]> {
        match &mut self.get_mut(key)?.memory {
            Memory::Bytes(b) => Some(b),
            Memory::LengthOnly(_) => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table() -> (MrTable, Rng) {
        (MrTable::new(4), Rng::new(7))
    }

    #[test]
    fn checks_key_pd_bounds_and_permission() {
        let (mut t, mut rng) = table();
        let pd = PdId(1);
        let mr = t
            .register(
                &mut rng,
                pd,
                0x1000,
                Memory::Bytes(vec![0; 64].into()),
                Access::LOCAL_WRITE | Access::REMOTE_READ,
            )
            .unwrap();
        assert_eq!(
            t.check(mr.rkey, pd, 0x1000, 64, Access::REMOTE_READ),
            Ok(())
        );
        assert_eq!(
            t.check(mr.rkey, pd, 0x1020, 32, Access::REMOTE_READ),
            Ok(())
        );
        assert_eq!(
            t.check(mr.rkey, pd, 0x1021, 32, Access::REMOTE_READ),
            Err(AccessError::OutOfBounds)
        );
        assert_eq!(
            t.check(mr.rkey, pd, 0x0FFF, 1, Access::REMOTE_READ),
            Err(AccessError::OutOfBounds)
        );
        assert_eq!(
            t.check(mr.rkey, pd, u64::MAX, 2, Access::REMOTE_READ),
            Err(AccessError::OutOfBounds)
        );
        assert_eq!(
            t.check(mr.rkey, pd, 0x1000, 8, Access::REMOTE_WRITE),
            Err(AccessError::Permission)
        );
        assert_eq!(
            t.check(mr.rkey, PdId(2), 0x1000, 8, Access::REMOTE_READ),
            Err(AccessError::WrongPd)
        );
        assert_eq!(
            t.check(mr.rkey ^ 1, pd, 0x1000, 8, Access::REMOTE_READ),
            Err(AccessError::BadKey)
        );
        assert_eq!(
            t.check(0xDEAD_BEEF, pd, 0, 0, Access::REMOTE_WRITE),
            Ok(()),
            "zero length names no memory"
        );
    }

    #[test]
    fn stale_keys_fail_after_the_slot_is_reused() {
        let (mut t, mut rng) = table();
        let pd = PdId(1);
        let first = t
            .register(&mut rng, pd, 0, Memory::LengthOnly(10), Access::LOCAL_WRITE)
            .unwrap();
        t.deregister(first.lkey).unwrap();
        let second = t
            .register(&mut rng, pd, 0, Memory::LengthOnly(10), Access::LOCAL_WRITE)
            .unwrap();
        assert_eq!(first.lkey >> 8, second.lkey >> 8, "the slot is reused");
        assert_ne!(first.lkey, second.lkey);
        assert_eq!(
            t.check(first.lkey, pd, 0, 1, Access::NONE),
            Err(AccessError::BadKey)
        );
        assert!(t.deregister(first.lkey).is_err());
    }

    #[test]
    fn the_table_is_bounded_and_remote_write_needs_local_write() {
        let (mut t, mut rng) = table();
        for _ in 0..4 {
            t.register(&mut rng, PdId(1), 0, Memory::LengthOnly(1), Access::NONE)
                .unwrap();
        }
        assert_eq!(
            t.register(&mut rng, PdId(1), 0, Memory::LengthOnly(1), Access::NONE),
            Err(Error::Exhausted("memory regions"))
        );
        let (mut t, mut rng) = table();
        assert!(matches!(
            t.register(
                &mut rng,
                PdId(1),
                0,
                Memory::LengthOnly(1),
                Access::REMOTE_WRITE
            ),
            Err(Error::InvalidArgument(_))
        ));
    }

    #[test]
    fn reads_and_writes_land_at_the_right_offset() {
        let (mut t, mut rng) = table();
        let mr = t
            .register(
                &mut rng,
                PdId(1),
                100,
                Memory::Bytes(vec![0; 16].into()),
                Access::LOCAL_WRITE,
            )
            .unwrap();
        t.write(mr.lkey, 104, b"abcd");
        let mut out = [0u8; 6];
        t.read(mr.lkey, 103, &mut out);
        assert_eq!(&out, b"\0abcd\0");
        assert_eq!(&t.bytes(mr.lkey).unwrap()[4..8], b"abcd");
    }
}

//! The UMEM: the memory an XDP socket's frames live in, shared with the kernel, in chunks of
//! [`FRAME`] bytes; and reading and writing frames in it.
//!
//! Unsafe code: the mapping, and slices of it that the caller promises nobody else (the
//! kernel included) touches meanwhile; every unsafe block says why it is sound.
#![allow(unsafe_code)]

use std::io;

/// One UMEM chunk. A frame longer than one (a RoCE packet of path MTU 4096 is 4,170 bytes
/// with its Ethernet, IP and UDP headers) spans several, as one descriptor each, all but the
/// last flagged `XDP_PKT_CONTD` (AF_XDP multi-buffer, `XDP_USE_SG`, Linux 6.6 and later).
pub(super) const FRAME: usize = 4096;
/// Chunks in the UMEM: half are lent to the kernel for receiving, half are ours to send from.
pub(super) const FRAMES: usize = 4096;

/// The UMEM: anonymous memory the socket's frames live in, shared with the kernel.
pub(super) struct Umem {
    pub(super) ptr: *mut u8,
    pub(super) len: usize,
}

/// Writes `bytes` at offset `at` of a frame laid over `chunks` of `umem`, FRAME bytes each.
///
/// # Safety
/// The chunks are inside the UMEM and neither the kernel nor any other reference touches
/// them meanwhile.
pub(super) unsafe fn write_across(umem: &Umem, chunks: &[u64], mut at: usize, mut bytes: &[u8]) {
    while !bytes.is_empty() {
        let (k, offset) = (at / FRAME, at % FRAME);
        let n = (FRAME - offset).min(bytes.len());
        // SAFETY: the caller's promise.
        let chunk = unsafe { umem.chunk_mut(chunks[k], FRAME) };
        chunk[offset..offset + n].copy_from_slice(&bytes[..n]);
        at += n;
        bytes = &bytes[n..];
    }
}

/// The bytes descriptor `d` of the receive ring holds, if they lie inside one chunk of `umem`.
pub(super) fn desc_bytes(umem: &Umem, d: libc::xdp_desc) -> Option<&[u8]> {
    let chunk = d.addr & !(FRAME as u64 - 1);
    let offset = (d.addr - chunk) as usize;
    if offset + d.len as usize > FRAME || chunk as usize + FRAME > umem.len {
        return None;
    }
    // SAFETY: the kernel published this descriptor on the receive ring, so its bytes are
    // written and stay ours (not on the fill ring) until the next `recv`; they lie inside one
    // chunk of the UMEM, checked just above.
    Some(unsafe { umem.bytes(d.addr, d.len as usize) })
}

impl Umem {
    pub(super) fn new(len: usize) -> io::Result<Umem> {
        // SAFETY: a fresh anonymous mapping; the result is checked.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_POPULATE,
                -1,
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(Umem {
            ptr: ptr.cast(),
            len,
        })
    }

    /// `len` bytes at `addr`.
    ///
    /// # Safety
    /// `addr..addr + len` lies inside the UMEM and the kernel does not write it meanwhile.
    pub(super) unsafe fn bytes(&self, addr: u64, len: usize) -> &[u8] {
        debug_assert!(addr as usize + len <= self.len);
        // SAFETY: the caller's promise.
        unsafe { std::slice::from_raw_parts(self.ptr.add(addr as usize), len) }
    }

    /// The first `len` bytes of chunk `chunk`, to write.
    ///
    /// # Safety
    /// The chunk is inside the UMEM, `len <= FRAME`, and neither the kernel nor any other
    /// reference touches it meanwhile.
    #[allow(clippy::mut_from_ref)]
    pub(super) unsafe fn chunk_mut(&self, chunk: u64, len: usize) -> &mut [u8] {
        debug_assert!(chunk as usize + FRAME <= self.len && len <= FRAME);
        // SAFETY: the caller's promise.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.add(chunk as usize), len) }
    }
}

impl Drop for Umem {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `new`, unmapped once; the socket using it is closed
        // first (field order of `XdpLink`).
        unsafe { libc::munmap(self.ptr.cast(), self.len) };
    }
}

// SAFETY: the UMEM is memory this link alone uses from user space (the kernel is the other
// party, through the socket); moving the link moves the only user.
unsafe impl Send for Umem {}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::xdp::link::MAX_FRAME_LEN;

    /// A frame written over several chunks lands in them in order, whatever the cuts
    /// between parts and chunks; the bytes of other chunks are left alone.
    #[test]
    fn a_frame_is_written_across_its_chunks() {
        let umem = Umem::new(8 * FRAME).unwrap();
        let chunks = [5 * FRAME as u64, 2 * FRAME as u64, 7 * FRAME as u64];
        let frame: Vec<u8> = (0..MAX_FRAME_LEN).map(|i| (i * 7 + 3) as u8).collect();
        for cut in [
            0,
            1,
            42,
            FRAME - 1,
            FRAME,
            FRAME + 1,
            2 * FRAME,
            MAX_FRAME_LEN,
        ] {
            // SAFETY: this test's own UMEM, no kernel socket.
            unsafe {
                write_across(&umem, &chunks, 0, &frame[..cut]);
                write_across(&umem, &chunks, cut, &frame[cut..]);
            }
            let mut back = Vec::new();
            for (k, &c) in chunks.iter().enumerate() {
                let len = (MAX_FRAME_LEN - k * FRAME).min(FRAME);
                // SAFETY: as above.
                back.extend_from_slice(unsafe { umem.bytes(c, len) });
            }
            assert_eq!(back, frame, "cut at {cut}");
        }
        // SAFETY: as above.
        assert!(unsafe { umem.bytes(0, 2 * FRAME) }.iter().all(|&b| b == 0));
    }

    /// A descriptor is read only inside one chunk of the UMEM: one that crosses its chunk's
    /// end or lies past the UMEM's is refused.
    #[test]
    fn descriptors_outside_a_chunk_are_refused() {
        let umem = Umem::new(2 * FRAME).unwrap();
        let desc = |addr: u64, len: u32| libc::xdp_desc {
            addr,
            len,
            options: 0,
        };
        assert_eq!(
            desc_bytes(&umem, desc(256, 100)).map(<[u8]>::len),
            Some(100)
        );
        assert_eq!(
            desc_bytes(&umem, desc(FRAME as u64 + 256, (FRAME - 256) as u32)).map(<[u8]>::len),
            Some(FRAME - 256)
        );
        assert!(
            desc_bytes(&umem, desc(256, (FRAME - 255) as u32)).is_none(),
            "crosses"
        );
        assert!(
            desc_bytes(&umem, desc(2 * FRAME as u64, 1)).is_none(),
            "past the end"
        );
    }
}

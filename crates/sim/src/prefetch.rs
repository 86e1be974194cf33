//! Software prefetch: the simulator knows which packets, ports and events it will touch a
//! few events ahead, and a large fabric's state does not fit in a core's cache.

/// Starts loading `x`'s cache line without waiting for it.
#[allow(unsafe_code)]
#[inline]
pub(crate) fn prefetch<T>(x: Option<&T>) {
    #[cfg(target_arch = "x86_64")]
    if let Some(x) = x {
        // SAFETY: a prefetch never faults and changes no memory, whatever the address;
        // SSE is part of every x86_64 target.
        unsafe {
            std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(
                (x as *const T).cast::<i8>(),
            )
        };
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = x;
}

//! Cache hints: loading memory ahead of its use where the access pattern is known but the
//! hardware prefetcher cannot see it (the next capture records, the index's table slots).

/// Hints the CPU to load `bytes`' first and last cache lines (no effect where unsupported).
#[inline]
pub fn prefetch(bytes: &[u8]) {
    #[cfg(target_arch = "x86_64")]
    if let (Some(first), Some(last)) = (bytes.first(), bytes.last()) {
        // SAFETY: prefetching is a hint: it reads no memory architecturally and cannot fault;
        // the addresses are those of live slices anyway.
        unsafe {
            use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
            _mm_prefetch::<_MM_HINT_T0>(first as *const u8 as *const i8);
            _mm_prefetch::<_MM_HINT_T0>(last as *const u8 as *const i8);
        }
    }
}

/// Hints the CPU to load the cache line holding `v` (no effect where unsupported).
#[inline]
pub fn prefetch_one<T>(v: &T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: as in `prefetch`: a hint, on the address of a live value.
    unsafe {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        _mm_prefetch::<_MM_HINT_T0>(v as *const T as *const i8);
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = v;
}

/// Ask for every cache line of `bytes` (at most `max` bytes of it).
#[inline]
pub fn prefetch_all(bytes: &[u8], max: usize) {
    let bytes = &bytes[..bytes.len().min(max)];
    let mut i = 0;
    while i < bytes.len() {
        prefetch_one(&bytes[i]);
        i += 64;
    }
}

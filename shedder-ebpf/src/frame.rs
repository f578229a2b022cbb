//! Bounds-checked access to the packet bytes, the same for XDP and TC.

use core::mem::size_of;

/// The packet between `data` and `data_end`, as the verifier sees it.
pub struct Frame {
    data: usize,
    data_end: usize,
}

impl Frame {
    #[inline(always)]
    pub fn new(data: usize, data_end: usize) -> Self {
        Self { data, data_end }
    }

    #[inline(always)]
    pub fn len(&self) -> usize {
        self.data_end - self.data
    }

    /// A pointer to a `T` at `offset`, if the whole `T` lies inside the packet.
    #[inline(always)]
    pub fn ptr_at<T>(&self, offset: usize) -> Option<*mut T> {
        let start = self.data + offset;
        if start + size_of::<T>() > self.data_end {
            return None;
        }
        Some(start as *mut T)
    }

    /// Copies a `T` out of the packet: one load per field, aligned or not
    /// (see `build.rs`), where the kernel has efficient unaligned access.
    #[inline(always)]
    pub fn read<T: Copy>(&self, offset: usize) -> Option<T> {
        // SAFETY: ptr_at checked the bounds.
        self.ptr_at::<T>(offset).map(|p| unsafe { p.read_unaligned() })
    }

    /// Overwrites a `T` in the packet; false if it does not fit.
    #[inline(always)]
    pub fn write<T>(&self, offset: usize, value: T) -> bool {
        match self.ptr_at::<T>(offset) {
            // SAFETY: ptr_at checked the bounds.
            Some(p) => {
                unsafe { p.write_unaligned(value) };
                true
            }
            None => false,
        }
    }
}

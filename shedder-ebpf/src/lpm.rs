//! Keys for the source-CIDR tries, built on the stack the way the verifier
//! requires: every stack access aligned to its size.
//!
//! The programs are compiled to read packet fields with misaligned loads
//! (see `build.rs`), which also frees LLVM to copy an address into a key
//! with misaligned stores. aya's `Key` is packed (its address starts at
//! byte 4), so the key sits in an 8-byte-aligned slot and its words are
//! stored one at a time, each at a 4-byte-aligned offset.

use core::{mem::MaybeUninit, ptr::write_volatile};

use aya_ebpf::maps::lpm_trie::Key;

#[repr(C, align(8))]
pub struct SourceKey<const N: usize>(MaybeUninit<Key<[u8; N]>>);

impl<const N: usize> SourceKey<N> {
    /// A slot for a key; [`SourceKey::exact`] fills it in place, so that
    /// it is never copied.
    #[inline(always)]
    pub fn slot() -> Self {
        SourceKey(MaybeUninit::uninit())
    }

    /// The key for an exact source address (all `N * 8` bits).
    #[inline(always)]
    pub fn exact(&mut self, addr: &[u8; N]) -> &Key<[u8; N]> {
        const { assert!(N % 4 == 0, "an address of whole 32-bit words") };
        let base = self.0.as_mut_ptr() as *mut u32;
        // SAFETY: `base` is the 8-byte-aligned start of the key, which is 4 + N
        // bytes long with N a multiple of 4 (asserted above); each store is one aligned u32,
        // and together they write every byte of it. Volatile, so that LLVM
        // neither merges them into wider stores nor moves the key elsewhere.
        unsafe {
            write_volatile(base, (N * 8) as u32);
            for i in 0..N / 4 {
                let word = u32::from_ne_bytes([addr[4 * i], addr[4 * i + 1], addr[4 * i + 2], addr[4 * i + 3]]);
                write_volatile(base.add(1 + i), word);
            }
            self.0.assume_init_ref()
        }
    }
}

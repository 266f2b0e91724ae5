//! The table's memory: its slots, zeroed, in an anonymous mapping. The mapping is
//! page-aligned, so every slot is one cache line; a large one asks for huge pages, since
//! random look-ups over hundreds of megabytes otherwise miss the TLB on nearly every
//! one (the table is at least 2/5 full, so a huge page is never mostly empty).

use super::entry::Slot;
use memmap2::{Advice, MmapMut};
use std::ops::{Deref, DerefMut};

/// The slots.
#[derive(Debug)]
pub(super) struct Lines {
    store: Store,
}

#[derive(Debug)]
enum Store {
    Mapped(MmapMut),
    /// Where the mapping is refused (an address-space limit): zeroed on the heap, all
    /// committed at once.
    Heap(Box<[Slot]>),
}

impl Lines {
    /// `n` empty slots (`n` > 0).
    pub(super) fn zeroed(n: usize) -> Lines {
        let store = match MmapMut::map_anon(n * std::mem::size_of::<Slot>()) {
            Ok(m) => {
                if m.len() >= HUGE_PAGES_FROM {
                    // Only advice: without transparent huge pages nothing changes.
                    let _ = m.advise(Advice::HugePage);
                }
                Store::Mapped(m)
            }
            Err(_) => Store::Heap(bytemuck::zeroed_slice_box(n)),
        };
        Lines { store }
    }
}

/// Mappings from this size ask for huge pages (two of them at least).
const HUGE_PAGES_FROM: usize = 4 << 20;

impl Deref for Lines {
    type Target = [Slot];
    fn deref(&self) -> &[Slot] {
        match &self.store {
            Store::Mapped(m) => bytemuck::cast_slice(m),
            Store::Heap(b) => b,
        }
    }
}

impl DerefMut for Lines {
    fn deref_mut(&mut self) -> &mut [Slot] {
        match &mut self.store {
            Store::Mapped(m) => bytemuck::cast_slice_mut(m),
            Store::Heap(b) => b,
        }
    }
}

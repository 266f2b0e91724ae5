//! The table's memory: its slots, zeroed, in one anonymous mapping reserved for the
//! table's cap at once. Pages are committed by the kernel only when an entry first
//! touches them, so a relay sized for a million peers that serves a hundred holds a
//! few hundred kilobytes, and the table never grows by copying (no resize stalls the
//! data path). The mapping is page-aligned, so every slot is one cache line.

use super::entry::Slot;
use memmap2::{Advice, MmapMut};
use std::ops::{Deref, DerefMut};

/// The slots.
#[derive(Debug)]
pub(super) struct Lines {
    store: Store,
    huge: bool,
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
            Ok(m) => Store::Mapped(m),
            Err(_) => Store::Heap(bytemuck::zeroed_slice_box(n)),
        };
        Lines { store, huge: false }
    }

    /// Once most pages hold entries, ask for huge pages: a look-up then misses the TLB
    /// far less often. Not earlier, since a huge page commits 2 MiB for one entry.
    pub(super) fn use_huge_pages(&mut self) {
        if let (Store::Mapped(m), false) = (&self.store, self.huge) {
            // Only advice: without transparent huge pages nothing changes.
            let _ = m.advise(Advice::HugePage);
        }
        self.huge = true;
    }
}

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

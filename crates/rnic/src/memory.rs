//! Host memory as the RNIC's DMA engine sees it.
//!
//! The RNIC never holds pointers into caller memory: it reads and writes
//! through this trait, after the MR checks in [`crate::mr`] have proved the
//! access legal. Two implementations:
//!
//! * [`RealMemory`] keeps real bytes, for the UDP engine and byte-exact tests;
//! * [`VirtualMemory`] keeps only lengths, so the simulator can move
//!   millions of messages without copying a byte (payloads travel as
//!   [`Payload::Virtual`]).
//!
//! A [`RealMemory`] made with [`RealMemory::zero_copy`] does not copy a
//! packet's bytes out when the RNIC builds it: the payload is a
//! [`Payload::Host`] gather list of checked ranges, which whoever puts the
//! packet on the wire resolves with [`RealMemory::resolve`] at the moment
//! it sends, the way a NIC's DMA engine reads host memory at transmit time.

use crate::error::{Result, VerbsError};
use std::collections::BTreeMap;

/// Data carried by one packet: real bytes, just a length, or ranges of host
/// memory still to be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Payload {
    Bytes(Vec<u8>),
    Virtual(u32),
    /// Bytes still in the producing RNIC's [`RealMemory`] (zero-copy
    /// transmit). They have no existence of their own: resolve them with
    /// [`RealMemory::resolve`] on the memory that made them.
    Host(Gather),
}

impl Payload {
    // Inlined: a driver asks this for every packet it sends.
    #[inline]
    pub fn len(&self) -> usize {
        match self {
            Payload::Bytes(b) => b.len(),
            Payload::Virtual(n) => *n as usize,
            Payload::Host(g) => g.len(),
        }
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// A borrowed view, or `None` for a [`Payload::Host`] gather list,
    /// which only its memory can read.
    pub fn as_ref(&self) -> Option<PayloadRef<'_>> {
        match self {
            Payload::Bytes(b) => Some(PayloadRef::Bytes(b)),
            Payload::Virtual(n) => Some(PayloadRef::Virtual(*n)),
            Payload::Host(_) => None,
        }
    }
    pub fn empty() -> Payload {
        Payload::Bytes(Vec::new())
    }
}

/// Most ranges one [`Payload::Host`] holds; a packet gathered from more
/// pieces than this is copied into [`Payload::Bytes`] instead. One: a
/// packet's bytes almost always lie in one SGE (pieces that touch merge),
/// and a longer list would make every [`Payload`] — and so every
/// [`crate::Transmit`] the simulator moves, millions a second — bigger
/// (24 bytes with one range, 48 with three).
pub const GATHER_MAX: usize = 1;

/// Up to [`GATHER_MAX`] `(address, length)` ranges of host memory, in
/// order: one packet's worth of a WQE's scatter/gather list.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Gather {
    addrs: [u64; GATHER_MAX],
    lens: [u32; GATHER_MAX],
    n: u8,
}

impl Gather {
    /// Total bytes.
    #[inline]
    pub fn len(&self) -> usize {
        self.lens[..usize::from(self.n)]
            .iter()
            .map(|&l| l as usize)
            .sum()
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// The ranges, in order.
    pub fn ranges(&self) -> impl Iterator<Item = (u64, usize)> + '_ {
        (0..usize::from(self.n)).map(|i| (self.addrs[i], self.lens[i] as usize))
    }
    /// Appends a range; false when full. Adjacent ranges merge.
    fn push(&mut self, addr: u64, len: u32) -> bool {
        let n = usize::from(self.n);
        if n > 0
            && self.addrs[n - 1].wrapping_add(u64::from(self.lens[n - 1])) == addr
            && let Some(l) = self.lens[n - 1].checked_add(len)
        {
            self.lens[n - 1] = l;
            return true;
        }
        if n == GATHER_MAX {
            return false;
        }
        self.addrs[n] = addr;
        self.lens[n] = len;
        self.n += 1;
        true
    }
}

/// The bytes of a [`Gather`] list, borrowed from the memory that holds them.
#[derive(Debug, Clone, Copy)]
pub struct Resolved<'a> {
    parts: [&'a [u8]; GATHER_MAX],
    n: usize,
}

impl<'a> Resolved<'a> {
    /// One slice on its own.
    pub fn one(b: &'a [u8]) -> Self {
        let mut parts: [&[u8]; GATHER_MAX] = [&[]; GATHER_MAX];
        parts[0] = b;
        Resolved { parts, n: 1 }
    }
    pub fn as_slice(&self) -> &[&'a [u8]] {
        &self.parts[..self.n]
    }
    pub fn iter(&self) -> impl Iterator<Item = &'a [u8]> + '_ {
        self.parts[..self.n].iter().copied()
    }
    /// The bytes joined into one vector.
    pub fn concat(&self) -> Vec<u8> {
        self.as_slice().concat()
    }
}

/// A borrowed payload, as handed to [`crate::Rnic::handle_packet`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PayloadRef<'a> {
    Bytes(&'a [u8]),
    Virtual(u32),
}

impl PayloadRef<'_> {
    pub fn len(&self) -> usize {
        match self {
            PayloadRef::Bytes(b) => b.len(),
            PayloadRef::Virtual(n) => *n as usize,
        }
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// The sub-range `[from, from+len)`.
    pub fn slice(&self, from: usize, len: usize) -> PayloadRef<'_> {
        match self {
            PayloadRef::Bytes(b) => PayloadRef::Bytes(&b[from..from + len]),
            PayloadRef::Virtual(_) => PayloadRef::Virtual(len as u32),
        }
    }
}

/// The DMA view of host memory. Callers (the RNIC) check bounds and keys
/// against registered regions first; implementations still refuse ranges
/// they do not hold rather than panic.
pub trait Memory {
    /// Reads `len` bytes at `addr`, appending to `out`.
    fn read_into(&self, addr: u64, len: usize, out: &mut Payload) -> Result<()>;
    /// Writes `data` at `addr`.
    fn write(&mut self, addr: u64, data: PayloadRef<'_>) -> Result<()>;
    /// Reads the 64-bit word at `addr` (host byte order, little-endian).
    fn read_u64(&self, addr: u64) -> Result<u64>;
    /// Writes the 64-bit word at `addr`.
    fn write_u64(&mut self, addr: u64, v: u64) -> Result<()>;
    /// True when `[addr, addr+len)` lies inside one allocation.
    fn contains(&self, addr: u64, len: u64) -> bool;
    /// An empty payload of this memory's kind.
    fn empty_payload(&self) -> Payload;
    /// The payload with a [`Payload::Host`] gather list read into bytes
    /// (others unchanged); `None` when a range is no longer allocated.
    fn materialize(&self, p: Payload) -> Option<Payload> {
        match p {
            Payload::Host(g) => Some(Payload::Virtual(g.len() as u32)),
            p => Some(p),
        }
    }
}

/// Real bytes: a set of allocations at distinct addresses.
#[derive(Debug, Default)]
pub struct RealMemory {
    /// The allocations by address, ascending: [`alloc`](Self::alloc) hands
    /// out rising addresses, so a new one goes at the end, and finding the
    /// one holding an address (two or three times for every packet sent
    /// or received) is a binary search over a few entries rather than a
    /// walk down a B-tree.
    blocks: Vec<(u64, Vec<u8>)>,
    next: u64,
    /// Reads for packets give [`Payload::Host`] ranges, not copies.
    zero_copy: bool,
    /// Time the copies of received payloads (see [`copy_time`](Self::copy_time)).
    time_copies: bool,
    copy_ticks: u64,
    copy_bytes: u64,
}

const BASE: u64 = 0x0000_7f00_0000_0000;
const ALIGN: u64 = 4096;

fn bad(addr: u64, len: u64) -> VerbsError {
    VerbsError::BadAddress { addr, len }
}

impl RealMemory {
    pub fn new() -> Self {
        RealMemory {
            blocks: Vec::new(),
            next: BASE,
            zero_copy: false,
            time_copies: false,
            copy_ticks: 0,
            copy_bytes: 0,
        }
    }

    /// A memory whose packet reads are [`Payload::Host`] gather lists
    /// (checked, but not copied): for a transmitter that resolves them with
    /// [`resolve`](Self::resolve) just before it sends, so the bytes go from
    /// the registered buffer to the socket with no copy in between.
    pub fn zero_copy() -> Self {
        RealMemory {
            zero_copy: true,
            ..RealMemory::new()
        }
    }

    /// Turns on timing of the copies [`Memory::write`] makes (received
    /// payloads placed into registered memory): the one memory copy a
    /// software RNIC makes in user space, which an engine profiling its
    /// stages reports apart from the RNIC logic around it. An engine turns
    /// it on for the packets it samples.
    pub fn time_copies(&mut self, on: bool) {
        self.time_copies = on;
    }

    /// Ticks ([`crate::clock::ticks`]) spent copying payloads in
    /// [`Memory::write`] while timing was on, and the bytes all payload
    /// writes copied (counted whether timed or not).
    pub fn copy_time(&self) -> (u64, u64) {
        (self.copy_ticks, self.copy_bytes)
    }

    /// Reads a [`Payload::Host`] gather list: its ranges as slices, in
    /// order. Fails when a range is no longer allocated (its buffer was
    /// freed after the packet was built).
    pub fn resolve(&self, g: &Gather) -> Result<Resolved<'_>> {
        let mut r = Resolved {
            parts: [&[]; GATHER_MAX],
            n: 0,
        };
        for (addr, len) in g.ranges() {
            r.parts[r.n] = self.get(addr, len)?;
            r.n += 1;
        }
        Ok(r)
    }

    /// Allocates `len` zeroed bytes; returns their address. Allocations are
    /// page-aligned and separated by a guard page, so an off-by-one from one
    /// buffer can never land in another.
    pub fn alloc(&mut self, len: usize) -> u64 {
        let addr = self.next.max(BASE);
        // Addresses only rise, so the list stays sorted.
        self.blocks.push((addr, vec![0; len]));
        let span = (len as u64).div_ceil(ALIGN) * ALIGN + ALIGN;
        self.next = addr + span;
        addr
    }

    /// Frees an allocation made by [`alloc`](Self::alloc).
    pub fn free(&mut self, addr: u64) -> bool {
        match self.blocks.binary_search_by_key(&addr, |(a, _)| *a) {
            Ok(i) => {
                self.blocks.remove(i);
                true
            }
            Err(_) => false,
        }
    }

    /// Index of the allocation that starts at or below `addr`, if any.
    fn below(&self, addr: u64) -> Option<usize> {
        self.blocks
            .partition_point(|(a, _)| *a <= addr)
            .checked_sub(1)
    }

    fn block(&self, addr: u64, len: u64) -> Option<(&Vec<u8>, usize)> {
        let (base, b) = &self.blocks[self.below(addr)?];
        let off = addr - base;
        (off.checked_add(len)? <= b.len() as u64).then_some((b, off as usize))
    }

    fn block_mut(&mut self, addr: u64, len: u64) -> Option<(&mut Vec<u8>, usize)> {
        let i = self.below(addr)?;
        let (base, b) = &mut self.blocks[i];
        let off = addr - *base;
        (off.checked_add(len)? <= b.len() as u64).then_some((b, off as usize))
    }

    /// Copies bytes out (the application reading its own buffer).
    pub fn get(&self, addr: u64, len: usize) -> Result<&[u8]> {
        let (b, off) = self.block(addr, len as u64).ok_or(bad(addr, len as u64))?;
        Ok(&b[off..off + len])
    }

    /// Copies bytes in (the application filling its own buffer).
    pub fn set(&mut self, addr: u64, data: &[u8]) -> Result<()> {
        let n = data.len();
        let (b, off) = self.block_mut(addr, n as u64).ok_or(bad(addr, n as u64))?;
        b[off..off + n].copy_from_slice(data);
        Ok(())
    }
}

impl Memory for RealMemory {
    fn read_into(&self, addr: u64, len: usize, out: &mut Payload) -> Result<()> {
        let src = self.get(addr, len)?;
        match out {
            Payload::Bytes(v) => v.extend_from_slice(src),
            Payload::Virtual(n) => *n += len as u32,
            Payload::Host(g) => {
                if !g.push(addr, len as u32) {
                    // More pieces than a gather list holds: copy them all.
                    let mut v = Vec::with_capacity(g.len() + len);
                    for (a, l) in g.ranges() {
                        v.extend_from_slice(self.get(a, l)?);
                    }
                    v.extend_from_slice(src);
                    *out = Payload::Bytes(v);
                }
            }
        }
        Ok(())
    }
    fn write(&mut self, addr: u64, data: PayloadRef<'_>) -> Result<()> {
        match data {
            PayloadRef::Bytes(b) if self.time_copies => {
                let n = b.len();
                let (blk, off) = self.block_mut(addr, n as u64).ok_or(bad(addr, n as u64))?;
                // Only the copy: finding the block is address translation.
                let t0 = crate::clock::ticks();
                blk[off..off + n].copy_from_slice(b);
                let dt = crate::clock::ticks().wrapping_sub(t0);
                self.copy_ticks += dt;
                self.copy_bytes += n as u64;
                Ok(())
            }
            PayloadRef::Bytes(b) => {
                self.set(addr, b)?;
                self.copy_bytes += b.len() as u64;
                Ok(())
            }
            PayloadRef::Virtual(n) => {
                // A virtual payload written to real memory: the range must be
                // valid, but there are no bytes to place.
                self.get(addr, n as usize).map(|_| ())
            }
        }
    }
    fn read_u64(&self, addr: u64) -> Result<u64> {
        let b = self.get(addr, 8)?;
        let mut w = [0u8; 8];
        w.copy_from_slice(b);
        Ok(u64::from_le_bytes(w))
    }
    fn write_u64(&mut self, addr: u64, v: u64) -> Result<()> {
        self.set(addr, &v.to_le_bytes())
    }
    fn contains(&self, addr: u64, len: u64) -> bool {
        self.block(addr, len).is_some()
    }
    fn materialize(&self, p: Payload) -> Option<Payload> {
        match p {
            Payload::Host(g) => Some(Payload::Bytes(self.resolve(&g).ok()?.concat())),
            p => Some(p),
        }
    }
    fn empty_payload(&self) -> Payload {
        if self.zero_copy {
            Payload::Host(Gather::default())
        } else {
            Payload::Bytes(Vec::new())
        }
    }
}

/// Lengths only: every allocation is a range with no storage behind it.
/// 64-bit words used by atomics are kept, so atomics still behave.
#[derive(Debug, Default)]
pub struct VirtualMemory {
    blocks: BTreeMap<u64, u64>,
    words: BTreeMap<u64, u64>,
    next: u64,
    /// The allocations the last range checks found, `(base, len)`, most
    /// recent first: a flow reads and writes one buffer packet after
    /// packet, and the simulator checks millions of packets, so the map is
    /// searched only on a miss. Several, not one: a simulated host sends
    /// from one buffer and receives into another (or several, with
    /// concurrent flows) packet by packet, and a single entry missed on
    /// nearly every switch between them (a tree search per packet, 0.7 %
    /// of a fat5ms run; issue 12).
    recent: [std::cell::Cell<(u64, u64)>; RECENT],
}

/// How many allocations [`VirtualMemory`] remembers.
const RECENT: usize = 4;

impl VirtualMemory {
    pub fn new() -> Self {
        VirtualMemory {
            next: BASE,
            ..Default::default()
        }
    }
    /// Heap bytes of the allocation and atomic-word maps' entries.
    pub fn heap_bytes(&self) -> u64 {
        crate::footprint::tree(&self.blocks) + crate::footprint::tree(&self.words)
    }

    /// Reserves `len` bytes of address space.
    pub fn alloc(&mut self, len: u64) -> u64 {
        let addr = self.next.max(BASE);
        self.blocks.insert(addr, len);
        self.next = addr + len.div_ceil(ALIGN) * ALIGN + ALIGN;
        addr
    }

    /// Releases a reservation made by [`alloc`](Self::alloc) (and any atomic
    /// words inside it). Addresses are not reused, so a stale key can never
    /// reach a later allocation.
    pub fn free(&mut self, addr: u64) -> bool {
        let Some(len) = self.blocks.remove(&addr) else {
            return false;
        };
        for r in &self.recent {
            if r.get().0 == addr {
                r.set((0, 0));
            }
        }
        let end = addr.saturating_add(len);
        let dead: Vec<u64> = self.words.range(addr..end).map(|(&a, _)| a).collect();
        for a in dead {
            self.words.remove(&a);
        }
        true
    }

    /// Number of live reservations.
    pub fn allocations(&self) -> usize {
        self.blocks.len()
    }

    /// [`Memory::contains`] when no recent allocation holds the range: the
    /// tree is searched, and the allocation found is remembered.
    #[inline(never)]
    fn contains_slow(&self, addr: u64, len: u64) -> bool {
        match self.blocks.range(..=addr).next_back() {
            Some((&base, &n)) if inside(addr, len, base, n) => {
                // First in, first out: the oldest entry makes room.
                for j in (1..RECENT).rev() {
                    self.recent[j].set(self.recent[j - 1].get());
                }
                self.recent[0].set((base, n));
                true
            }
            _ => false,
        }
    }
}

/// Whether `[addr, addr+len)` lies inside the allocation `[base, base+n)`:
/// `addr - base + len <= n` without overflow, written without branches.
#[inline(always)]
fn inside(addr: u64, len: u64, base: u64, n: u64) -> bool {
    let off = addr.wrapping_sub(base);
    (addr >= base) & (len <= n) & (off <= n.wrapping_sub(len))
}

// The range check below runs for every packet the simulator sends or
// receives, and its cache hit is a few compares: inlined into `read_into`
// and `write`, with the tree search on a miss kept apart, so a hit costs
// no second call (26 M fewer instructions on the mid-size fat5ms run;
// issue 12). The RNIC calls these directly, not through a vtable (see
// `qp::Ctx`), so they inline into its packet paths in turn.
impl Memory for VirtualMemory {
    // Inlined into the RNIC's packet paths as well (one read per packet
    // sent, one write per packet received): out of line, the call cost
    // about a third of the hit's instructions.
    #[inline]
    fn read_into(&self, addr: u64, len: usize, out: &mut Payload) -> Result<()> {
        if !self.contains(addr, len as u64) {
            return Err(bad(addr, len as u64));
        }
        match out {
            Payload::Bytes(v) => v.resize(v.len() + len, 0),
            Payload::Virtual(n) => *n += len as u32,
            // Never made here; lengths are all this memory has.
            Payload::Host(g) => *out = Payload::Virtual((g.len() + len) as u32),
        }
        Ok(())
    }
    #[inline]
    fn write(&mut self, addr: u64, data: PayloadRef<'_>) -> Result<()> {
        if self.contains(addr, data.len() as u64) {
            Ok(())
        } else {
            Err(bad(addr, data.len() as u64))
        }
    }
    fn read_u64(&self, addr: u64) -> Result<u64> {
        if !self.contains(addr, 8) {
            return Err(bad(addr, 8));
        }
        Ok(self.words.get(&addr).copied().unwrap_or(0))
    }
    fn write_u64(&mut self, addr: u64, v: u64) -> Result<()> {
        if !self.contains(addr, 8) {
            return Err(bad(addr, 8));
        }
        self.words.insert(addr, v);
        Ok(())
    }
    #[inline]
    fn contains(&self, addr: u64, len: u64) -> bool {
        // (An empty or freed entry has `n == 0`: no range is inside it.)
        // Tested one by one, stopping at the first that holds the range:
        // testing all four without a branch each (sends and receives take
        // turns among them) cut cachegrind's mispredicts by 0.75 M on the
        // mid-size fat5ms run but cost 40 M instructions more (issue 12).
        self.recent.iter().any(|r| {
            let (base, n) = r.get();
            n > 0 && inside(addr, len, base, n)
        }) || self.contains_slow(addr, len)
    }
    fn empty_payload(&self) -> Payload {
        Payload::Virtual(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn real_memory_bounds() {
        let mut m = RealMemory::new();
        let a = m.alloc(100);
        let b = m.alloc(10);
        assert!(b >= a + 4096 + 4096);
        m.set(a + 90, &[1; 10]).unwrap();
        assert!(m.set(a + 91, &[1; 10]).is_err());
        assert!(m.get(a - 1, 1).is_err());
        assert!(m.get(u64::MAX - 3, 8).is_err());
        let mut p = Payload::Bytes(vec![]);
        m.read_into(a + 95, 5, &mut p).unwrap();
        assert_eq!(p, Payload::Bytes(vec![1; 5]));
        m.write_u64(b, 0x0102).unwrap();
        assert_eq!(m.get(b, 2).unwrap(), &[2, 1]);
    }

    #[test]
    fn freed_buffers_are_gone_and_their_neighbours_stay() {
        let mut m = RealMemory::new();
        let bufs: Vec<u64> = (0..5).map(|i| m.alloc(100 + i)).collect();
        for (i, &a) in bufs.iter().enumerate() {
            m.set(a, &[i as u8 + 1; 100]).unwrap();
        }
        assert!(m.free(bufs[2]));
        assert!(!m.free(bufs[2]), "freed twice");
        assert!(!m.free(bufs[1] + 1), "not an allocation's start");
        assert!(m.free(bufs[0]));
        assert!(m.get(bufs[2], 1).is_err());
        assert!(m.get(bufs[0], 1).is_err());
        for i in [1, 3, 4] {
            assert_eq!(m.get(bufs[i], 100).unwrap(), &[i as u8 + 1; 100][..]);
            // The last byte is the buffer's own, one more is past it.
            assert!(m.get(bufs[i] + 99 + i as u64, 1).is_ok());
            assert!(m.get(bufs[i] + 100 + i as u64, 1).is_err());
        }
        // New buffers after frees still land above every other one.
        let c = m.alloc(8);
        assert!(c > bufs[4]);
        m.set(c, &[9; 8]).unwrap();
        assert_eq!(m.get(bufs[4], 1).unwrap(), &[5]);
    }

    #[test]
    fn inside_is_the_checked_range_test() {
        // The branch-free form against the checked arithmetic it replaced,
        // on the edges where overflow or an empty range could slip through.
        let vals = [0, 1, 2, 7, 8, 9, 4096, u64::MAX / 2, u64::MAX - 1, u64::MAX];
        for &addr in &vals {
            for &len in &vals {
                for &base in &vals {
                    for &n in &vals {
                        let want = addr >= base
                            && (addr - base).checked_add(len).is_some_and(|end| end <= n);
                        assert_eq!(inside(addr, len, base, n), want, "{addr} {len} {base} {n}");
                    }
                }
            }
        }
    }

    #[test]
    fn virtual_memory_tracks_only_lengths() {
        let mut m = VirtualMemory::new();
        let a = m.alloc(1 << 30);
        let mut p = Payload::Virtual(0);
        m.read_into(a, 4096, &mut p).unwrap();
        m.read_into(a + 4096, 4096, &mut p).unwrap();
        assert_eq!(p, Payload::Virtual(8192));
        assert!(m.write(a + (1 << 30) - 1, PayloadRef::Virtual(2)).is_err());
        m.write_u64(a, 5).unwrap();
        assert_eq!(m.read_u64(a).unwrap(), 5);
        assert!(m.free(a));
        assert!(!m.free(a));
        assert!(m.read_u64(a).is_err());
        assert_eq!(m.allocations(), 0);
    }

    #[test]
    fn virtual_memory_remembers_buffers_but_never_a_freed_one() {
        // More buffers than it remembers, used in turn: every range check
        // is still exact, and a freed buffer (remembered or not) is
        // refused at once while its neighbours stay.
        let mut m = VirtualMemory::new();
        let bufs: Vec<u64> = (0..RECENT as u64 + 3).map(|i| m.alloc(5000 + i)).collect();
        for round in 0..3 {
            for (i, &a) in bufs.iter().enumerate() {
                let len = 5000 + i as u64;
                assert!(m.contains(a, len), "round {round} buffer {i}");
                assert!(m.contains(a + len - 1, 1));
                assert!(!m.contains(a + len - 1, 2), "past buffer {i}");
                assert!(!m.contains(a - 1, 1), "before buffer {i}");
            }
        }
        // The last few checked are remembered; free one of them and one
        // that is not.
        let (kept, gone_recent, gone_old) = (bufs[1], bufs[bufs.len() - 1], bufs[0]);
        assert!(m.contains(gone_recent, 8));
        assert!(m.free(gone_recent));
        assert!(m.free(gone_old));
        assert!(!m.contains(gone_recent, 1));
        assert!(!m.contains(gone_old, 1));
        assert!(m.write(gone_recent, PayloadRef::Virtual(1)).is_err());
        assert!(m.contains(kept, 5001));
        assert!(!m.contains(0, 0), "no allocation at address 0");
    }

    #[test]
    fn zero_copy_reads_are_checked_ranges_resolved_later() {
        let mut m = RealMemory::zero_copy();
        let a = m.alloc(100);
        let b = m.alloc(100);
        m.set(a, &[7; 100]).unwrap();
        m.set(b, &[9; 100]).unwrap();
        let mut p = m.empty_payload();
        m.read_into(b + 10, 20, &mut p).unwrap();
        // Adjacent ranges merge into one piece.
        m.read_into(b + 30, 10, &mut p).unwrap();
        let Payload::Host(g) = p.clone() else {
            panic!("zero-copy memory copied: {p:?}");
        };
        assert_eq!(g.ranges().collect::<Vec<_>>(), vec![(b + 10, 30)]);
        assert_eq!(p.len(), 30);
        assert!(
            p.as_ref().is_none(),
            "a gather list has no bytes of its own"
        );
        // Read at send time: a change made before then is what goes out.
        m.set(b + 10, &[1]).unwrap();
        let mut want = vec![9u8; 30];
        want[0] = 1;
        assert_eq!(m.resolve(&g).unwrap().concat(), want);
        assert_eq!(m.materialize(p.clone()), Some(Payload::Bytes(want)));
        // Out of bounds is refused when the packet is built, as before.
        let mut q = m.empty_payload();
        assert!(m.read_into(a + 90, 20, &mut q).is_err());
        // A buffer freed under a built packet cannot be read.
        assert!(m.free(b));
        assert!(m.resolve(&g).is_err());
        assert_eq!(m.materialize(p), None);
    }

    #[test]
    fn a_gather_list_that_overflows_becomes_a_copy() {
        let mut m = RealMemory::zero_copy();
        let a = m.alloc(4096);
        m.set(a, &(0..=255u8).cycle().take(4096).collect::<Vec<_>>())
            .unwrap();
        let mut p = m.empty_payload();
        // Non-adjacent pieces: every other 100 bytes.
        for k in 0..(GATHER_MAX as u64 + 2) {
            m.read_into(a + k * 200, 100, &mut p).unwrap();
        }
        let want: Vec<u8> = (0..(GATHER_MAX as u64 + 2))
            .flat_map(|k| m.get(a + k * 200, 100).unwrap().to_vec())
            .collect();
        assert_eq!(p, Payload::Bytes(want));
    }
}
